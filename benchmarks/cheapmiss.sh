#!/usr/bin/env bash
# cheapmiss.sh: step 37's sitting (-i: step 38's). Two builds of the app, A and B, on
# step 14's long tail (LINKS links kept by benchmarks/longtail.sh, codes
# drawn Zipf over all of them, caches smaller than the links), measured
# against each other in interleaved rounds with wrk, each figure a ratio
# to the same app's /healthz in the same round.
#
#   benchmarks/cheapmiss.sh [-q] [-P] [-G] [-R RATE] [-i N] [-o FILE] [-n ROUNDS] [-d SECONDS] [-w SECONDS]
#                           [-l LINKS] [-s S] [-c CONNS] [-A 'VAR=VALUE ...'] [-B 'VAR=VALUE ...'] A B
#
#   A, B      two commits (anything git rev-parse takes: HEAD, ':/^Step 36:'),
#             each built in a worktree of its own; the same commit twice with
#             -A or -B
#   -A, -B    more environment for A's or B's app (-A LOOKUP_BATCH=1)
#   -s S      the Zipf exponent (default 1.0; step 14 also ran 0.8)
#   -n, -d    rounds (default 7) and seconds per run (default 10)
#   -w SECS   each app's warm-up before the rounds, replaying a stream of
#             its own (default 60)
#   -l LINKS  links (default 10,000,000); the database is longtail.sh's,
#             seeded by it if missing (benchmarks/longtail.sh -p seed)
#   -c CONNS  wrk's connections (default 50)
#   -i N      N instances a side behind nginx (deploy/replicas.sh up N of the
#             side's tree, DB_MAX_OPEN_CONNS=8 each, NGINX_LIMIT_CONN raised
#             so that the load generator's one address is not refused), the
#             side's Redis shared by its N, every run through nginx, /healthz
#             too; default 1, no nginx (step 37's sitting). Not with -P
#   -R RATE   after the rounds, ROUNDS more of each app at RATE requests a
#             second on schedule (vegeta, open loop, redirects not followed,
#             5 s timeout), alternating which goes first, each -d seconds of
#             a fresh stream (seeds 500+2i, 501+2i): latency at a fixed rate
#   -P        after the rounds, a CPU profile of each app (its pprof, on its
#             metrics listener) over -d seconds of one more Zipf run (seeds
#             990, 991), printed as go tool pprof -top, by cumulative time
#   -o FILE   where the output goes (default: standard output)
#   -G        in each round, after the four runs, pgbench's select-only
#             (pgbench -S -M prepared -c 8 -j 2 -T SECONDS, a database
#             of its own at scale 10, made for the sitting and dropped
#             after): the floor a one-row query cannot beat here, in
#             queries a second and Postgres CPU per query
#   -q        quick: 100,000 links, 1 round of 1 s, 1 s warm-up
#
# Each app: the kept database (shared: they only read it, and write
# clicks, whose tables the script empties first), a Redis of its own capped as in step 14's sitting (maxmemory
# 64mb, allkeys-lfu; with -i, one per side), LOCAL_CACHE_BYTES=33554432 (32 MiB) per instance, the rest the
# commit's defaults but what -A/-B add. Each round runs A's /healthz and
# Zipf, then B's; even rounds B first, Zipf first. Every run replays a
# fresh stream (benchmarks/zipf, a seed of its own: A and B never share a
# stream, so neither finds Postgres's buffers warmed by the other's
# draws). Per run: req/s; the app's (with -i, its N instances' summed),
# nginx's (0 without -i), every postgres process's and its
# Redis's CPU (user+system, /proc) per response; from the app's /metrics
# before and after, the codes looked up in Postgres per response
# (shortener_db_lookups_total) and, where the app has it, the lookup
# queries (shortener_db_lookup_batch_size_count: without it, one query
# per code).
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# git, psql, redis-server, redis-cli, curl and wrk (and vegeta for -R,
# nginx for -i).
# With the defaults about 8 minutes after the builds (and a few more to
# seed, the first time); -R adds 2 runs a round.
set -euo pipefail

rounds=7 dur=10 warm=60 links=10000000 s=1.0 conc=50 out='' env_a='' env_b='' quick='' prof='' rate='' instances=1 floor=''
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts qPGR:i:o:n:d:w:l:s:c:A:B: opt; do
	case $opt in
	q) rounds=1 dur=1 warm=1 links=100000 quick=' -q' ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; w) warm=${OPTARG%s} ;; l) links=$OPTARG ;;
	s) s=$OPTARG ;; c) conc=$OPTARG ;; A) env_a=$OPTARG ;; B) env_b=$OPTARG ;; P) prof=1 ;; G) floor=1 ;; R) rate=$OPTARG ;; i) instances=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
for v in "$rounds" "$dur" "$warm" "$links" "$conc" "$instances"; do case $v in '' | *[!0-9]* | 0*) echo "cheapmiss.sh: -n, -d, -w, -l, -c and -i take a whole number above 0, not '$v'" >&2; exit 2 ;; esac; done
[ "$instances" = 1 ] || [ -z "$prof" ] || { echo "cheapmiss.sh: -P profiles one app, not -i $instances behind nginx" >&2; exit 2; }
[ -z "$floor" ] || command -v pgbench >/dev/null || { echo "cheapmiss.sh: -G needs pgbench (Debian/Ubuntu: sudo apt-get install postgresql-contrib)" >&2; exit 1; }
[ "$instances" = 1 ] || command -v nginx >/dev/null || { echo "cheapmiss.sh: -i needs nginx (Debian/Ubuntu: sudo apt-get install nginx)" >&2; exit 1; }
case $rate in '' | [1-9] | [1-9]*[0-9]) [ -z "${rate//[0-9]/}" ] || { echo "cheapmiss.sh: -R takes requests a second, not '$rate'" >&2; exit 2; } ;; *) echo "cheapmiss.sh: -R takes requests a second, not '$rate'" >&2; exit 2 ;; esac
[ -z "$rate" ] || command -v vegeta >/dev/null || { echo "cheapmiss.sh: vegeta not found; go install github.com/tsenart/vegeta/v12@v12.13.0" >&2; exit 1; }
case $s in [0-9].[0-9] | [0-9].[0-9][0-9]) ;; *) echo "cheapmiss.sh: -s takes an exponent like 1.0, not '$s'" >&2; exit 2 ;; esac
read -r -a words_a <<<"$env_a"
read -r -a words_b <<<"$env_b"
for e in ${words_a[@]+"${words_a[@]}"} ${words_b[@]+"${words_b[@]}"}; do case $e in [A-Z_]*=*) ;; *) echo "cheapmiss.sh: -A/-B take VAR=VALUE words, not '$e'" >&2; exit 2 ;; esac; done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
[ -z "$out" ] || : >"$out" || { echo "cheapmiss.sh: cannot write $out" >&2; exit 2; }
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
for tool in go git psql redis-server redis-cli curl wrk; do
	command -v "$tool" >/dev/null || { echo "cheapmiss.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
. benchmarks/lib.sh # step_tree, start_redis, freeport, medians, ticks_of, ticks_named
[ "$(ticks_named postgres)" -gt 0 ] || { echo "cheapmiss.sh: no process named postgres in /proc: Postgres's CPU cannot be measured here" >&2; exit 1; }
# commit REV: the commit REV names (":/^Step 36:" cannot take a ^{commit} after it).
commit() {
	local h
	h=$(git rev-parse --verify -q "$1") && [ "$(git cat-file -t "$h")" = commit ] && echo "$h" ||
		{ echo "cheapmiss.sh: no commit $1" >&2; exit 2; }
}
hash_a=$(commit "$1")
hash_b=$(commit "$2")
[ "$hash_a $env_a" != "$hash_b $env_b" ] || { echo "cheapmiss.sh: A and B are the same commit with the same environment" >&2; exit 2; }

# The kept database: longtail.sh's own check, and its seeding if needed.
seedout=$(benchmarks/longtail.sh -p seed -l "$links") || { echo "cheapmiss.sh: benchmarks/longtail.sh -p seed failed" >&2; exit 1; }
nq=${admin%%\?*}
dburl="${nq%/*}/shortener_longtail_$links${admin#"$nq"}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cheapmiss.XXXXXX")
pids='' redis_ports='' trees='' replicas='' floordb=''
cleanup() {
	[ -z "$floordb" ] || psql "$admin" -qc "DROP DATABASE IF EXISTS $floordb" >/dev/null 2>&1 || true
	for r in $replicas; do (cd "${r%%:*}" && REPLICAS_DIR="${r#*:}" deploy/replicas.sh down >/dev/null 2>&1) || true; done
	for p in $pids ${app_pid:-}; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	for p in $redis_ports ${redis_port:-}; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	for t in $trees; do git worktree remove --force "$t" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hz=$(getconf CLK_TCK)
if [ -n "$floor" ]; then
	floordb="shortener_pgbench_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
	psql "$admin" -qc "CREATE DATABASE $floordb" >/dev/null
	flurl="${nq%/*}/$floordb${admin#"$nq"}"
	pgbench -i -q -s 10 "$flurl" >"$tmp/pgbench-init" 2>&1 || { cat "$tmp/pgbench-init" >&2; exit 1; }
fi
psql "$dburl" -qc 'TRUNCATE click_counts, click_events' >/dev/null
go build -o "$tmp/zipf" ./benchmarks/zipf

# start SIDE HASH ENV: build, a capped Redis, the app (with -i, N of them
# behind nginx); sets url_, murl_ (metrics addresses, space-separated),
# pid_ (the apps' pids, comma-separated), npid_ (nginx's, or empty),
# rpid_, id_ and logs_ (the apps' logs) for SIDE.
start() {
	local side=$1 hash=$2 extra=$3 tree port mport rdir k master
	tree="$tmp/tree-$side"
	trees="$trees $tree"
	step_tree "$hash" "$tree" "$tmp/app-$side"
	printf -v "id_$side" '%s' "commit $(git rev-parse --short=12 "$hash") ($(git log -1 --format=%s "$hash")), code id $(sh benchmarks/codeid.sh "$tree")${extra:+, with $extra}"
	mkdir -p "$tmp/redis-$side"
	start_redis "$tmp/redis-$side" 64mb
	redis_ports="$redis_ports $redis_port"
	printf -v "rpid_$side" '%s' "$(redis-cli -p "$redis_port" info server | tr -d '\r' | sed -n 's/^process_id://p')"
	port=$(freeport) mport=$(freeport)
	local -a words=()
	read -r -a words <<<"$extra"
	if [ "$instances" -gt 1 ]; then
		rdir="$tmp/replicas-$side"
		replicas="$replicas $tree:$rdir"
		(cd "$tree" && env REPLICAS_DIR="$rdir" NGINX_PORT="$port" APP_PORT_BASE="$(freeport)" METRICS_PORT_BASE="$mport" NGINX_IPV6=0 \
			NGINX_LIMIT_CONN=10000 DB_MAX_OPEN_CONNS=8 DATABASE_URL="$dburl" REDIS_URL="redis://127.0.0.1:$redis_port/0" \
			LOCAL_CACHE_BYTES=33554432 ${words[@]+"${words[@]}"} deploy/replicas.sh up "$instances") >"$tmp/$side-up.log" 2>&1 ||
			{ cat "$tmp/$side-up.log" >&2; exit 1; }
		printf -v "pid_$side" '%s' "$(cat "$rdir"/app-*.pid | paste -sd, -)"
		master=$(cat "$rdir/nginx/nginx.pid")
		printf -v "npid_$side" '%s' "$master$(pgrep -P "$master" | sed 's/^/,/' | tr -d '\n')"
		printf -v "url_$side" '%s' "http://127.0.0.1:$port"
		printf -v "murl_$side" '%s' "$(for k in $(seq 1 "$instances"); do printf 'http://127.0.0.1:%s ' $((mport + k - 1)); done)"
		printf -v "logs_$side" '%s' "$(for k in $(seq 1 "$instances"); do printf '%s/app-%s.log ' "$rdir" "$k"; done)"
		return
	fi
	env DATABASE_URL="$dburl" REDIS_URL="redis://127.0.0.1:$redis_port/0" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" \
		LOCAL_CACHE_BYTES=33554432 ${words[@]+"${words[@]}"} "$tmp/app-$side" 2>"$tmp/$side-server.log" &
	app_pid=$!
	pids="$pids $app_pid"
	wait_healthy "http://127.0.0.1:$port" "$tmp/$side-server.log"
	printf -v "url_$side" '%s' "http://127.0.0.1:$port"
	printf -v "murl_$side" '%s' "http://127.0.0.1:$mport"
	printf -v "pid_$side" '%s' "$app_pid"
	printf -v "npid_$side" '%s' ''
	printf -v "logs_$side" '%s' "$tmp/$side-server.log"
}
start a "$hash_a" "$env_a"
start b "$hash_b" "$env_b"
# Each app's Bloom filter is built from the database in the background:
# its warm-up starts once the filter is trusted, or at once for an app
# with no filter.
for m in $murl_a $murl_b; do
	for _ in $(seq 1 600); do
		# grep without -q reads to the end: the app's metrics handler
		# logs a broken pipe when the reader hangs up early.
		curl -fs "$m/metrics" | grep '^shortener_bloom_trusted 0' >/dev/null || break
		sleep 0.5
	done
done

# lookups 'MURL ...': codes looked up in Postgres and lookup queries, so
# far, summed over the apps. An
# app with LOOKUP_BATCH=1 has the histogram but observes nothing in it: a
# run whose count did not move is counted a query per code (run's awk).
lookups() {
	local m
	for m in $1; do curl -fs "$m/metrics" || { echo "cheapmiss.sh: $m/metrics did not answer" >&2; exit 1; }; done |
		awk '/^shortener_db_lookups_total/ {c += $2} /^shortener_db_lookup_batch_size_count/ {q += $2; has = 1}
		END {printf "%d %d\n", c, has ? q : c}'
}
# nticks PIDS: ticks_pids, or 0 for none (no nginx).
nticks() { if [ -n "$1" ]; then ticks_pids "$1"; else echo 0; fi; }
# run SIDE WHAT SEED FILE: one wrk run (WHAT healthz or zipf, the latter a
# fresh stream of SEED); prints "req/s app_us nginx_us pg_us redis_us codes/resp queries/resp bad".
run() {
	local side=$1 what=$2 seed=$3 f=$4 url murl pid npid rpid a0 a1 n0 n1 p0 p1 r0 r1 l0 l1
	url=$(eval echo "\$url_$side") murl=$(eval echo "\$murl_$side")
	pid=$(eval echo "\$pid_$side") npid=$(eval echo "\$npid_$side") rpid=$(eval echo "\$rpid_$side")
	[ "$what" != zipf ] || "$tmp/zipf" -links "$links" -s "$s" -n $((dur * 100000)) -seed "$seed" >"$tmp/stream"
	l0=$(lookups "$murl")
	a0=$(ticks_pids "$pid") n0=$(nticks "$npid") p0=$(ticks_named postgres) r0=$(ticks_of "$rpid")
	if [ "$what" = zipf ]; then
		ZIPF_STREAM=$tmp/stream ZIPF_THREADS=2 wrk -t2 -c"$conc" -d"${dur}s" -s benchmarks/zipf.lua "$url" >"$f" 2>&1 || { cat "$f" >&2; exit 1; }
	else
		wrk -t2 -c"$conc" -d"${dur}s" "$url/healthz" >"$f" 2>&1 || { cat "$f" >&2; exit 1; }
	fi
	a1=$(ticks_pids "$pid") n1=$(nticks "$npid") p1=$(ticks_named postgres) r1=$(ticks_of "$rpid")
	l1=$(lookups "$murl")
	awk -v a=$((a1 - a0)) -v ng=$((n1 - n0)) -v p=$((p1 - p0)) -v rr=$((r1 - r0)) -v hz="$hz" -v l0="$l0" -v l1="$l1" '
		/^Requests\/sec:/ {r = $2} / requests in / {n = $1}
		/Non-2xx or 3xx/ {b += $NF} /Socket errors/ {gsub(",", ""); b += $4 + $6 + $8 + $10}
		/^zipf.lua: responses not 302:/ {b += $5} /^zipf.lua: WARNING/ {b++}
		END {split(l0, x, " "); split(l1, y, " ")
			printf "%.0f %.1f %.1f %.1f %.1f %.3f %.3f %d\n", r, a / hz / n * 1e6, ng / hz / n * 1e6, p / hz / n * 1e6, rr / hz / n * 1e6, (y[1] - x[1]) / n, (y[2] > x[2] ? y[2] - x[2] : y[1] - x[1]) / n, b + 0}' "$f"
}

for side in a b; do
	"$tmp/zipf" -links "$links" -s "$s" -n $((warm * 100000)) -seed "$([ $side = a ] && echo 900 || echo 901)" >"$tmp/warm"
	ZIPF_STREAM=$tmp/warm ZIPF_THREADS=2 wrk -t2 -c"$conc" -d"${warm}s" -s benchmarks/zipf.lua "$(eval echo "\$url_$side")" >"$tmp/$side-warm" 2>&1 ||
		{ cat "$tmp/$side-warm" >&2; exit 1; }
done

for i in $(seq 1 "$rounds"); do
	progress "round $i of $rounds"
	if [ $((i % 2)) = 1 ]; then order="a:healthz a:zipf b:healthz b:zipf"; else order="b:zipf b:healthz a:zipf a:healthz"; fi
	for job in $order; do
		side=${job%%:*} what=${job#*:}
		seed=$((2 * i + $([ "$side" = a ] && echo 0 || echo 1)))
		run "$side" "$what" "$seed" "$tmp/$i-$side-$what" >"$tmp/$i-$side-$what.sum"
	done
	echo "$i $(cut -d' ' -f1 "$tmp/$i-a-healthz.sum") $(cat "$tmp/$i-a-zipf.sum") $(cut -d' ' -f1 "$tmp/$i-b-healthz.sum") $(cat "$tmp/$i-b-zipf.sum")" >>"$tmp/rows"
	if [ -n "$floor" ]; then
		p0=$(ticks_named postgres)
		pgbench -S -M prepared -c 8 -j 2 -T "$dur" -n "$flurl" >"$tmp/$i-pgbench" 2>&1 || { cat "$tmp/$i-pgbench" >&2; exit 1; }
		p1=$(ticks_named postgres)
		awk -v i="$i" -v p=$((p1 - p0)) -v hz="$hz" '/^number of transactions actually processed:/ {n = $NF} /^tps = / {t = $3}
			END {if (n > 0) printf "%s %.0f %.1f\n", i, t, p / hz / n * 1e6; else {print "cheapmiss.sh: pgbench processed nothing" > "/dev/stderr"; exit 1}}' \
			"$tmp/$i-pgbench" >>"$tmp/floor-rows"
	fi
done

# The fixed rate, after the rounds: vegeta's latencies, in µs, per run.
# fixed SIDE SEED FILE: prints "p50 p99 max success".
fixed() {
	local url
	url=$(eval echo "\$url_$1")
	"$tmp/zipf" -links "$links" -s "$s" -n $((dur * rate + rate)) -seed "$2" | sed "s|^|GET $url/|" >"$tmp/targets"
	vegeta attack -rate="$rate/s" -duration="${dur}s" -redirects=-1 -timeout=5s -targets="$tmp/targets" >"$3.bin" || { echo "cheapmiss.sh: vegeta failed" >&2; exit 1; }
	vegeta report -type=json <"$3.bin" >"$3.json"
	# Its error set lists each distinct error, with its URL: at most 10 kept.
	vegeta report <"$3.bin" | awk '/^Error Set:/ {e = 1; print; next} !e || ++n <= 10 {print} END {if (n > 10) printf "(%d more distinct errors not shown)\n", n - 10}' >"$3"
	awk '{
		match($0, /"50th":[0-9]+/); p50 = substr($0, RSTART + 7, RLENGTH - 7)
		match($0, /"99th":[0-9]+/); p99 = substr($0, RSTART + 7, RLENGTH - 7)
		match($0, /"max":[0-9]+/); mx = substr($0, RSTART + 6, RLENGTH - 6)
		match($0, /"success":[0-9.]+/); ok = substr($0, RSTART + 10, RLENGTH - 10)
		printf "%.0f %.0f %.0f %s\n", p50 / 1000, p99 / 1000, mx / 1000, ok }' "$3.json"
}
fixed_rounds=''
[ -z "$rate" ] || fixed_rounds=$(seq 1 "$rounds")
for i in $fixed_rounds; do
	if [ $((i % 2)) = 1 ]; then order="a b"; else order="b a"; fi
	for side in $order; do
		fixed "$side" "$((500 + 2 * i + $([ "$side" = a ] && echo 0 || echo 1)))" "$tmp/fixed-$i-$side" >"$tmp/fixed-$i-$side.sum"
	done
	echo "$i $(cat "$tmp/fixed-$i-a.sum") $(cat "$tmp/fixed-$i-b.sum")" >>"$tmp/fixed-rows"
done

# The profiles, after the rounds: wrk runs 4 s longer than the profile.
for side in ${prof:+a b}; do
	"$tmp/zipf" -links "$links" -s "$s" -n $(((dur + 4) * 100000)) -seed "$([ $side = a ] && echo 990 || echo 991)" >"$tmp/stream"
	ZIPF_STREAM=$tmp/stream ZIPF_THREADS=2 wrk -t2 -c"$conc" -d"$((dur + 4))s" -s benchmarks/zipf.lua "$(eval echo "\$url_$side")" >"$tmp/$side-prof-wrk" 2>&1 &
	wpid=$!
	sleep 2
	curl -fsS -o "$tmp/$side.pprof" "$(eval echo "\$murl_$side")/debug/pprof/profile?seconds=$dur" || { echo "cheapmiss.sh: the profile of $side failed" >&2; exit 1; }
	wait "$wpid" || { cat "$tmp/$side-prof-wrk" >&2; exit 1; }
done

{
	echo "# the long tail, A against B: Zipf s=$s over $links links, each over its own /healthz, in interleaved rounds (one sitting)"
	echo "# made by:   benchmarks/cheapmiss.sh$quick${prof:+ -P}${floor:+ -G}${rate:+ -R $rate}$([ "$instances" = 1 ] || echo " -i $instances") -n $rounds -d $dur -w $warm -l $links -s $s -c $conc${env_a:+ -A '$env_a'}${env_b:+ -B '$env_b'} $1 $2;"
	echo "#            at commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version') (shared_buffers $(psql "$admin" -Atc 'show shared_buffers')), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
	echo "# A:         $id_a"
	echo "# B:         $id_b"
	echo "# database:  $seedout"
	if [ "$instances" = 1 ]; then
		echo "# apps:      both running throughout on that database, each with a Redis of its own (maxmemory 64mb, allkeys-lfu) and"
		echo "#            LOCAL_CACHE_BYTES=33554432; loaded one at a time; each warmed first by ${warm} s of its own stream (seeds 900, 901)"
	else
		echo "# apps:      each side $instances instances of its build behind an nginx of its own (its tree's deploy/replicas.sh up $instances,"
		echo "#            NGINX_IPV6=0 NGINX_LIMIT_CONN=10000 DB_MAX_OPEN_CONNS=8), all running throughout on that database; each"
		echo "#            side's $instances share one Redis (maxmemory 64mb, allkeys-lfu); LOCAL_CACHE_BYTES=33554432 per instance;"
		echo "#            every run (/healthz too) through the side's nginx; sides loaded one at a time; each warmed first by"
		echo "#            ${warm} s of its own stream (seeds 900, 901) through its nginx"
		echo "# nginx:     $(nginx -v 2>&1 | sed 's/.*nginx\///')"
	fi
	echo "# load:      wrk -t2 -c$conc -d${dur}s; zipf: benchmarks/zipf.lua replaying a fresh stream per run (round i: A seed 2i, B seed 2i+1)"
	echo "# order:     odd rounds A /healthz, A zipf, B /healthz, B zipf; even rounds the reverse"
	echo "# cpu:       user+system from /proc over the run, µs per response: the app's (with several, all summed), nginx's (master"
	echo "#            and workers; 0: no nginx), every postgres process's, the side's Redis's"
	echo "# pg:        from the apps' /metrics, summed: codes looked up in Postgres per response, and lookup queries per response"
	echo "# bad:       wrk's statuses outside 200-399 and socket errors, zipf.lua's statuses but 302, a thread past its slice"
	echo "#"
	echo "# A. per run"
	echo "# round  hA  zipfA app_usA nginx_usA pg_usA redis_usA codesA queriesA badA  hB  zipfB app_usB nginx_usB pg_usB redis_usB codesB queriesB badB"
	medians <"$tmp/rows" | sed 's/^/# /'
	echo "#"
	echo "# B. within each round: zipf over /healthz for each; B's over A's for zipf and for /healthz; B's CPU per"
	echo "#    response minus A's (app, nginx, postgres, redis, µs); and for each, app CPU per code looked up in Postgres (µs,"
	echo "#    all of the run's app CPU over those codes: an upper bound on what a miss costs the app)"
	echo "# round  zA/hA  zB/hB  zB/zA  hB/hA  app_usB-A  nginx_usB-A  pg_usB-A  redis_usB-A  app_per_codeA  app_per_codeB"
	awk '{printf "%s %.3f %.3f %.3f %.3f %.1f %.1f %.1f %.1f %.1f %.1f\n", $1, $3 / $2, $12 / $11, $12 / $3, $11 / $2, $13 - $4, $14 - $5, $15 - $6, $16 - $7,
		($8 > 0 ? $4 / $8 : 0), ($17 > 0 ? $13 / $17 : 0)}' "$tmp/rows" | medians | sed 's/^/# /'
	if [ -n "$floor" ]; then
		echo "#"
		echo "# D. the floor, after each round's four runs: pgbench -S -M prepared -c 8 -j 2 -T $dur (select-only, one row by"
		echo "#    primary key) on a database of its own, pgbench -i -s 10; queries a second (tps) and every postgres process's"
		echo "#    CPU per query (µs)"
		echo "# round  tps  pg_us_per_query"
		medians <"$tmp/floor-rows" | sed 's/^/# /'
	fi
	for i in $(seq 1 "$rounds"); do for side in a b; do for what in healthz zipf; do
		printf '\n===== round %s, %s, %s =====\n' "$i" "$(echo $side | tr ab AB)" "$what"; cat "$tmp/$i-$side-$what"
	done; done
	[ -z "$floor" ] || { printf '\n===== round %s, pgbench -S =====\n' "$i"; cat "$tmp/$i-pgbench"; }
	done
	if [ -n "$rate" ]; then
		echo "#"
		echo "# C. at a fixed rate: $rate requests a second, vegeta attack -rate=$rate/s -duration=${dur}s -redirects=-1 -timeout=5s, a fresh"
		echo "#    stream per run, odd rounds A first; latency in µs (p50, p99, max) and the share answered 2xx/3xx"
		echo "# round  p50A p99A maxA successA  p50B p99B maxB successB"
		medians <"$tmp/fixed-rows" | sed 's/^/# /'
		echo "# round  p99B-p99A  p50B-p50A"
		awk '{printf "%s %d %d\n", $1, $7 - $3, $6 - $2}' "$tmp/fixed-rows" | medians | sed 's/^/# /'
	fi
	for i in $fixed_rounds; do for side in a b; do
		printf '\n===== fixed rate, round %s, %s =====\n' "$i" "$(echo $side | tr ab AB)"; cat "$tmp/fixed-$i-$side"
	done; done
	for side in ${prof:+a b}; do
		printf '\n===== %s, CPU profile: %s s of one more Zipf run (wrk below), go tool pprof -top -cum =====\n' "$(echo $side | tr ab AB)" "$dur"
		cat "$tmp/$side-prof-wrk"
		go tool pprof -top -cum -nodecount=80 "$tmp/app-$side" "$tmp/$side.pprof" 2>&1
	done
	for side in a b; do
		printf '\n===== %s, warm-up =====\n' "$(echo $side | tr ab AB)"; cat "$tmp/$side-warm"
		if [ "$instances" != 1 ]; then
			printf '\n===== %s, deploy/replicas.sh up %s =====\n' "$(echo $side | tr ab AB)" "$instances"; cat "$tmp/$side-up.log"
			printf '\n===== %s, nginx error log =====\n' "$(echo $side | tr ab AB)"; cat "$tmp/replicas-$side/nginx/error.log"
		fi
		for f in $(eval echo "\$logs_$side"); do
			printf '\n===== %s, server log%s =====\n' "$(echo $side | tr ab AB)" "$([ "$instances" = 1 ] || echo " ${f##*/}")"; cat "$f"
		done
		for m in $(eval echo "\$murl_$side"); do
			printf '\n===== %s, /metrics at the end (shortener_ lookups, caches, batches)%s =====\n' "$(echo $side | tr ab AB)" "$([ "$instances" = 1 ] || echo ", $m")"
			curl -fs "$m/metrics" | grep -E '^shortener_(db_lookup|cache_lookups|lookups_coalesced|neg|bloom_lookups)' || true
		done
	done
} >"${out:-/dev/stdout}"
