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
#   -q      quick: 1 run of 1,000 requests at concurrency 10, no warm-up,
#           10,000 rows (checks that the command works, on a machine of any
#           speed or load; the figures mean little)
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

runs=5 dur=10s conc=50 warm=3s rows=500000 out='' reqs=''
while getopts qo:n:d:c:r: opt; do
	case $opt in
	q) runs=1 reqs=1000 conc=10 warm=0 rows=10000 ;;
	o) out=$OPTARG ;; n) runs=$OPTARG ;; d) dur=$OPTARG ;; c) conc=$OPTARG ;; r) rows=$OPTARG ;;
	*) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
# lenflag: bench.sh's flag for one run's length, requests or a duration
if [ -n "$reqs" ]; then lenflag="-N $reqs" dur="$reqs requests"; else lenflag="-d $dur"; fi
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
app_pid='' tree='' db='' redis_port=''
cleanup() {
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	[ -z "$app_pid" ] || { kill "$app_pid" 2>/dev/null || true; wait "$app_pid" 2>/dev/null || true; }
	[ -z "$db" ] || psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	[ -z "$tree" ] || git -C "$repo" worktree remove --force "$tree" >/dev/null 2>&1 || true
}
trap 'cleanup; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
command -v psql >/dev/null || { echo "table: psql not found" >&2; exit 1; }
psql "$admin" -Atc 'select 1' >/dev/null || { echo "table: Postgres does not answer at $admin" >&2; exit 1; }

. "$repo/benchmarks/lib.sh" # step_tree, seeded_db, step_app, start_redis

# median req/s, min, max and median p99 from a bench.sh output
figures() {
	awk '/^# median req\/s:/ {m = $4; lo = $6; hi = $8; sub(",", "", lo); sub("\\)", "", hi)}
		/^# median p99:/ {p = $4}
		END {print m, lo, hi, p}' "$1"
}

# Read from a file, not a pipe: a pipe would run the loop in a subshell,
# where app_pid, db and tree are out of reach of the cleanup trap.
git -C "$repo" log --reverse --format='%H %s' HEAD >"$tmp/log"
while read -r hash subject <&3; do
	nn=$(echo "$subject" | sed -n 's/^Step \([0-9][0-9]\)[:,].*/\1/p')
	case $nn in '' | 00) continue ;; esac
	title=$(echo "$subject" | sed 's/^Step [0-9][0-9][^:]*: //')
	progress "step $nn"
	tree="$tmp/step-$nn"
	step_tree "$hash" "$tree" "$tmp/shortener-$nn"
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
	dburl='' code=''
	if [ -f "$tree/sql/schema.sql" ]; then
		db="shortener_table_${nn}_$suffix"
		seeded_db "$admin" "$rows" "$tree"
	fi
	# The kernel picks the ports, and the app logs the one it got. From
	# step 08 creates are rate-limited per client, and hey is one client:
	# step_app sets the limit too high to refuse, so that the create row
	# still measures creates, with the limit's cost (a Redis call) in it.
	step_app "$tmp/shortener-$nn" "$out/$nn-server.log"
	port=$app_port
	for what in healthz redirect create; do
		(cd "$tree" && DATABASE_URL=$dburl REDIS_URL=$redisurl sh "$bench" -n "$runs" $lenflag -c "$conc" -w "$warm" -p "$app_pid" \
			${code:+-k "$code"} -l "step $nn, by benchmarks/table.sh" -o "$out/$nn-$what.txt" \
			"$what" "http://127.0.0.1:$port")
	done
	kill "$app_pid"; wait "$app_pid" 2>/dev/null || true; app_pid=''
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
