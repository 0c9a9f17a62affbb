#!/usr/bin/env bash
# clicks.sh: step 07's sitting, in one command. Starts a Redis of its own and
# a fresh Postgres database seeded with sql/seed.sql, then measures with hey
# (bench.sh), each against a fresh copy of the app with the cache on:
#   /healthz; the redirect with CLICKS=off; with clicks written during the
#   request (CLICKS=sync) and through the queue (CLICKS=queue), each with
#   clicks summed per code (CLICK_STORAGE=counts) and one row per click
#   (CLICK_STORAGE=rows).
# For each, 07-clicks-db.txt records the redirects served, the clicks the
# database holds after a graceful stop, and the rows Postgres wrote.
# Then two shutdowns under a fixed load with vegeta (vload.sh): SIGTERM,
# and kill -9, each 4 s into the run, with redirects served against clicks
# recorded.
#
#   benchmarks/clicks.sh [-q] [-o DIR] [-n RUNS] [-d DURATION] [-r ROWS] [-R RATE]
#
#   -q      quick: 1 run of 1s at concurrency 10, 10,000 rows, 200/s
#   -o DIR  where the outputs go, named 07-*.txt (default: a temporary directory)
#   -n, -d  hey runs and duration (default 5, 8s; warm-up 2s); concurrency 50
#   -r ROWS links seeded (default 500000)
#   -R RATE requests per second in the shutdown experiments (default 2000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# psql, redis-server, redis-cli, curl, hey and vegeta.
set -euo pipefail

runs=5 dur=8s warm=2s conc=50 rows=500000 rate=2000 out=''
while getopts qo:n:d:r:R: opt; do
	case $opt in
	q) runs=1 dur=1s warm=0 conc=10 rows=10000 rate=200 ;;
	o) out=$OPTARG ;; n) runs=$OPTARG ;; d) dur=$OPTARG ;; r) rows=$OPTARG ;; R) rate=$OPTARG ;;
	*) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
sitting clicks go psql redis-server redis-cli curl hey vegeta
outputs_dir

go build -o "$tmp/shortener" .
backends "$rows"

# start NAME VAR=VALUE...: a fresh copy of the app with those settings.
start() {
	name=$1; shift
	port=$(freeport)
	env ADDR="127.0.0.1:$port" "$@" "$tmp/shortener" 2>"$tmp/$name.log" &
	pid=$!
	wait_healthy "http://127.0.0.1:$port" "$tmp/$name.log"
}
# stop: SIGTERM, and wait for the app to drain its queue and exit.
stop() { kill "$pid"; wait "$pid" || true; pid=''; }
clicks() { psql "$DATABASE_URL" -Atc "select coalesce((select sum(clicks) from click_counts), 0) + (select count(*) from click_events)"; }
# rows Postgres inserted and updated in the two click tables so far
written() { psql "$DATABASE_URL" -Atc "select coalesce(sum(n_tup_ins + n_tup_upd), 0) from pg_stat_user_tables where relname in ('click_counts', 'click_events')"; }
served() { awk '/^#   \[302\]/ {print $3}' "$1"; }

dbfile="$out/07-clicks-db.txt"
{
	echo "# clicks in the database after each variant's runs and a graceful stop (SIGTERM)"
	echo "# made by: benchmarks/clicks.sh; code id $(sh "$here/codeid.sh"), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# variant  redirects_served  clicks_recorded  rows_written  queue_log_at_stop"
} >"$dbfile"

start healthz CLICKS=off
sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" \
	-l "clicks.sh: /healthz (CLICKS=off)" -o "$out/07-healthz.txt" healthz "http://127.0.0.1:$port"
stop
for variant in off sync-counts queue-counts sync-rows queue-rows; do
	mode=${variant%%-*} storage=${variant#*-}
	[ "$variant" != off ] || storage=counts
	start "$variant" CLICKS="$mode" CLICK_STORAGE="$storage"
	c0=$(clicks) w0=$(written)
	sh "$here/bench.sh" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" -k "$code" \
		-l "clicks.sh: redirect, CLICKS=$mode CLICK_STORAGE=$storage" -o "$out/07-redirect-$variant.txt" \
		redirect "http://127.0.0.1:$port"
	stop
	# the warm-up's clicks count too: hey's runs are not all the redirects served
	echo "# $variant  $(served "$out/07-redirect-$variant.txt") (measured runs only)  $(($(clicks) - c0)) (warm-up included)  $(($(written) - w0))  $(grep -o 'msg="click queue closed".*' "$tmp/$variant.log" || echo -)" >>"$dbfile"
done

# Shutdowns under load: vegeta at a fixed rate, one link, the queue as
# default; the app is stopped 4 s in. A SIGTERM drains the queue; a kill -9
# loses what was queued.
for sig in TERM KILL; do
	start "sig$sig"
	c0=$(clicks)
	sh "$here/vload.sh" -r "$rate" -d 8s -p "$pid" -e "4:kill -$sig $pid" \
		-l "clicks.sh: CLICKS=queue, the app sent SIG$sig 4 s into the run" \
		-o "$out/07-sig$(echo "$sig" | tr 'A-Z' 'a-z').txt" "http://127.0.0.1:$port/$code"
	wait "$pid" || true; pid=''
	ok=$(awk '/^#   Status Codes/ {for (i = 1; i <= NF; i++) if ($i ~ /^302:/) {sub("302:", "", $i); print $i}}' "$out/07-sig$(echo "$sig" | tr 'A-Z' 'a-z').txt")
	echo "# SIG$sig under load  ${ok:-0} redirects answered 302  $(($(clicks) - c0)) clicks recorded  $(grep -o 'msg="click queue closed".*' "$tmp/sig$sig.log" || echo '(no drain: killed)')" >>"$dbfile"
done

# Each output's headline and its ratio to /healthz, as docs/07's table quotes it.
for f in "$out"/07-*.txt; do headline "$f" "$out/07-healthz.txt"; done
cat "$dbfile"
outputs_note
