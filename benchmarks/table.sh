#!/bin/sh
# table.sh: re-measure the whole table. Checks out every "Step NN:" commit
# (from 01 on) into a temporary git worktree, builds it, starts it with the
# services that step needs (Postgres, in a database of its own, seeded with
# that step's sql/seed.sql), measures /healthz, a redirect and a create with
# benchmarks/bench.sh, stops it, and prints the table as Markdown, each figure
# with its ratio to /healthz measured in the same sitting. Each step listens on
# a port the kernel picks, and each database gets a random suffix, so two runs
# at once, or databases of yours, are never touched.
#
#   benchmarks/table.sh [-q] [-o DIR] [-n RUNS] [-d DURATION] [-c CONC] [-r ROWS]
#
#   -q      quick: 1 run of 1s at concurrency 10, no warm-up, 10,000 rows
#           (checks that the command works; the figures mean little)
#   -o DIR  keep the outputs in DIR (default: a temporary directory, removed
#           at the end); the table names DIR relative to the repository
#   -n, -d, -c   runs, duration, concurrency (default 5, 10s, 50)
#   -r ROWS      links seeded per step (default 500000)
#
# Environment: ADMIN_DATABASE_URL, a postgres:// URL that names a database,
# for a user with the right to create databases (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
# Steps whose config.go reads REDIS_URL get a Redis of the table's own,
# emptied before each. Needs git, go, psql, curl and hey (and redis-server
# and redis-cli from step 05 on). POSIX sh: Linux and macOS.
set -eu

runs=5 dur=10s conc=50 warm=3s rows=500000 out=''
while getopts qo:n:d:c:r: opt; do
	case $opt in
	q) runs=1 dur=1s conc=10 warm=0 rows=10000 ;;
	o) out=$OPTARG ;; n) runs=$OPTARG ;; d) dur=$OPTARG ;; c) conc=$OPTARG ;; r) rows=$OPTARG ;;
	*) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
bench="$repo/benchmarks/bench.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/table.XXXXXX")
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The table names where the outputs are without this machine's paths: a
# printed table is often saved in the repository.
if [ -z "$keep" ]; then
	outname="not kept (give -o DIR to keep them)"
else
	case $out/ in
	"$repo"/*) outname=${out#"$repo"/} ;;
	*) outname=$keep ;;
	esac
fi
# A suffix for database names, unique to this run.
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')
pid='' tree='' db='' redis_port=''
cleanup() {
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	[ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	[ -z "$db" ] || psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	[ -z "$tree" ] || git -C "$repo" worktree remove --force "$tree" >/dev/null 2>&1 || true
}
trap 'cleanup; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
command -v psql >/dev/null || { echo "table: psql not found" >&2; exit 1; }
psql "$admin" -Atc 'select 1' >/dev/null || { echo "table: Postgres does not answer at $admin" >&2; exit 1; }

. "$repo/benchmarks/lib.sh" # start_redis

# median req/s, min, max and median p99 from a bench.sh output
figures() {
	awk '/^# median req\/s:/ {m = $4; lo = $6; hi = $8; sub(",", "", lo); sub("\\)", "", hi)}
		/^# median p99:/ {p = $4}
		END {print m, lo, hi, p}' "$1"
}

# Read from a file, not a pipe: a pipe would run the loop in a subshell,
# where pid, db and tree are out of reach of the cleanup trap.
git -C "$repo" log --reverse --format='%H %s' HEAD >"$tmp/log"
while read -r hash subject <&3; do
	nn=$(echo "$subject" | sed -n 's/^Step \([0-9][0-9]\)[:,].*/\1/p')
	case $nn in '' | 00) continue ;; esac
	title=$(echo "$subject" | sed 's/^Step [0-9][0-9][^:]*: //')
	tree="$tmp/step-$nn"
	git -C "$repo" worktree add --detach "$tree" "$hash" >/dev/null 2>&1
	(cd "$tree" && go build -o "$tmp/shortener-$nn" .) || { echo "table: step $nn does not build" >&2; exit 1; }
	dburl=''
	if [ -f "$tree/sql/schema.sql" ]; then
		psql "$admin" -qc "CREATE DATABASE shortener_table_${nn}_$suffix" >/dev/null
		db="shortener_table_${nn}_$suffix"
		noquery=${admin%%\?*}
		dburl="${noquery%/*}/$db${admin#"$noquery"}"
	fi
	redisurl=''
	if grep -qs REDIS_URL "$tree/config.go"; then
		[ -n "$redis_port" ] || start_redis "$tmp"
		redis-cli -p "$redis_port" flushall >/dev/null
		redisurl="redis://127.0.0.1:$redis_port/0"
	fi
	# Seeded before the app starts, as a deployment's links are there before
	# its processes: from step 15 the app builds a Bloom filter of every code
	# at start and trusts it, and a row added behind its back is found only
	# by its next sweep, seconds later (docs/15). The step's own schema
	# first (every schema.sql is safe to run again; the app runs it too).
	code=''
	if [ -n "$dburl" ]; then
		PGOPTIONS='-c client_min_messages=warning' psql "$dburl" -q -v ON_ERROR_STOP=1 -f "$tree/sql/schema.sql" >/dev/null
		psql "$dburl" -q -v rows="$rows" -f "$tree/sql/seed.sql" >/dev/null
		code=$(psql "$dburl" -Atc "select code from links where url = 'https://example.com/seed/$((rows / 2))'")
	fi
	# Port 0: the kernel picks a free port, and the app logs the one it got.
	# From step 08 creates are rate-limited per client, and hey is one
	# client: the limit is set too high to refuse, so that the create row
	# still measures creates, with the limit's cost (a Redis call) in it.
	# Steps before 08 ignore the two variables. From step 09 the metrics
	# listen on a port of their own, also picked by the kernel, and logged
	# as "metrics listening": not the port to measure.
	ADDR=127.0.0.1:0 METRICS_ADDR=127.0.0.1:0 DATABASE_URL=$dburl REDIS_URL=$redisurl CREATE_RATE=1000000 CREATE_BURST=1000000 \
		"$tmp/shortener-$nn" 2>"$out/$nn-server.log" &
	pid=$!
	i=0 port=''
	until [ -n "$port" ] && curl -fs -o /dev/null "http://127.0.0.1:$port/healthz"; do
		i=$((i + 1))
		[ "$i" -lt 300 ] || { echo "table: step $nn did not answer /healthz" >&2; cat "$out/$nn-server.log" >&2; exit 1; }
		kill -0 "$pid" 2>/dev/null || { echo "table: step $nn exited" >&2; cat "$out/$nn-server.log" >&2; exit 1; }
		sleep 0.1
		port=$(grep -v 'metrics listening' "$out/$nn-server.log" | sed -n 's/.*"\{0,1\}addr"\{0,1\}[=:]"\{0,1\}127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' | head -n 1)
	done
	for what in healthz redirect create; do
		(cd "$tree" && DATABASE_URL=$dburl REDIS_URL=$redisurl sh "$bench" -n "$runs" -d "$dur" -c "$conc" -w "$warm" -p "$pid" \
			${code:+-k "$code"} -l "step $nn, by benchmarks/table.sh" -o "$out/$nn-$what.txt" \
			"$what" "http://127.0.0.1:$port")
	done
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=''
	[ -z "$db" ] || { psql "$admin" -qc "DROP DATABASE $db WITH (FORCE)"; db=''; }
	git -C "$repo" worktree remove --force "$tree"; tree=''
	echo "$nn|$title" >>"$tmp/steps"
done 3<"$tmp/log"

echo "Runs: $runs x $dur at concurrency $conc, warm-up $warm, $rows seeded links where the step uses Postgres."
echo "Outputs: $outname"
echo
echo "| step | title | endpoint | median req/s | spread (min–max) | ratio to /healthz | median p99 |"
echo "|---|---|---|---|---|---|---|"
while IFS='|' read -r nn title; do
	set -- $(figures "$out/$nn-healthz.txt")
	h=$1
	for what in healthz redirect create; do
		set -- $(figures "$out/$nn-$what.txt")
		case $what in healthz) ep='GET /healthz' ;; redirect) ep='GET /{code}' ;; create) ep='POST /shorten' ;; esac
		awk -v nn="$nn" -v t="$title" -v ep="$ep" -v m="$1" -v lo="$2" -v hi="$3" -v p="$4" -v h="$h" 'BEGIN {
			printf "| %s | %s | `%s` | %.1f | %.1f–%.1f | %.3g | %s ms |\n", nn, t, ep, m, lo, hi, m / h, p }'
	done
done <"$tmp/steps"
