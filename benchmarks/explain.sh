#!/usr/bin/env bash
# explain.sh CODE: EXPLAIN (ANALYZE, BUFFERS) of the app's lookup for CODE
# against $DATABASE_URL, three times in a row (the first may read from disk,
# the others from Postgres's buffers), with a header saying how it was made.
set -euo pipefail
code=${1:?usage: benchmarks/explain.sh CODE}
: "${DATABASE_URL:?set DATABASE_URL}"
repo=$(git rev-parse --show-toplevel)
echo "# EXPLAIN (ANALYZE, BUFFERS) of the redirect's query, 3 times"
echo "# made by:  benchmarks/explain.sh $code"
echo "# commit:   $(git rev-parse --short=12 HEAD) ($( [ -n "$(git status --porcelain)" ] && echo dirty || echo clean) tree), code id $(sh "$repo/benchmarks/codeid.sh" "$repo")"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# postgres: $(psql "$DATABASE_URL" -Atc 'show server_version')"
echo "# data:     $(psql "$DATABASE_URL" -Atc 'select count(*) from links') rows in links, $(psql "$DATABASE_URL" -Atc "select pg_size_pretty(pg_total_relation_size('links'))") with indexes"
for i in 1 2 3; do
	echo
	echo "----- run $i -----"
	psql "$DATABASE_URL" -c "EXPLAIN (ANALYZE, BUFFERS) SELECT url FROM links WHERE code = '$code'"
done
