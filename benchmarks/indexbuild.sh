#!/usr/bin/env bash
# indexbuild.sh: step 45's sitting. What building a new index on links
# costs the writes beside it: a plain CREATE INDEX (how steps 02 to 44
# built theirs, in the schema's transaction) against CREATE INDEX
# CONCURRENTLY (step 45). On a copy of longtail.sh's kept database (LINKS
# links, made with CREATE DATABASE ... TEMPLATE and dropped at the end),
# in each round, each way in turn (odd rounds plain first): pgbench
# inserts links for D seconds (-c 4 -j 2, one INSERT of one link a
# transaction, its code from a sequence, under links' own trigger); W
# seconds in, psql builds a B-tree on links (code) INCLUDE (url), the
# covering index issue 25 asks about, and the script times it; then the
# index is dropped. Not the app: Postgres alone, so that nothing but the
# build is between the inserts and their table.
#
# Per run, from pgbench's log of every transaction (-l): inserts done
# during the build, a second, and outside it; the longest insert; inserts
# that took over 500 ms (DB_TIMEOUT's default: in the app such a create
# would have been a 503, which is reasoning, not run here); and the build's
# time.
#
#   benchmarks/indexbuild.sh [-q] [-o FILE] [-n ROUNDS] [-d SECONDS] [-w SECONDS] [-l LINKS]
#
#   -n, -d    rounds (default 3) and seconds per run (default 40)
#   -w SECS   seconds of inserts before the build starts (default 5)
#   -l LINKS  links (default 10,000,000; seeded by longtail.sh -p seed if
#             missing)
#   -o FILE   where the output goes (default: standard output)
#   -q        quick: 100,000 links, 1 round of 4 s, the build 1 s in
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs psql,
# pgbench and awk. About 2 × ROUNDS × (D + 10) seconds, plus the copy.
set -euo pipefail
args="$*"
rounds=3 dur=40 warm=5 links=10000000 out='' quick=''
while getopts qo:n:d:w:l: opt; do
	case $opt in
	q) quick=' -q' rounds=1 dur=4 warm=1 links=100000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=$OPTARG ;; w) warm=$OPTARG ;; l) links=$OPTARG ;;
	*) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "indexbuild.sh: no arguments but options" >&2; exit 2; }
for v in "$rounds" "$dur" "$warm" "$links"; do
	case $v in '' | *[!0-9]* | 0*) echo "indexbuild.sh: -n, -d, -w and -l take positive whole numbers, not '$v'" >&2; exit 2 ;; esac
done
[ "$warm" -lt "$dur" ] || { echo "indexbuild.sh: -w ($warm) must be less than -d ($dur)" >&2; exit 2; }
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
[ -z "$out" ] || : >"$out" || { echo "indexbuild.sh: cannot write $out" >&2; exit 2; }
for tool in psql pgbench awk; do
	command -v "$tool" >/dev/null || { echo "indexbuild.sh: $tool not found" >&2; exit 1; }
done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
. benchmarks/lib.sh # machine_line
benchmarks/longtail.sh -p seed -l "$links" >/dev/null || { echo "indexbuild.sh: benchmarks/longtail.sh -p seed failed" >&2; exit 1; }
nq=${admin%%\?*}
copy=shortener_indexbuild_$$
dburl="${nq%/*}/$copy${admin#"$nq"}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/indexbuild.XXXXXX")
cleanup() {
	psql "$admin" -qc "DROP DATABASE IF EXISTS $copy WITH (FORCE)" >/dev/null || echo "indexbuild.sh: could not drop $copy" >&2
	rm -rf "$tmp"
}
trap cleanup EXIT
psql "$admin" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $copy TEMPLATE shortener_longtail_$links" >/dev/null
psql "$dburl" -v ON_ERROR_STOP=1 -qc 'CREATE SEQUENCE indexbuild_codes' -c 'VACUUM ANALYZE links' >/dev/null
echo "INSERT INTO links (code, url) VALUES ('ib' || nextval('indexbuild_codes'), 'https://example.com/indexbuild');" >"$tmp/insert.sql"
have=$(psql "$dburl" -Atc 'SELECT count(*) FROM links')

# run WAY ROUND: one run; prints its row.
run() {
	local way=$1 round=$2 stmt t0 t1 pg
	stmt="CREATE INDEX indexbuild_cover ON links (code) INCLUDE (url)"
	[ "$way" = plain ] || stmt="CREATE INDEX CONCURRENTLY indexbuild_cover ON links (code) INCLUDE (url)"
	(cd "$tmp" && pgbench -n -c 4 -j 2 -T "$dur" -f insert.sql -l --log-prefix="log-$round-$way" "$dburl" >"$tmp/pgbench-$round-$way.txt" 2>&1) &
	pg=$!
	sleep "$warm"
	t0=$(date +%s.%N)
	psql "$dburl" -v ON_ERROR_STOP=1 -qc "$stmt" >/dev/null
	t1=$(date +%s.%N)
	wait "$pg" || { echo "indexbuild.sh: pgbench failed:" >&2; cat "$tmp/pgbench-$round-$way.txt" >&2; exit 1; }
	psql "$dburl" -v ON_ERROR_STOP=1 -qc 'DROP INDEX indexbuild_cover' >/dev/null
	# pgbench's log: client, transaction, latency (µs), script, end (s, µs).
	cat "$tmp"/log-"$round-$way".* | awk -v t0="$t0" -v t1="$t1" -v way="$way" -v round="$round" '
		{ end = $5 + $6 / 1e6; n++; if ($3 > max) max = $3; if ($3 > 500000) slow++
		  if (end >= t0 && end <= t1) inb++; else outb++
		  if (first == "" || end < first) first = end; if (end > last) last = end }
		END { b = t1 - t0; o = (last - first) - b
		      printf "%s %s %.2f %.0f %.0f %d %.1f %d\n", round, way, b, (b > 0 ? inb / b : 0), (o > 0 ? outb / o : 0), n, max / 1000, slow + 0 }'
}

body() {
	echo "# rounds: round way build_s inserts_per_s_during inserts_per_s_outside inserts max_ms over_500ms"
	local i
	for i in $(seq 1 "$rounds"); do
		progress "round $i of $rounds"
		if [ $((i % 2)) -eq 1 ]; then run plain "$i"; run concurrently "$i"; else run concurrently "$i"; run plain "$i"; fi
	done
}
report() {
	echo "# What building an index on $have links costs the inserts beside it: CREATE INDEX against CREATE INDEX CONCURRENTLY, interleaved"
	echo "# made by:   benchmarks/indexbuild.sh$quick -n $rounds -d $dur -w $warm -l $links (given: ${args:-none}); date $(date -u '+%Y-%m-%dT%H:%M:%SZ'); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ', dirty tree')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(psql -Atc 'SHOW server_version' "$admin" | sed 's/^/PostgreSQL /'), $(pgbench --version)"
	echo "# load:      $(cut -d' ' -f1-3 /proc/loadavg) (load averages over 1, 5, 15 min as it started)"
	echo "# each run:  pgbench -n -c 4 -j 2 -T $dur -f insert.sql -l (insert.sql: $(cat "$tmp/insert.sql")), and $warm s in:"
	echo "#            psql -c 'CREATE INDEX [CONCURRENTLY] indexbuild_cover ON links (code) INCLUDE (url)', timed by the script (date before and after); then DROP INDEX"
	echo "# columns:   build_s, the build's seconds; inserts_per_s_during, those that ended while it built over its seconds; _outside, the rest over the run's other"
	echo "#            seconds; inserts, all in the run; max_ms, the longest; over_500ms, those over DB_TIMEOUT's default"
	body
}
if [ -n "$out" ]; then report | tee "$out"; else report; fi
