#!/usr/bin/env bash
# limits.sh: step 08's sitting, in one command. Starts a Redis of its own and
# a fresh Postgres database seeded with sql/seed.sql, builds this tree and
# step 07's (the "before"), and measures, each against a fresh copy of the app:
#
#   bench      hey (bench.sh), one hot link, clicks queued: /healthz; the
#              redirect as built (local cache, in-flight limit); with no
#              local cache (Redis alone, as step 07); with no in-flight
#              limit; creates with the rate limit off and on (set too high
#              to refuse, so that only its cost shows). Then vegeta
#              (vload.sh) on Zipf targets, local cache on and off.
#   failures   vegeta at a fixed rate, per-second timelines, step 07 and
#              this step side by side: Redis stalled (SIGSTOP) for 8 s;
#              Postgres stalled (a transaction holding LOCK TABLE links IN
#              ACCESS EXCLUSIVE MODE) for 8 s under redirects and creates
#              (the create limit raised, so that creates reach Postgres),
#              cache warm; a create flood from 500 workers, as fast as
#              they go (closed loop).
#   ratelimit  three instances behind nginx (deploy/replicas.sh) with
#              CREATE_RATE=100 CREATE_BURST=100, 400 creates a second from
#              one client, Redis stalled from 8 s to 16 s.
#
#   benchmarks/limits.sh [-q] [-o DIR] [-p PARTS] [-n RUNS] [-d DURATION] [-r ROWS] [-R RATE]
#
#   -q        quick: 1 run of 1s at concurrency 10, 10,000 rows, 200/s, short
#             experiments (for checking the script, not for numbers)
#   -o DIR    where the outputs go, named 08-*.txt (default: a temporary directory)
#   -p PARTS  which parts, comma-separated (default bench,failures,ratelimit)
#   -n, -d    hey runs and duration (default 5, 8s; warm-up 2s); concurrency 50
#   -r ROWS   links seeded (default 500000)
#   -R RATE   redirects per second in the failure experiments (default 2000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go, git,
# psql, redis-server, redis-cli, curl, hey, vegeta, and nginx for ratelimit.
set -euo pipefail

runs=5 dur=8s warm=2s conc=50 rows=500000 rate=2000 out='' parts='bench failures ratelimit'
xdur=20s zdur=20s wdur=10s stop_at=5 cont_at=13 crate=50 flood=10s rldur=24s
while getopts qo:p:n:d:r:R: opt; do
	case $opt in
	q) runs=1 dur=1s warm=0 conc=10 rows=10000 rate=200 xdur=6s zdur=2s wdur=2s stop_at=2 cont_at=4 crate=10 flood=2s rldur=6s ;;
	o) out=$OPTARG ;; n) runs=$OPTARG ;; d) dur=$OPTARG ;; r) rows=$OPTARG ;; R) rate=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
if want ratelimit; then command -v nginx >/dev/null || { echo "limits.sh: nginx not found (see docs/06)" >&2; exit 1; }; fi
sitting limits go git psql redis-server redis-cli curl hey vegeta
outputs_dir

# This tree, and step 07 for "before", each built from its own files.
before=$(git rev-parse --short=12 ':/^Step 07:')
mkdir "$tmp/src07"
git archive "$before" | tar -x -C "$tmp/src07"
(cd "$tmp/src07" && go build -o "$tmp/shortener-07" .)
go build -o "$tmp/shortener-08" .
backends "$rows"
distinct=$((rows < 100000 ? rows : 100000))

# The app listens on one port throughout, so that one targets file serves
# every copy of it.
port=$(freeport)
base="http://127.0.0.1:$port"
# start STEP VAR=VALUE...: a fresh copy of step STEP's app (07 or 08) with
# those settings, and an empty Redis.
start() {
	step=$1; shift
	redis-cli -p "$redis_port" flushall >/dev/null
	env ADDR="127.0.0.1:$port" "$@" "$tmp/shortener-$step" 2>"$tmp/app-$step.log" &
	pid=$!
	wait_healthy "$base" "$tmp/app-$step.log"
}
stop() { kill "$pid"; wait "$pid" || true; pid=''; }
label07="step 07's code (commit $before), the before"
label08="this step's code"

# Targets: Zipf over the seeded links; a short list of them that one pass
# caches whole; and creates, one JSON body over and over.
sh "$here/targets.sh" -n "$distinct" "$base" >"$tmp/zipf"
sh "$here/targets.sh" -n "$distinct" -k 5000 "$base" >"$tmp/hot"
echo '{"url":"https://example.com/created-under-load"}' >"$tmp/body.json"
creates() { printf 'POST %s/shorten\nContent-Type: application/json\n@%s\n\n' "$1" "$tmp/body.json"; }
creates "$base" >"$tmp/creates"

if want bench; then
start 08
code=$(curl -fsS -X POST -d '{"url":"https://example.com/hot"}' "$base/shorten" | sed 's/.*"code":"\([^"]*\)".*/\1/')
sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" \
	-l "limits.sh: /healthz, $label08, defaults" -o "$out/08-healthz.txt" healthz "$base"
sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" -k "$code" \
	-l "limits.sh: redirect, $label08, defaults (local cache, in-flight limit, clicks queued)" \
	-o "$out/08-redirect-local.txt" redirect "$base"
stop
for v in "redis LOCAL_CACHE_BYTES=0" "nolimit MAX_IN_FLIGHT=0"; do
	name=${v%% *} setting=${v#* }
	start 08 "$setting"
	sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" -k "$code" \
		-l "limits.sh: redirect, $label08, $setting" -o "$out/08-redirect-$name.txt" redirect "$base"
	stop
done
for v in "nolimit CREATE_RATE=0" "limit CREATE_RATE=1000000 CREATE_BURST=1000000"; do
	name=${v%% *} settings=${v#* }
	# shellcheck disable=SC2086 # two settings, split on purpose
	start 08 $settings
	sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" \
		-l "limits.sh: create, $label08, $settings" -o "$out/08-create-$name.txt" create "$base"
	stop
done
# Zipf: how much of real-looking traffic the local cache keeps from Redis.
for v in "local LOCAL_CACHE_BYTES=2MiB" "redis LOCAL_CACHE_BYTES=0"; do
	name=${v%% *} setting=${v#* }
	start 08 "$setting"
	sh "$here/vload.sh" -r 0 -w 50 -d "$zdur" -t "$tmp/zipf" -o "$tmp/zipf-warm-$name.txt"
	sh "$here/vload.sh" -r 0 -w 50 -d "$zdur" -p "$pid" -t "$tmp/zipf" \
		-l "limits.sh: Zipf redirects, $label08, $setting, after one discarded run that warmed the caches" \
		-o "$out/08-zipf-$name.txt"
	stop
done
fi

if want failures; then
for step in 07 08; do
	eval "label=\$label$step"
	# Redis stalled: SIGSTOP freezes the process; its socket still accepts
	# connections (the kernel does that), nothing answers.
	start "$step"
	sh "$here/vload.sh" -r 0 -w 50 -d "$wdur" -t "$tmp/zipf" -o "$tmp/warm-$step.txt"
	sh "$here/vload.sh" -r "$rate" -d "$xdur" -p "$pid" -t "$tmp/zipf" \
		-e "$stop_at:kill -STOP $redis_pid" -e "$cont_at:kill -CONT $redis_pid" \
		-l "limits.sh: Redis stalled (SIGSTOP) from ${stop_at} s to ${cont_at} s, Zipf redirects, caches warm, $label" \
		-o "$out/08-redis-stall-$step.txt"
	stop

	# Postgres stalled: redirects of links the warm-up cached, and creates,
	# at once, each with its own timeline; the lock is taken 5 s in by the
	# redirects' run. The create limit is raised so that creates reach
	# Postgres (step 07 has none).
	start "$step" CREATE_RATE=100000 CREATE_BURST=100000
	sh "$here/vload.sh" -r 0 -w 50 -d "$wdur" -t "$tmp/hot" -o "$tmp/warm-hot-$step.txt"
	lock="psql \"\$DATABASE_URL\" -qc 'BEGIN; LOCK TABLE links IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(8); COMMIT;'"
	sh "$here/vload.sh" -r "$((rate / 2))" -d "$xdur" -p "$pid" -t "$tmp/hot" -e "$stop_at:$lock" \
		-l "limits.sh: Postgres stalled (links locked 8 s) from ${stop_at} s, redirects of cached links, with creates at $crate/s beside (08-pg-stall-creates-$step.txt), CREATE_RATE=100000 CREATE_BURST=100000, $label" \
		-o "$out/08-pg-stall-redirects-$step.txt" &
	redirects=$!
	sh "$here/vload.sh" -r "$crate" -d "$xdur" -t "$tmp/creates" -e "$stop_at:echo the redirects run takes the lock now" \
		-l "limits.sh: Postgres stalled (links locked 8 s) from ${stop_at} s, creates (CREATE_RATE=100000 CREATE_BURST=100000, so that they reach Postgres), with redirects beside (08-pg-stall-redirects-$step.txt), $label" \
		-o "$out/08-pg-stall-creates-$step.txt"
	wait "$redirects"
	stop

	# A create flood: 500 workers, each sending the next create as soon as
	# the last is answered, from one address; defaults otherwise.
	start "$step"
	sh "$here/vload.sh" -r 0 -w 500 -d "$flood" -p "$pid" -t "$tmp/creates" \
		-l "limits.sh: create flood, 500 workers, one client address, defaults, $label" \
		-o "$out/08-flood-$step.txt"
	stop
done
fi

if want ratelimit; then
# The rate limit through three instances: one allowance shared in Redis,
# and what becomes of it while Redis is stalled.
export NGINX_PORT="$(freeport)" APP_PORT_BASE="$(freeport)" CREATE_RATE=100 CREATE_BURST=100
deploy/replicas.sh up 3 >"$tmp/up.log"; up=1
rstop=$((stop_at + 3)) rcont=$((cont_at + 3))
creates "http://127.0.0.1:$NGINX_PORT" >"$tmp/creates-nginx"
sh "$here/vload.sh" -r 400 -d "$rldur" -p "$(cat "$REPLICAS_DIR"/app-*.pid | paste -sd, -)" -t "$tmp/creates-nginx" \
	-e "$rstop:kill -STOP $redis_pid" -e "$rcont:kill -CONT $redis_pid" \
	-l "limits.sh: 3 instances behind nginx, CREATE_RATE=100 CREATE_BURST=100, 400 creates/s from one client, Redis stalled from $rstop s to $rcont s, $label08" \
	-o "$out/08-ratelimit-3replicas.txt"
deploy/replicas.sh down >/dev/null; up=''
fi

# Each output's headline and its ratio to /healthz, as docs/08's table
# quotes it (the failure experiments' ratios mean little: a fixed rate).
for f in "$out"/08-*.txt; do headline "$f" "$out/08-healthz.txt"; done
outputs_note
