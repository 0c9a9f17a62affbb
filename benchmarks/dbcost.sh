#!/usr/bin/env bash
# dbcost.sh: what a test's database costs Postgres (step 25). Most tests
# make a database of their own (testDatabase, testdb_test.go), and the app
# applies sql/schema.sql when it opens one; a template with the schema in
# it would save the schema's first run. This times, in one psql session
# each (so that psql's own start is not counted), ROUNDS times:
#   CREATE DATABASE (the default WAL_LOG strategy) and DROP DATABASE;
#   the same with STRATEGY FILE_COPY;
#   sql/schema.sql on an empty database, then again on the same one (what
#   the app's open costs on a database cloned from a template), as the
#   app applies it: in one transaction, and since step 45 the indexes
#   below its marker line after the COMMIT, each on its own (CREATE INDEX
#   CONCURRENTLY cannot run in a transaction).
#
#   benchmarks/dbcost.sh [-n ROUNDS] [-o FILE]
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs psql.
# A few seconds.
set -euo pipefail
rounds=5 out=''
while getopts n:o: opt; do
	case $opt in n) rounds=$OPTARG ;; o) out=$OPTARG ;; *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
case $rounds in '' | *[!0-9]* | 0*) echo "dbcost.sh: -n takes a whole number above 0" >&2; exit 2 ;; esac
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
. "$repo/benchmarks/lib.sh" # machine_line
psql "$admin" -Atc 'select 1' >/dev/null || { echo "dbcost.sh: Postgres does not answer at $admin (set ADMIN_DATABASE_URL)" >&2; exit 1; }
suffix=$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')
# schema_as_the_app: psql's input for sql/schema.sql as the app applies
# it: timing on, the part above the marker line in one transaction, then
# each statement below it on its own (a file without the line: all of it
# in the transaction).
marker='^-- Built CONCURRENTLY, each on its own'
schema_as_the_app() {
	echo '\timing on'
	echo 'BEGIN;'
	sed -n "1,/$marker/p" "$repo/sql/schema.sql"
	echo 'COMMIT;'
	sed "1,/$marker/d" "$repo/sql/schema.sql"
}
w=dbcost_wal_$suffix f=dbcost_fc_$suffix s=dbcost_schema_$suffix
cleanup() { for d in "$w" "$f" "$s"; do psql "$admin" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
nq=${admin%%\?*}
surl="${nq%/*}/$s${admin#"$nq"}"
# timings: the "Time: N ms" lines of a psql session with \timing on, in order
timings() { awk '/^Time: / {printf "%s ", $2} END {print ""}'; }
{
	echo "# what a test's database costs: CREATE/DROP DATABASE and sql/schema.sql, ms, timed by psql's \\timing in one session"
	echo "# made by:   benchmarks/dbcost.sh -n $rounds; commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  postgres $(psql "$admin" -Atc 'show server_version') (fsync $(psql "$admin" -Atc 'show fsync'), shared_buffers $(psql "$admin" -Atc 'show shared_buffers'))"
	echo "#"
	echo "# round  create(wal_log) drop  create(file_copy) drop  schema  schema-again"
	for i in $(seq 1 "$rounds"); do
		a=$({ echo '\timing on'; echo "CREATE DATABASE $w;"; echo "DROP DATABASE $w;"; echo "CREATE DATABASE $f STRATEGY FILE_COPY;"; echo "DROP DATABASE $f;"; } | psql "$admin" -q -v ON_ERROR_STOP=1 | timings)
		psql "$admin" -qc "CREATE DATABASE $s" >/dev/null
		b=$(schema_as_the_app | PGOPTIONS='-c client_min_messages=warning' psql "$surl" -q -v ON_ERROR_STOP=1 | awk '/^Time: / {t += $2} END {printf "%.1f", t}')
		c=$(schema_as_the_app | PGOPTIONS='-c client_min_messages=warning' psql "$surl" -q -v ON_ERROR_STOP=1 | awk '/^Time: / {t += $2} END {printf "%.1f", t}')
		psql "$admin" -qc "DROP DATABASE $s" >/dev/null
		echo "$i ${a}$b $c"
	done | medians
} >"${out:-/dev/stdout}"
