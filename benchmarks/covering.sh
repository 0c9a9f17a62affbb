#!/usr/bin/env bash
# covering.sh: step 46's sitting. Does a covering index pay for a
# redirect's lookup? Postgres answers the app's lookup (store_postgres.go's
# lookupSQL: url, redirect, expires_at, max_clicks, deleted_at and version
# of one code) from links_code_key, a B-tree that holds only the code, and
# then reads the row from the table. A B-tree on (code) INCLUDE (those
# columns) holds them all, and Postgres can answer from it alone (an
# index-only scan) where the table's pages are marked all-visible.
#
# Two copies of longtail.sh's kept database (LINKS links; CREATE DATABASE
# ... TEMPLATE, dropped at the end): A as the app's schema makes it; B with
# links_code_key made again as UNIQUE (code) INCLUDE (those columns), so
# that code has one index, as a schema that adopted it would have (an
# index added beside links_code_key is not chosen once the table has pages
# not marked all-visible: the last part shows it). Both vacuumed. In each
# copy a table probe holds every tenth link's code, so that a client can
# draw a code at random without touching links (the same draw in both).
#   Lookup rounds, each copy in turn (odd rounds A first): pgbench -M
#     prepared -c C -j 2 -T D, a script that draws a probe at random
#     (uniform: a miss of the app's caches on the long tail is a link
#     asked for the first time, anywhere in the table), then runs the
#     app's lookup for its code. Per run: the plan's node (EXPLAIN just
#     before), transactions a second, every postgres process's CPU per
#     transaction, and the lookup statement's mean latency (pgbench -r).
#   Then insert rounds, the same way: pgbench -c 4 -j 2 for D/2 seconds,
#     one INSERT of one link a transaction, as the app's create (ON
#     CONFLICT (code) DO NOTHING, under links' own trigger): what the wider
#     index costs a create.
#   Then, per copy: EXPLAIN (ANALYZE, BUFFERS) of the lookup for one seeded
#     code and for one inserted in the rounds, the indexes' sizes. And in
#     A: the covering index added beside links_code_key (not unique), the
#     table vacuumed, the plan; 1,000 more links inserted, the plan again.
# Postgres alone, not the app: what the app would gain is reasoned from
# this, not measured here.
#
#   benchmarks/covering.sh [-q] [-o FILE] [-n ROUNDS] [-d SECONDS] [-c CLIENTS] [-l LINKS]
#
#   -n, -d    rounds (default 5) and seconds per lookup run (default 20)
#   -c        pgbench's clients for the lookups (default 8)
#   -l LINKS  links (default 10,000,000; seeded by longtail.sh -p seed if
#             missing)
#   -o FILE   where the output goes (default: standard output)
#   -q        quick: 100,000 links, 1 round of 2 s
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs psql,
# pgbench and awk, and Postgres on this machine (its CPU is read from
# /proc). About ROUNDS x 3 x D seconds, plus the copies and the indexes.
set -euo pipefail
args="$*"
rounds=5 dur=20 clients=8 links=10000000 out='' quick=''
while getopts qo:n:d:c:l: opt; do
	case $opt in
	q) quick=' -q' rounds=1 dur=2 links=100000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=$OPTARG ;; c) clients=$OPTARG ;; l) links=$OPTARG ;;
	*) sed -n '2,48p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "covering.sh: no arguments but options" >&2; exit 2; }
for v in "$rounds" "$dur" "$clients" "$links"; do
	case $v in '' | *[!0-9]* | 0*) echo "covering.sh: -n, -d, -c and -l take positive whole numbers, not '$v'" >&2; exit 2 ;; esac
done
[ "$dur" -ge 2 ] || { echo "covering.sh: -d must be 2 or more (the inserts run half of it)" >&2; exit 2; }
[ "$links" -ge 10 ] || { echo "covering.sh: -l must be 10 or more (a probe is every tenth link)" >&2; exit 2; }
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
[ -z "$out" ] || : >"$out" || { echo "covering.sh: cannot write $out" >&2; exit 2; }
for tool in psql pgbench awk; do
	command -v "$tool" >/dev/null || { echo "covering.sh: $tool not found" >&2; exit 1; }
done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
. benchmarks/lib.sh # machine_line, ticks_named
[ "$(ticks_named postgres)" -gt 0 ] || { echo "covering.sh: no process named postgres in /proc: Postgres's CPU cannot be measured here" >&2; exit 1; }
hz=$(getconf CLK_TCK)
echo "covering.sh: seeding or checking $links links (longtail.sh -p seed)" >&2
benchmarks/longtail.sh -p seed -l "$links" >/dev/null || { echo "covering.sh: benchmarks/longtail.sh -p seed failed" >&2; exit 1; }
nq=${admin%%\?*}
copy_a=shortener_covering_a_$$ copy_b=shortener_covering_b_$$
url_of() { echo "${nq%/*}/$1${admin#"$nq"}"; }
url_a=$(url_of "$copy_a") url_b=$(url_of "$copy_b")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/covering.XXXXXX")
cleanup() {
	local d
	for d in "$copy_a" "$copy_b"; do
		psql "$admin" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null || echo "covering.sh: could not drop $d" >&2
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# The app's lookup, as store_postgres.go sends it (checked below).
lookup="SELECT url, redirect, expires_at, max_clicks IS NOT NULL, deleted_at IS NOT NULL, version FROM links WHERE code ="
grep -q 'lookupSQL = `SELECT url, redirect, expires_at, max_clicks IS NOT NULL, deleted_at IS NOT NULL, version$' store_postgres.go ||
	{ echo "covering.sh: store_postgres.go's lookupSQL is not the lookup this script sends; update the script" >&2; exit 1; }
cols="url, redirect, expires_at, max_clicks, deleted_at, version"
index="CREATE UNIQUE INDEX links_code_key ON links (code) INCLUDE ($cols)"
extra="CREATE INDEX links_code_extra ON links (code) INCLUDE ($cols)"

for d in "$copy_a" "$copy_b"; do
	echo "covering.sh: copying the database to $d" >&2
	psql "$admin" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $d TEMPLATE shortener_longtail_$links" >/dev/null
	psql "$(url_of "$d")" -v ON_ERROR_STOP=1 -q \
		-c 'CREATE TABLE probe AS SELECT (id / 10)::int AS n, code FROM links WHERE id % 10 = 0' \
		-c 'ALTER TABLE probe ADD PRIMARY KEY (n)' -c 'CREATE SEQUENCE covering_codes' >/dev/null
done
echo "covering.sh: making links_code_key again in $copy_b, covering" >&2
t0=$(date +%s.%N)
psql "$url_b" -v ON_ERROR_STOP=1 -q -c 'DROP INDEX links_code_key' -c "$index" >/dev/null
t1=$(date +%s.%N)
build_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
for u in "$url_a" "$url_b"; do psql "$u" -v ON_ERROR_STOP=1 -qc 'VACUUM ANALYZE links' -c 'VACUUM ANALYZE probe' >/dev/null; done
probes=$(psql "$url_a" -Atc 'SELECT count(*) FROM probe')
mid=$(((probes + 1) / 2))
code=$(psql "$url_a" -Atc "SELECT code FROM probe WHERE n = $mid")
{
	echo '\set n random(1, :probes)'
	echo 'SELECT code AS c FROM probe WHERE n = :n \gset'
	echo "$lookup :c;"
} >"$tmp/lookup.sql"
echo "INSERT INTO links (code, url) VALUES ('cv' || nextval('covering_codes'), 'https://example.com/covering') ON CONFLICT (code) DO NOTHING;" >"$tmp/insert.sql"
ins_dur=$((dur / 2))

# plan URL: the lookup's plan's first node and index, as one word
# ("Index_Only_Scan:links_code_key").
plan() {
	psql "$1" -v ON_ERROR_STOP=1 -Atc "EXPLAIN $lookup '$code'" | head -n 1 |
		sed -E 's/^ *(->)? *//; s/ +on links.*//; s/ using /:/; s/ /_/g'
}
# lookups WAY URL ROUND: one lookup run; prints its row.
lookups() {
	local way=$1 url=$2 round=$3 p0 p1 node f=$tmp/lookups-$3-$1.txt
	node=$(plan "$url")
	p0=$(ticks_named postgres)
	(cd "$tmp" && pgbench -n -M prepared -r -c "$clients" -j 2 -T "$dur" -D probes="$probes" -f lookup.sql "$url") >"$f" 2>&1 ||
		{ echo "covering.sh: pgbench failed:" >&2; cat "$f" >&2; exit 1; }
	p1=$(ticks_named postgres)
	awk -v way="$way" -v round="$round" -v pt=$((p1 - p0)) -v hz="$hz" -v node="$node" '
		/^number of failed transactions: / { failed = $5 }
		/^number of transactions actually processed: / { n = $6 }
		/^tps = / { tps = $3 }
		/FROM links WHERE code = / { lat = $1 }
		END {
			if (n == "" || tps == "" || lat == "") { print "covering.sh: could not read pgbench'"'"'s output" > "/dev/stderr"; exit 1 }
			printf "%s lookups %s %s %.0f %.1f %.1f %d\n", round, way, node, tps, pt / hz * 1e6 / n, lat * 1000, failed + 0 }' "$f"
}
# inserts WAY URL ROUND: one insert run; prints its row.
inserts() {
	local way=$1 url=$2 round=$3 p0 p1 f=$tmp/inserts-$3-$1.txt
	p0=$(ticks_named postgres)
	pgbench -n -c 4 -j 2 -T "$ins_dur" -f "$tmp/insert.sql" "$url" >"$f" 2>&1 ||
		{ echo "covering.sh: pgbench failed:" >&2; cat "$f" >&2; exit 1; }
	p1=$(ticks_named postgres)
	awk -v way="$way" -v round="$round" -v pt=$((p1 - p0)) -v hz="$hz" '
		/^number of failed transactions: / { failed = $5 }
		/^number of transactions actually processed: / { n = $6 }
		/^tps = / { tps = $3 }
		END {
			if (n == "" || tps == "") { print "covering.sh: could not read pgbench'"'"'s output" > "/dev/stderr"; exit 1 }
			printf "%s inserts %s - %.0f %.1f - %d\n", round, way, tps, pt / hz * 1e6 / n, failed + 0 }' "$f"
}
# explain URL CODE: EXPLAIN (ANALYZE, BUFFERS) of the lookup, run twice,
# the second shown.
explain() {
	psql "$1" -v ON_ERROR_STOP=1 -Atc "EXPLAIN (ANALYZE, BUFFERS) $lookup '$2'" >/dev/null
	psql "$1" -v ON_ERROR_STOP=1 -Atc "EXPLAIN (ANALYZE, BUFFERS) $lookup '$2'" | sed 's/^/#   /'
}
# pages URL: the table's pages, those marked all-visible (as VACUUM last
# counted them), and its pages now.
pages() {
	psql "$1" -v ON_ERROR_STOP=1 -Atc "SELECT 'relpages ' || relpages || ', relallvisible ' || relallvisible || ', pages now ' || pg_relation_size('links') / current_setting('block_size')::int FROM pg_class WHERE relname = 'links'"
}

body() {
	echo "# rounds: round what way plan per_s pg_cpu_us_each lookup_stmt_us failed"
	local i way u newcode
	for i in $(seq 1 "$rounds"); do
		echo "covering.sh: lookups, round $i of $rounds" >&2
		if [ $((i % 2)) -eq 1 ]; then lookups A "$url_a" "$i"; lookups B "$url_b" "$i"; else lookups B "$url_b" "$i"; lookups A "$url_a" "$i"; fi
	done
	for i in $(seq 1 "$rounds"); do
		echo "covering.sh: inserts, round $i of $rounds" >&2
		if [ $((i % 2)) -eq 1 ]; then inserts A "$url_a" "$i"; inserts B "$url_b" "$i"; else inserts B "$url_b" "$i"; inserts A "$url_a" "$i"; fi
	done
	newcode=cv1
	for way in A B; do
		u=$url_a
		[ "$way" = A ] || u=$url_b
		echo "# $way after the rounds: $(pages "$u")"
		echo "# $way: EXPLAIN (ANALYZE, BUFFERS) of the lookup for a seeded code (probe $mid), run twice, the second shown"
		explain "$u" "$code"
		echo "# $way: the same for $newcode, inserted in the rounds"
		explain "$u" "$newcode"
		echo "# $way: indexes on links, MB"
		psql "$u" -v ON_ERROR_STOP=1 -Atc "SELECT indexrelid::regclass, round(pg_relation_size(indexrelid) / 1048576.0, 1) FROM pg_index WHERE indrelid = 'links'::regclass ORDER BY 1" | sed 's/^/#   /'
	done
	echo "covering.sh: the covering index beside links_code_key, in $copy_a" >&2
	echo "# A, then: $extra; VACUUM ANALYZE links"
	psql "$url_a" -v ON_ERROR_STOP=1 -q -c "$extra" -c 'VACUUM ANALYZE links' >/dev/null
	echo "#   $(pages "$url_a"); plan: $(plan "$url_a")"
	echo "# A, then 1,000 more links inserted in one statement (no VACUUM)"
	psql "$url_a" -v ON_ERROR_STOP=1 -qc "INSERT INTO links (code, url) SELECT 'cx' || g, 'https://example.com/covering' FROM generate_series(1, 1000) g" >/dev/null
	echo "#   $(pages "$url_a"); plan: $(plan "$url_a")"
}
report() {
	echo "# Does a covering index pay for a redirect's lookup? Postgres alone, on $links links: A, the app's schema; B, links_code_key made covering; interleaved"
	echo "# made by:   benchmarks/covering.sh$quick -n $rounds -d $dur -c $clients -l $links (given: ${args:-none}); date $(date -u '+%Y-%m-%dT%H:%M:%SZ'); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ', dirty tree')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(psql -Atc 'SHOW server_version' "$admin" | sed 's/^/PostgreSQL /'), $(pgbench --version); shared_buffers $(psql -Atc 'SHOW shared_buffers' "$admin")"
	echo "# load:      $(cut -d' ' -f1-3 /proc/loadavg) (load averages over 1, 5, 15 min as the rounds started)"
	echo "# B's index: DROP INDEX links_code_key; $index; $build_s s on the copy, nothing else running on it; then both copies VACUUM ANALYZE"
	echo "# lookups:   pgbench -n -M prepared -r -c $clients -j 2 -T $dur -D probes=$probes -f lookup.sql, where lookup.sql is:"
	sed 's/^/#              /' "$tmp/lookup.sql"
	echo "#            plan: the lookup's first plan node and index (EXPLAIN of it for a seeded code, just before the run)"
	echo "# inserts:   pgbench -n -c 4 -j 2 -T $ins_dur -f insert.sql: $(cat "$tmp/insert.sql")"
	echo "# columns:   per_s, transactions a second (a lookup transaction is the probe's read and the lookup); pg_cpu_us_each, every postgres"
	echo "#            process's CPU (user+system, /proc, ended backends through the postmaster) over the transactions; lookup_stmt_us,"
	echo "#            the lookup statement's mean latency as pgbench -r gives it (client to server and back); failed, pgbench's failed transactions"
	body
}
if [ -n "$out" ]; then report | tee "$out"; else report; fi
