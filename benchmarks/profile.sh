#!/usr/bin/env bash
# profile.sh: a CPU profile and an allocation profile of the app under hey
# (or wrk), through the profiler on its metrics listener (step 09), written
# as one file: a header, the load generator's summary, and go tool pprof -top
# of each, sorted by cumulative time (where the time goes, callers included)
# and by flat time (which functions spend it).
#
#   benchmarks/profile.sh [options] create|redirect|healthz
#
#   -r REV       profile the app at git revision REV (e.g. ':/^Step 09:'),
#                built from its own files; default: this tree
#   -s SECONDS   length of the CPU profile (default 10); the load runs 4 s longer
#   -c CONC      the load's concurrency (default 50)
#   -g GEN       hey (default) or wrk (2 threads; near the top hey is the
#                ceiling, step 12); wrk does not do create
#   -o FILE      where to write (default: stdout)
#   -l LABEL     a free-text label for the header
#   VAR=VALUE    after the endpoint: settings for the app
#
# It starts a Redis of its own and a new database seeded with 10,000 links;
# the app gets CREATE_RATE=1000000 (counted, never refused) and the
# settings given. Needs go, git, psql, redis-server, redis-cli, curl, hey
# (or wrk).
set -euo pipefail

rev='' secs=10 conc=50 out='' label='' gen=hey
while getopts r:s:c:o:l:g: opt; do
	case $opt in
	r) rev=$OPTARG ;; s) secs=$OPTARG ;; c) conc=$OPTARG ;; o) out=$OPTARG ;; l) label=$OPTARG ;;
	g) gen=$OPTARG ;;
	*) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
what=$1; shift
settings="$*"
case $gen/$what in
hey/create | hey/redirect | hey/healthz | wrk/redirect | wrk/healthz) ;;
*) echo "profile.sh: -g hey or wrk, and create, redirect or healthz (create with hey only), not -g $gen $what" >&2; exit 2 ;;
esac
. "$(dirname "$0")/lib.sh"
sitting profile go git psql redis-server redis-cli curl "$gen"

if [ -n "$rev" ]; then
	commit=$(git rev-parse --short=12 "$rev")
	mkdir "$tmp/src"
	git archive "$commit" | tar -x -C "$tmp/src"
	(cd "$tmp/src" && go build -o "$tmp/shortener" .)
	built="commit $commit ($(git log -1 --format=%s "$commit")), code id $(sh "$here/codeid.sh" "$tmp/src")"
else
	go build -o "$tmp/shortener" .
	built="this tree: commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree)'), code id $(sh "$here/codeid.sh")"
fi
seeded_db "$admin" 10000
start_redis "$tmp"
port=$(freeport) mport=$(freeport)
env ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" DATABASE_URL="$dburl" REDIS_URL="redis://127.0.0.1:$redis_port/0" \
	CREATE_RATE=1000000 CREATE_BURST=1000000 "$@" "$tmp/shortener" 2>"$tmp/app.log" &
pid=$!
wait_healthy "http://127.0.0.1:$port" "$tmp/app.log"
base="http://127.0.0.1:$port"
case $what in
create) set -- -m POST -T application/json -d '{"url":"https://example.com/some/path?q=1"}' "$base/shorten" ;;
redirect) set -- -disable-redirects "$base/$code" ;;
healthz) set -- "$base/healthz" ;;
esac
if [ "$gen" = wrk ]; then
	# wrk never follows a redirect; its last argument is the URL.
	for url; do :; done
	wrk -t2 -c"$conc" -d"$((secs + 4))s" --latency "$url" >"$tmp/load.txt" &
else
	hey -z "$((secs + 4))s" -c "$conc" "$@" >"$tmp/load.txt" &
fi
loadpid=$!
sleep 2
curl -fsS -o "$tmp/cpu.pprof" "http://127.0.0.1:$mport/debug/pprof/profile?seconds=$secs"
# Allocations since the start, in bytes (alloc_space), at the end of the load.
curl -fsS -o "$tmp/heap.pprof" "http://127.0.0.1:$mport/debug/pprof/allocs"
wait "$loadpid"
{
	echo "# profile: $what ${label:+($label)}"
	echo "# made by:   benchmarks/profile.sh${rev:+ -r '$rev'} -g $gen -s $secs -c $conc $what${settings:+ $settings}; $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# app:       $built; Postgres (10,000 links) and Redis; CREATE_RATE=1000000"
	if [ "$gen" = wrk ]; then
		echo "# load:      wrk -t2 -c$conc -d$((secs + 4))s, on the same 2 cores; CPU profile over $secs s from 2 s in (Go's sampling profiler, 100 Hz)"
	else
		echo "# load:      hey -z $((secs + 4))s -c $conc, on the same 2 cores; CPU profile over $secs s from 2 s in (Go's sampling profiler, 100 Hz)"
	fi
	echo "# machine:   $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), $(nproc) cores; $(go version | cut -d' ' -f3)"
	grep -E 'Requests/sec|^  \[|requests in|Non-2xx|Socket errors' "$tmp/load.txt" | sed "s/^/# $gen: /"
	echo
	echo "===== CPU, by cumulative time (go tool pprof -top -cum -nodecount=45) ====="
	go tool pprof -top -cum -nodecount=45 "$tmp/shortener" "$tmp/cpu.pprof" 2>/dev/null
	echo
	echo "===== CPU, by flat time (go tool pprof -top -nodecount=30) ====="
	go tool pprof -top -nodecount=30 "$tmp/shortener" "$tmp/cpu.pprof" 2>/dev/null
	echo
	echo "===== allocations, bytes, by flat (go tool pprof -sample_index=alloc_space -top -nodecount=25) ====="
	go tool pprof -sample_index=alloc_space -top -nodecount=25 "$tmp/shortener" "$tmp/heap.pprof" 2>/dev/null
	echo
	echo "===== allocations, count, by flat (go tool pprof -sample_index=alloc_objects -top -nodecount=25) ====="
	go tool pprof -sample_index=alloc_objects -top -nodecount=25 "$tmp/shortener" "$tmp/heap.pprof" 2>/dev/null
} | sed "s|$tmp/|(temporary) |g" >"${out:-/dev/stdout}"
