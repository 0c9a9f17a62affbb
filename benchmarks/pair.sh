#!/usr/bin/env bash
# pair.sh: two steps of the table, measured against each other in
# interleaved rounds (step 22's sitting). benchmarks/table.sh measures each
# step once, one after another, and a minute of this machine can be 20%
# faster than the next (docs/22); here both steps run at once and are
# loaded one at a time, turn about, each round's ratios taken within it.
#
#   benchmarks/pair.sh [-q] [-o FILE] [-n ROUNDS] [-d SECONDS] [-e ENDPOINT] [-g GENERATOR]
#                      [-r ROWS] [-A 'VAR=VALUE ...'] [-B 'VAR=VALUE ...'] A B
#
#   A, B      two steps, two digits each ("14 15"; the same step twice
#             with -A or -B), each built from its "Step NN:" commit, with
#             table.sh's settings: a database of its own seeded with ROWS
#             links by the step's sql/seed.sql, a Redis of its own,
#             CREATE_RATE=1000000 CREATE_BURST=1000000 (never refused: the
#             limit's cost is in every create), the rest the step's defaults
#   -A, -B    more environment for A's or B's app (-B BLOOM=off)
#   -e        create (default), redirect (of the middle seeded link), or
#             zipf: redirects of codes drawn Zipf (s = 1.0) over the seeded
#             links, replayed by benchmarks/zipf.lua (wrk), the same stream
#             for both sides in a round, a new one each round
#   -g        hey (default) or wrk (-t2, benchmarks/create.lua for creates),
#             at concurrency 50; hey is the ceiling near the top (docs/13),
#             so a ratio near 1 is read with wrk; zipf is always wrk
#   -n, -d    rounds (default 7) and seconds per run (default 5; each run
#             after a 1 s warm-up, discarded)
#   -r ROWS   links seeded in each database (default 500000, as table.sh)
#   -o FILE   where the output goes (default: standard output)
#   -q        quick: 1 round of 1 s at concurrency 10, 10,000 links
#
# Each round runs A's /healthz and endpoint, then B's; even rounds B first,
# endpoint first. Per run: req/s, the app's CPU (user+system, /proc) per
# response, and Postgres's (every postgres process) per response.
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs git,
# go, psql, redis-server, redis-cli, curl, and hey or wrk. About 3 minutes
# with the defaults, after the builds and the seeding.
set -euo pipefail

rounds=7 dur=5 conc=50 warm=1 rows=500000 ep=create gen=hey out='' env_a='' env_b='' quick=''
usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts qo:n:d:e:g:r:A:B: opt; do
	case $opt in
	q) rounds=1 dur=1 conc=10 rows=10000 quick=' -q' ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; e) ep=$OPTARG ;; g) gen=$OPTARG ;; r) rows=$OPTARG ;;
	A) env_a=$OPTARG ;; B) env_b=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
case $ep in create | redirect) ;; zipf) gen=wrk ;; *) echo "pair.sh: -e takes create, redirect or zipf, not '$ep'" >&2; exit 2 ;; esac
case $gen in hey | wrk) ;; *) echo "pair.sh: -g takes hey or wrk, not '$gen'" >&2; exit 2 ;; esac
for v in "$rounds" "$dur" "$rows"; do case $v in '' | *[!0-9]* | 0*) echo "pair.sh: -n, -d and -r take a whole number above 0, not '$v'" >&2; exit 2 ;; esac; done
for s in "$1" "$2"; do case $s in [0-9][0-9]) ;; *) usage ;; esac; done
read -r -a words_a <<<"$env_a"
read -r -a words_b <<<"$env_b"
for e in ${words_a[@]+"${words_a[@]}"} ${words_b[@]+"${words_b[@]}"}; do case $e in [A-Z_]*=*) ;; *) echo "pair.sh: -A/-B take VAR=VALUE words, not '$e'" >&2; exit 2 ;; esac; done
[ "$1 $env_a" != "$2 $env_b" ] || { echo "pair.sh: A and B are the same step with the same environment" >&2; exit 2; }
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
# A file that cannot be written fails now, not after the rounds.
[ -z "$out" ] || : >"$out" || { echo "pair.sh: cannot write $out" >&2; exit 2; }
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
for tool in go git psql redis-server redis-cli curl "$gen"; do
	command -v "$tool" >/dev/null || { echo "pair.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
. benchmarks/lib.sh # step_tree, seeded_db, step_app, start_redis, medians, ticks_of, ticks_named
# Postgres's CPU is read from /proc: with no process of that name here (a
# Postgres on another host, or in a container), it would read 0.
[ "$(ticks_named postgres)" -gt 0 ] || { echo "pair.sh: no process named postgres in /proc: Postgres's CPU cannot be measured here" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pair.XXXXXX")
pids='' dbs='' redis_ports='' trees=''
cleanup() {
	# app_pid too: step_app sets it before it knows the app answers
	for p in $pids ${app_pid:-}; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	# redis_port too: start_redis sets it before it knows the server answers
	for p in $redis_ports ${redis_port:-}; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	for d in $dbs; do psql "$admin" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	for t in $trees; do git worktree remove --force "$t" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
hz=$(getconf CLK_TCK)
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')

# Each side, a and b, has a label for the output's columns: its step, or
# with the same step on both sides, the step and the side (15a, 15b).
label_a=$1 label_b=$2
[ "$1" != "$2" ] || { label_a=${1}a label_b=${2}b; }

# start SIDE STEP ENV: build the step from its commit, give it a database
# and a Redis of its own, start it with ENV added; sets url_SIDE,
# pid_SIDE, code_SIDE, id_SIDE.
start() {
	local side=$1 nn=$2 extra=$3 hash tree dburl='' redisurl='' code='' db
	hash=$(git log --format='%H %s' HEAD | awk -v nn="$nn" '!h && $2 == "Step" && ($3 == nn ":" || $3 == nn ",") {h = $1} END {print h}')
	[ -n "$hash" ] || { echo "pair.sh: no commit 'Step $nn:' in HEAD's history" >&2; exit 1; }
	tree="$tmp/tree-$side"
	trees="$trees $tree"
	step_tree "$hash" "$tree" "$tmp/shortener-$side"
	printf -v "id_$side" '%s' "step $nn${extra:+ with $extra}: commit $(git rev-parse --short=12 "$hash"), code id $(sh benchmarks/codeid.sh "$tree")"
	if [ -f "$tree/sql/schema.sql" ]; then
		db="shortener_pair_${side}_$suffix"
		dbs="$dbs $db"
		seeded_db "$admin" "$rows" "$tree"
	fi
	if grep -qs REDIS_URL "$tree/config.go"; then
		mkdir -p "$tmp/redis-$side"
		start_redis "$tmp/redis-$side"
		redis_ports="$redis_ports $redis_port"
		redisurl="redis://127.0.0.1:$redis_port/0"
	fi
	local -a words=()
	read -r -a words <<<"$extra" # VAR=VALUE words, checked above; not globbed
	step_app "$tmp/shortener-$side" "$tmp/$side-server.log" ${words[@]+"${words[@]}"}
	pids="$pids $app_pid"
	[ "$ep" != redirect ] || [ -n "$code" ] || { echo "pair.sh: step $nn has no database: no link to redirect" >&2; exit 1; }
	printf -v "url_$side" '%s' "http://127.0.0.1:$app_port"
	printf -v "pid_$side" '%s' "$app_pid"
	printf -v "code_$side" '%s' "$code"
}

# load URL WHAT SECONDS FILE: the generator's output to FILE. WHAT is
# healthz, create, zipf (the stream in $stream) or a link's code.
load() {
	if [ "$gen" = wrk ]; then
		case $2 in
		create) wrk -t2 -c"$conc" -d"${3}s" -s benchmarks/create.lua "$1/shorten" >"$4" 2>&1 ;;
		zipf) ZIPF_STREAM=$stream ZIPF_THREADS=2 wrk -t2 -c"$conc" -d"${3}s" -s benchmarks/zipf.lua "$1" >"$4" 2>&1 ;;
		*) wrk -t2 -c"$conc" -d"${3}s" "$1/$2" >"$4" 2>&1 ;;
		esac
	elif [ "$2" = create ]; then
		hey -z "${3}s" -c "$conc" -disable-redirects -m POST -T application/json -d '{"url":"https://example.com/pair"}' "$1/shorten" >"$4" 2>&1
	else
		hey -z "${3}s" -c "$conc" -disable-redirects "$1/$2" >"$4" 2>&1
	fi
}
# run SIDE WHAT FILE: a warm-up, then one measured run; prints "req/s app_us pg_us bad"
run() {
	local side=$1 what=$2 f=$3 url pid a0 a1 p0 p1
	url=$(eval echo "\$url_$side") pid=$(eval echo "\$pid_$side")
	local measured=$stream
	stream=${stream:+$tmp/stream-0}
	load "$url" "$what" "$warm" "$f.warm" || { echo "pair.sh: $gen failed (warm-up):" >&2; cat "$f.warm" >&2; exit 1; }
	stream=$measured
	a0=$(ticks_of "$pid") p0=$(ticks_named postgres)
	load "$url" "$what" "$dur" "$f" || { echo "pair.sh: $gen failed:" >&2; cat "$f" >&2; exit 1; }
	a1=$(ticks_of "$pid") p1=$(ticks_named postgres)
	kill -0 "$pid" 2>/dev/null || { echo "pair.sh: the app of side $side exited during the run" >&2; exit 1; }
	grep -q 'Requests/sec:' "$f" || { echo "pair.sh: $gen printed no Requests/sec:" >&2; cat "$f" >&2; exit 1; }
	if [ "$gen" = wrk ]; then
		# wrk counts as bad only statuses outside 200-399 and socket errors;
		# zipf.lua counts every status but 302, and says when a thread ran
		# past its slice of the stream (then the run asked for codes twice).
		awk -v a=$((a1 - a0)) -v p=$((p1 - p0)) -v hz="$hz" '
			/^Requests\/sec:/ {r = $2} / requests in / {n = $1}
			/Non-2xx or 3xx/ {b += $NF} /Socket errors/ {gsub(",", ""); b += $4 + $6 + $8 + $10}
			/^zipf.lua: responses not 302:/ {b += $5} /^zipf.lua: WARNING/ {b++}
			END {printf "%.0f %.1f %.1f %d\n", r, n ? a / hz / n * 1e6 : 0, n ? p / hz / n * 1e6 : 0, b + 0}' "$f"
		return
	fi
	awk -v a=$((a1 - a0)) -v p=$((p1 - p0)) -v hz="$hz" -v f="$f" 'BEGIN {
		while ((getline l < f) > 0) {
			if (l ~ /Requests\/sec:/) { split(l, x, " "); r = x[2] }
			if (l ~ /^Status code distribution:/) s = 1
			else if (l ~ /^$/) s = 0
			else if (s && l ~ /responses/) { split(l, x, " "); n += x[2]; if (x[1] !~ /^\[(200|201|302)\]$/) b += x[2] }
			if (l ~ /^Error distribution:/) e = 1
			else if (e && l ~ /^  \[/) { split(l, x, " "); gsub(/[][]/, "", x[1]); b += x[1] }
		}
		printf "%.0f %.1f %.1f %d\n", r, n ? a / hz / n * 1e6 : 0, n ? p / hz / n * 1e6 : 0, b + 0 }'
}

# The Zipf streams: one for the warm-ups, one per round, each long enough
# that no wrk thread comes to the end of its slice (at most 200,000
# requests a second, far above what these apps answer here).
stream=''
if [ "$ep" = zipf ]; then
	go build -o "$tmp/zipf" ./benchmarks/zipf || { echo "pair.sh: benchmarks/zipf does not build" >&2; exit 1; }
	zstream() { "$tmp/zipf" -links "$rows" -s 1.0 -n $(($2 * 200000)) -seed "$1" >"$tmp/stream-$1" || { echo "pair.sh: benchmarks/zipf failed" >&2; exit 1; }; }
fi

start a "$1" "$env_a"
start b "$2" "$env_b"
what_a=$ep what_b=$ep
[ "$ep" != redirect ] || { what_a=$code_a what_b=$code_b; }
la=$label_a lb=$label_b

for i in $(seq 1 "$rounds"); do
	progress "round $i of $rounds"
	if [ $((i % 2)) = 1 ]; then order="a:healthz a:$what_a b:healthz b:$what_b"; else order="b:$what_b b:healthz a:$what_a a:healthz"; fi
	for job in $order; do
		side=${job%%:*} what=${job#*:}
		kind=$what
		[ "$what" = healthz ] || kind=$ep
		if [ "$ep" = zipf ]; then
			# the warm-up replays stream 0, the run this round's stream
			[ -f "$tmp/stream-0" ] || zstream 0 "$warm"
			[ -f "$tmp/stream-$i" ] || zstream "$i" "$dur"
		fi
		[ "$ep" != zipf ] || stream=$tmp/stream-$i
		run "$side" "$what" "$tmp/$i-$side-$kind" >"$tmp/$i-$side-$kind.sum"
	done
	row="$i"
	for side in a b; do row="$row $(cut -d' ' -f1 "$tmp/$i-$side-healthz.sum") $(cat "$tmp/$i-$side-$ep.sum")"; done
	echo "$row" >>"$tmp/rows"
done

{
	echo "# steps $1 and $2, $ep against each one's /healthz, in interleaved rounds"
	echo "# made by:   benchmarks/pair.sh$quick -n $rounds -d $dur -e $ep -g $gen -r $rows${env_a:+ -A '$env_a'}${env_b:+ -B '$env_b'} $1 $2; commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version'), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(if [ "$gen" = hey ]; then echo "hey $(go version -m "$(command -v hey)" 2>/dev/null | awk '$1 == "mod" {print $3}')"; else wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2; fi)"
	echo "# $la:    $id_a"
	echo "# $lb:    $id_b"
	echo "# apps:      both running throughout, each with a database of its own ($rows seeded links) and a Redis of its own,"
	echo "#            CREATE_RATE=1000000 CREATE_BURST=1000000, the rest defaults (as benchmarks/table.sh) but what -A/-B add; loaded one at a time"
	if [ "$gen" = hey ]; then
		echo "# load:      hey -z ${dur}s -c $conc -disable-redirects, after ${warm} s of warm-up, discarded; create: POST /shorten"
		echo "#            with {\"url\":\"https://example.com/pair\"}; redirect: the middle seeded link"
	else
		echo "# load:      wrk -t2 -c$conc -d${dur}s, after ${warm} s of warm-up, discarded; create: benchmarks/create.lua; redirect: the"
		echo "#            middle seeded link; zipf: benchmarks/zipf.lua, codes drawn Zipf s=1.0 over the $rows links (benchmarks/zipf),"
		echo "#            warm-ups replaying the stream of seed 0, round i's runs the stream of seed i (the same for both sides)"
	fi
	echo "# order:     odd rounds $la /healthz, $la $ep, $lb /healthz, $lb $ep; even rounds the reverse"
	echo "# cpu:       user+system from /proc over the measured run, µs per response: the app's, and every postgres process's"
	echo "# bad:       responses other than 200, 201 and 302, and $gen's errors (wrk: statuses outside 200-399; zipf.lua: any"
	echo "#            status but 302, and a thread that ran past its slice of the stream)"
	echo "#"
	echo "# A. per run"
	echo "# round  h$la  $ep$la app_us$la pg_us$la bad$la  h$lb  $ep$lb app_us$lb pg_us$lb bad$lb"
	medians <"$tmp/rows" | sed 's/^/# /'
	echo "#"
	echo "# B. within each round: each $ep over its own /healthz; $lb's over $la's, for $ep and for /healthz (the"
	echo "#    noise between two apps loaded turn about); $lb's CPU per response minus $la's, the app's and Postgres's, µs"
	echo "# round  $ep$la/h$la  $ep$lb/h$lb  $ep$lb/$ep$la  h$lb/h$la  app_us$lb-$la  pg_us$lb-$la"
	awk '{printf "%s %.3f %.3f %.3f %.3f %.1f %.1f\n", $1, $3 / $2, $8 / $7, $8 / $3, $7 / $2, $9 - $4, $10 - $5}' "$tmp/rows" | medians | sed 's/^/# /'
	for i in $(seq 1 "$rounds"); do for side in a b; do for kind in healthz "$ep"; do
		[ "$side" = a ] && l=$la || l=$lb
		printf '\n===== round %s, %s, %s =====\n' "$i" "$l" "$kind"; cat "$tmp/$i-$side-$kind"
	done; done; done
	for side in a b; do
		[ "$side" = a ] && l=$la || l=$lb
		printf '\n===== %s, server log =====\n' "$l"; cat "$tmp/$side-server.log"
	done
} >"${out:-/dev/stdout}"
