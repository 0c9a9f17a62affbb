#!/usr/bin/env bash
# cache.sh: step 05's sitting, in one command. Starts a Redis of its own (on a
# free port, no persistence, maxmemory 256mb, allkeys-lfu), a fresh Postgres
# database seeded with sql/seed.sql, and two copies of the app built from this
# tree: one without the cache, one with it. Then, in one sitting:
#   1. hey (bench.sh): /healthz, the redirect without the cache and with it,
#      at concurrency 50 and 200;
#   2. vegeta (vload.sh): a Zipf-skewed redirect workload over DISTINCT seeded
#      codes, cache cold (a fresh Redis), then warm, then without the cache,
#      with the hit ratio from Redis INFO stats.
# Everything it started is stopped, and the database dropped, at the end.
#
#   benchmarks/cache.sh [-q] [-o DIR] [-n RUNS] [-d DURATION] [-r ROWS] [-z DISTINCT] [-Z DURATION]
#
#   -q      quick: 1 run of 1s, concurrency 10 and 20, 10,000 rows, 2,000 codes, 2s Zipf runs
#   -o DIR  where the outputs go, named 05-*.txt (default: a new temporary directory)
#   -n, -d  hey runs and duration (default 5, 8s), warm-up 2s
#   -r ROWS links seeded (default 500000); -z DISTINCT codes in the Zipf workload (default 100000)
#   -Z      length of each Zipf run (default 20s)
#   -p PARTS which parts to run: hey, zipf or hey,zipf (default both)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# psql, redis-server, redis-cli, curl, hey and vegeta.
set -euo pipefail

runs=5 dur=8s warm=2s concs="50 200" rows=500000 distinct=100000 zdur=20s out='' parts='hey zipf'
while getopts qo:n:d:r:z:Z:p: opt; do
	case $opt in
	q) runs=1 dur=1s warm=0 concs="10 20" rows=10000 distinct=2000 zdur=2s ;;
	o) out=$OPTARG ;; n) runs=$OPTARG ;; d) dur=$OPTARG ;; r) rows=$OPTARG ;;
	z) distinct=$OPTARG ;; Z) zdur=$OPTARG ;; p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
sitting cache go psql redis-server redis-cli curl hey vegeta
outputs_dir

# start_app NAME [VAR=VALUE...]: start the app with the settings given, wait
# for /healthz, and set $port and $pid.
start_app() {
	name=$1; shift
	port=$(freeport)
	# env -u: a REDIS_URL in the caller's environment must not reach the
	# copy that is meant to run without a cache.
	# METRICS_ADDR: a later step's app listens there too (:6060 by default).
	env -u REDIS_URL ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$(freeport)" DATABASE_URL="$dburl" "$@" "$tmp/shortener" 2>"$tmp/$name.log" &
	pid=$!
	pids="$pids $pid"
	wait_healthy "http://127.0.0.1:$port" "$tmp/$name.log"
}

# summary: each output's headline, and its ratio to /healthz in the same
# part (c50, c200, zipf), as docs/05's tables quote it.
summary() {
	for f in "$out"/05-*.txt; do
		g=$(basename "$f" .txt); g=${g#05-}; g=${g%%-*}
		headline "$f" "$out/05-$g-healthz.txt"
	done
	outputs_note
}

go build -o "$tmp/shortener" .
seeded_db "$admin" "$rows"

start_redis "$tmp"
redis_url="redis://127.0.0.1:$redis_port/0"
start_app nocache; nocache_pid=$pid; nocache_port=$port
start_app cache REDIS_URL="$redis_url"; cache_pid=$pid; cache_port=$port

export DATABASE_URL="$dburl"
case " $parts " in *" hey "*) ;; *) concs='' ;; esac
for c in $concs; do
	REDIS_URL=$redis_url sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$c" -w "$warm" -p "$cache_pid" \
		-l "cache.sh: /healthz of the app with the cache" -o "$out/05-c$c-healthz.txt" \
		healthz "http://127.0.0.1:$cache_port"
	env -u REDIS_URL sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$c" -w "$warm" -p "$nocache_pid" -k "$code" \
		-l "cache.sh: redirect, no cache (Postgres only)" -o "$out/05-c$c-redirect-nocache.txt" \
		redirect "http://127.0.0.1:$nocache_port"
	REDIS_URL=$redis_url sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$c" -w "$warm" -p "$cache_pid" -k "$code" \
		-l "cache.sh: redirect, Redis cache in front of Postgres" -o "$out/05-c$c-redirect-cache.txt" \
		redirect "http://127.0.0.1:$cache_port"
done

case " $parts " in *" zipf "*) ;; *) summary; exit 0 ;; esac
# The Zipf workload: the same draws against each app; a closed loop of 50
# vegeta workers, so that req/s compares with hey's. /healthz first, as the
# baseline of this part of the sitting.
sh "$here/targets.sh" -n "$distinct" -k "$distinct" "http://127.0.0.1:$nocache_port" >"$tmp/targets-nocache"
sh "$here/targets.sh" -n "$distinct" -k "$distinct" "http://127.0.0.1:$cache_port" >"$tmp/targets-cache"
sh "$here/vload.sh" -r 0 -w 50 -d "$zdur" -p "$cache_pid" -l "cache.sh: /healthz, vegeta closed loop" \
	-o "$out/05-zipf-healthz.txt" "http://127.0.0.1:$cache_port/healthz"
env -u REDIS_URL sh "$here/vload.sh" -r 0 -w 50 -d "$zdur" -p "$nocache_pid" -t "$tmp/targets-nocache" \
	-l "cache.sh: Zipf redirects over $distinct codes, no cache" -o "$out/05-zipf-nocache.txt"
redis-cli -p "$redis_port" flushall >/dev/null # our own Redis: start cold
REDIS_URL=$redis_url sh "$here/vload.sh" -r 0 -w 50 -d "$zdur" -p "$cache_pid" -t "$tmp/targets-cache" \
	-l "cache.sh: Zipf redirects over $distinct codes, cache cold (Redis emptied just before)" -o "$out/05-zipf-cache-cold.txt"
REDIS_URL=$redis_url sh "$here/vload.sh" -r 0 -w 50 -d "$zdur" -p "$cache_pid" -t "$tmp/targets-cache" \
	-l "cache.sh: Zipf redirects over $distinct codes, cache warm (the run before filled it)" -o "$out/05-zipf-cache-warm.txt"
{
	echo "# Redis after the warm Zipf run: keys, memory, evictions"
	echo "# made by: benchmarks/cache.sh (redis-cli info keyspace, memory, stats)"
	echo "# date:    $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	redis-cli -p "$redis_port" info keyspace
	redis-cli -p "$redis_port" info memory | grep -E '^(used_memory|used_memory_human|maxmemory|maxmemory_human|maxmemory_policy|mem_fragmentation_ratio):'
	redis-cli -p "$redis_port" info stats | grep -E '^(keyspace_hits|keyspace_misses|evicted_keys|expired_keys|total_commands_processed):'
} | tr -d '\r' >"$out/05-redis-after.txt"

summary
