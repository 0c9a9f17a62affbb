#!/usr/bin/env bash
# drivers.sh: what the choice of Postgres driver costs per lookup that
# reaches the database: lib/pq, the driver the app keeps, against pgx's
# database/sql driver (pgx/v5/stdlib), with pgx's own pool (pgxpool) and
# lib/pq without the app's dialer beside them. It builds benchmarks/drivers
# (a module of its own, so that pgx stays out of the app's go.mod) and runs
# it: in a database of its own seeded by sql/seed.sql, the app's prepared
# lookup through each driver, in interleaved rounds at concurrency 1 and 8,
# every answer checked; per lookup, the CPU of this client and of Postgres,
# heap allocations and wall time (benchmarks/drivers/main.go says how).
#
#   benchmarks/drivers.sh [-q] [-o FILE] [-n ROUNDS] [-d SECONDS] [-r ROWS]
#
#   -q        quick: 1 round of 1 s runs over 10,000 rows; the output is
#             kept only if -o is given (a smoke test is not a measurement)
#   -o FILE   where the output goes (default benchmarks/14-drivers.txt)
#   -n, -d    rounds (default 5) and seconds per run (default 3); each run
#             after 500 lookups per worker of warm-up, not measured
#   -r ROWS   links seeded (default 500,000)
#
# Takes about ROUNDS × 2 × 4 × SECONDS s, plus the seeding: 3 minutes with
# the defaults, 20 s with -q. Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# git, psql and getconf, and Postgres on this machine: its CPU is read from
# /proc.
set -euo pipefail

out='' quick='' rounds=5 dur=3 rows=500000 rows_given=''
while getopts qo:n:d:r: opt; do
	case $opt in
	q) quick=1 ;;
	o) out=$OPTARG ;;
	n) rounds=$OPTARG ;;
	d) dur=${OPTARG%s} ;;
	r) rows=$OPTARG rows_given=1 ;;
	*) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "drivers.sh: unexpected arguments: $*" >&2; exit 2; }
if [ "$quick" ]; then
	rounds=1 dur=1
	[ "$rows_given" ] || rows=10000
fi
for v in "$rounds" "$dur" "$rows"; do
	case $v in '' | *[!0-9]* | 0) echo "drivers.sh: -n, -d and -r take whole numbers above 0, got '$v'" >&2; exit 2 ;; esac
done
for tool in go git psql getconf; do
	command -v "$tool" >/dev/null || { echo "drivers.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
if [ -z "$out" ] && [ -z "$quick" ]; then out="$repo/benchmarks/14-drivers.txt"; fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/drivers.XXXXXX")
child=''
# The program drops its database however it ends; on Ctrl-C or a TERM to
# this script, it is told to stop (an interrupt) and waited for, so that
# it can.
cleanup() {
	if [ -n "$child" ]; then
		kill -INT "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

(cd benchmarks/drivers && go build -o "$tmp/drivers" .)
dep() { go version -m "$tmp/drivers" | awk -v m="$1" '$1 == "dep" && $2 == m {print $3}'; }
self=${out#"$repo"/} # the output, if it is in the tree, does not make it dirty
[ "$self" != "$out" ] || self=''
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ${self:+":!$self"} || echo ' (dirty tree)')"
args=(-admin "$admin" -rows "$rows" -n "$rounds" -d "${dur}s" -schema "$repo/sql/schema.sql" -seedsql "$repo/sql/seed.sql")

"$tmp/drivers" "${args[@]}" >"$tmp/body" &
child=$!
wait "$child"
child=''

{
	echo "# drivers: what the choice of Postgres driver costs per lookup: lib/pq (the app's) against pgx/v5/stdlib, pgxpool beside them"
	echo "# made by:   benchmarks/drivers.sh -n $rounds -d $dur -r $rows${quick:+ (-q)}; code id $(sh benchmarks/codeid.sh benchmarks/drivers) (benchmarks/drivers),"
	echo "#            commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# program:   (cd benchmarks/drivers && go build -o drivers . && ./drivers -rows $rows -n $rounds -d ${dur}s -schema ../../sql/schema.sql -seedsql ../../sql/seed.sql)"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version'), lib/pq $(dep github.com/lib/pq), pgx $(dep github.com/jackc/pgx/v5), puddle $(dep github.com/jackc/puddle/v2)"
	echo "# size:      $rows seeded links; rounds: $rounds, of ${dur} s runs, each variant at each concurrency once a round; client and Postgres on this machine"
	cat "$tmp/body"
} >"$tmp/out"

# The medians and the ratios, on the terminal.
awk '/^# [AC]\./ {show = 1} /^# [BD]\./ {show = 0} show' "$tmp/out"
if [ -n "$out" ]; then
	mkdir -p "$(dirname "$out")"
	cp "$tmp/out" "$out"
	echo "Output in ${out#"$repo"/}"
else
	echo "Output not kept (give -o FILE to keep it)"
fi
