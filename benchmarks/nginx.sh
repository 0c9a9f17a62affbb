#!/usr/bin/env bash
# nginx.sh: step 06's sitting, in one command. Starts a Redis of its own and a
# fresh Postgres database seeded with sql/seed.sql, then measures, one after
# the other with hey (bench.sh): /healthz and the redirect of one seeded link
#   - straight to one instance of the app (no nginx),
#   - through nginx to 1, 2 and 3 instances (deploy/replicas.sh);
# with 1 instance, a restart under a fixed rate of vegeta (vload.sh);
# then, with 3 instances, two experiments at a fixed rate with vegeta
# (vload.sh), each with a per-second timeline:
#   - kill -9 of instance 2, 5 s into a 20 s run;
#   - a rolling restart (deploy/replicas.sh restart), 3 s into a 30 s run.
# Everything it started is stopped, and the database dropped, at the end.
#
#   benchmarks/nginx.sh [-q] [-o DIR] [-n RUNS] [-d DURATION] [-r ROWS] [-R RATE]
#
#   -q      quick: 1 run of 1s at concurrency 10, 10,000 rows, experiments at 200/s
#   -o DIR  where the outputs go, named 06-*.txt (default: a temporary directory)
#   -n, -d  hey runs and duration (default 5, 8s; warm-up 2s); concurrency 50
#   -r ROWS links seeded (default 500000)
#   -R RATE requests per second in the two experiments (default 2000)
#   -p PARTS bench, experiments, or bench,experiments (default both)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# psql, redis-server, redis-cli, nginx, curl, hey and vegeta.
set -euo pipefail

runs=5 dur=8s warm=2s conc=50 rows=500000 rate=2000 xdur1=20s xdur2=30s out='' parts='bench experiments'
while getopts qo:n:d:r:R:p: opt; do
	case $opt in
	q) runs=1 dur=1s warm=0 conc=10 rows=10000 rate=200 xdur1=5s xdur2=20s ;;
	o) out=$OPTARG ;; n) runs=$OPTARG ;; d) dur=$OPTARG ;; r) rows=$OPTARG ;; R) rate=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
sitting nginx go psql redis-server redis-cli curl hey vegeta
outputs_dir

go build -o "$tmp/shortener" .
backends "$rows"

export NGINX_PORT="$(freeport)" APP_PORT_BASE="$(freeport)"
base="http://127.0.0.1:$NGINX_PORT"
app_pids() { cat "$REPLICAS_DIR"/app-*.pid | paste -sd, -; }

if want bench; then
# 1. Straight to one instance.
port=$(freeport)
ADDR="127.0.0.1:$port" "$tmp/shortener" 2>"$tmp/direct.log" &
pid=$!
wait_healthy "http://127.0.0.1:$port" "$tmp/direct.log"
for what in healthz redirect; do
	sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" -k "$code" \
		-l "nginx.sh: straight to one instance, no nginx" -o "$out/06-direct-$what.txt" \
		"$what" "http://127.0.0.1:$port"
done
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=''

# 2. Through nginx, to 1, 2 and 3 instances.
for n in 1 2 3; do
	deploy/replicas.sh up "$n" >"$tmp/up-$n.log"; up=1
	for what in healthz redirect; do
		sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$(app_pids)" -k "$code" \
			-l "nginx.sh: through nginx to $n instance(s)" -o "$out/06-nginx$n-$what.txt" \
			"$what" "$base"
	done
	if [ "$n" = 1 ]; then
		# What one copy cannot do: restart without failing requests.
		sh "$here/vload.sh" -r "$rate" -d 15s -p "$(app_pids)" -e "3:deploy/replicas.sh restart" \
			-l "nginx.sh: 1 instance behind nginx, restarted (SIGTERM, start, wait) from 3 s" \
			-o "$out/06-restart-1instance.txt" "$base/$code"
	fi
	deploy/replicas.sh down >/dev/null; up=''
done
fi

if want experiments; then

# 3. Failure experiments with 3 instances, at a fixed rate, Zipf targets
# over the seeded links. One pass over the whole list first, discarded, so
# that the cache is warm and only the event shows in the timeline.
deploy/replicas.sh up 3 >"$tmp/up-3a.log"; up=1
sh "$here/targets.sh" -n "$((rows < 100000 ? rows : 100000))" "$base" >"$tmp/targets"
sh "$here/vload.sh" -r 0 -w 50 -d "$xdur1" -t "$tmp/targets" -o "$tmp/warm-up.txt"
sh "$here/vload.sh" -r "$rate" -d "$xdur1" -p "$(app_pids)" -t "$tmp/targets" \
	-e "5:deploy/replicas.sh kill 2" \
	-l "nginx.sh: 3 instances behind nginx, instance 2 killed with SIGKILL at 5 s" -o "$out/06-kill9.txt"
deploy/replicas.sh down >/dev/null
deploy/replicas.sh up 3 >"$tmp/up-3b.log"
sh "$here/vload.sh" -r "$rate" -d "$xdur2" -p "$(app_pids)" -t "$tmp/targets" \
	-e "3:deploy/replicas.sh restart" \
	-l "nginx.sh: 3 instances behind nginx, rolling restart (SIGTERM, start, wait) from 3 s" -o "$out/06-rolling-restart.txt"
deploy/replicas.sh down >/dev/null; up=''
fi

# Each output's headline and its ratio to the direct /healthz, as docs/06's
# table quotes it.
for f in "$out"/06-*.txt; do headline "$f" "$out/06-direct-healthz.txt"; done
outputs_note
