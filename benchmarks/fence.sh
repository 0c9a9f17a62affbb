#!/usr/bin/env bash
# fence.sh: step 47's sitting. What does the replica fence cost a read
# on a standby? Since step 47 each of the app's reads from a replica
# carries a bound (replicafence.go): store_postgres.go's lookup with
# replicaFenceCond added, so that the standby returns the row only if the
# statement's snapshot holds every transaction the primary had completed
# when the fence last asked it. This measures that condition, Postgres
# alone, on a real standby.
#
# A database of its own on the primary (ADMIN_DATABASE_URL), the app's
# schema (sql/schema.sql), LINKS links (codes f1, f2, ...), vacuumed; a hot
# standby streaming from it (deploy/replica.sh, on a free port, deleted at
# the end), waited for until it has every link.
#   Rounds, A and B in turn (odd rounds A first), on the standby: pgbench
#     -n -M prepared -r -c C -j 2 -T D, a script that draws a link at
#     random and runs the app's lookup for it: A, store_postgres.go's
#     lookupSQL; B, lookupFencedSQL, with the primary's xmax asked just
#     before the run as the bound (as the fence asks it). Per run:
#     transactions a second, every postgres process's CPU per transaction
#     (primary and standby: the primary is idle), the lookup statement's
#     mean latency (pgbench -r), and failed transactions.
#   Before the rounds, once: B's lookup of one link through psql, which
#   must return its row (a bound the standby holds: B measures reads it
#   answers, not ones it holds back), and one with a bound it cannot hold
#   yet, which must return none.
#   Then per round, B/A of each figure, and their median and range.
#
#   benchmarks/fence.sh [-q] [-o FILE] [-n ROUNDS] [-d SECONDS] [-c CLIENTS] [-l LINKS]
#
#   -n, -d    rounds (default 5) and seconds per run (default 10)
#   -c        pgbench's clients (default 4)
#   -l LINKS  links (default 1,000,000)
#   -o FILE   where the output goes (default: standard output)
#   -q        quick: 10,000 links, 1 round of 2 s
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable): a
# superuser on a primary that takes replication connections from
# 127.0.0.1 (deploy/services.sh's does). Needs psql, pgbench, awk, and
# Postgres's programs on this machine (deploy/replica.sh finds them). About
# ROUNDS x 2 x D seconds, plus the seeding and the copy.
set -euo pipefail
args="$*"
rounds=5 dur=10 clients=4 links=1000000 out='' quick=''
while getopts qo:n:d:c:l: opt; do
	case $opt in
	q) quick=' -q' rounds=1 dur=2 links=10000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=$OPTARG ;; c) clients=$OPTARG ;; l) links=$OPTARG ;;
	*) sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "fence.sh: no arguments but options" >&2; exit 2; }
for v in "$rounds" "$dur" "$clients" "$links"; do
	case $v in '' | *[!0-9]* | 0*) echo "fence.sh: -n, -d, -c and -l take positive whole numbers, not '$v'" >&2; exit 2 ;; esac
done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
[ -z "$out" ] || : >"$out" || { echo "fence.sh: cannot write $out" >&2; exit 2; }
for tool in psql pgbench awk; do
	command -v "$tool" >/dev/null || { echo "fence.sh: $tool not found" >&2; exit 1; }
done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
. benchmarks/lib.sh # machine_line, ticks_named, freeport, progress
[ "$(ticks_named postgres)" -gt 0 ] || { echo "fence.sh: no process named postgres in /proc: Postgres's CPU cannot be measured here" >&2; exit 1; }
hz=$(getconf CLK_TCK)

# The app's statements, as store_postgres.go has them (checked).
lookup="SELECT url, redirect, expires_at, max_clicks IS NOT NULL, deleted_at IS NOT NULL, version FROM links WHERE code ="
cond='AND pg_snapshot_xmin(pg_current_snapshot()) >= $2::xid8'
grep -q 'lookupSQL = `SELECT url, redirect, expires_at, max_clicks IS NOT NULL, deleted_at IS NOT NULL, version$' store_postgres.go &&
	grep -qF "replicaFenceCond     = \` $cond\`" store_postgres.go ||
	{ echo "fence.sh: store_postgres.go's lookupSQL or replicaFenceCond is not what this script sends; update the script" >&2; exit 1; }
xmax_sql=$(sed -n 's/^\tprimaryXmaxSQL = `\(.*\)`$/\1/p' replicafence.go)
[ -n "$xmax_sql" ] || { echo "fence.sh: replicafence.go's primaryXmaxSQL not found; update the script" >&2; exit 1; }

db=shortener_fence_$$
nq=${admin%%\?*}
url_of() { echo "${nq%/*}/$1${admin#"$nq"}"; }
primary=$(url_of "$db")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fence.XXXXXX")
chmod 755 "$tmp" # the standby runs as the user postgres, inside it
rport=$(freeport)
standby_admin="postgres://postgres@127.0.0.1:$rport/postgres?sslmode=disable"
standby="postgres://postgres@127.0.0.1:$rport/$db?sslmode=disable"
replica() { PRIMARY_URL=$admin REPLICA_PORT=$rport REPLICA_DIR=$tmp/replica deploy/replica.sh "$@"; }
cleanup() {
	replica down >/dev/null 2>&1 || echo "fence.sh: could not stop the standby (deploy/replica.sh down)" >&2
	psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || echo "fence.sh: could not drop $db" >&2
	rm -rf "$tmp"
}
trap cleanup EXIT

progress "seeding $links links in $db"
psql "$admin" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $db" >/dev/null
psql "$primary" -v ON_ERROR_STOP=1 -q -f sql/schema.sql >/dev/null
psql "$primary" -v ON_ERROR_STOP=1 -q \
	-c "INSERT INTO links (code, url) SELECT 'f' || g, 'https://example.com/fence/' || g FROM generate_series(1, $links) g" \
	-c 'VACUUM ANALYZE links' >/dev/null
progress "starting a standby on 127.0.0.1:$rport (deploy/replica.sh up)"
replica up >"$tmp/replica.log" 2>&1 || { echo "fence.sh: deploy/replica.sh up failed:" >&2; cat "$tmp/replica.log" >&2; exit 1; }
for _ in $(seq 1 600); do
	n=$(psql "$standby" -Atc 'SELECT count(*) FROM links' 2>/dev/null || true)
	[ "$n" != "$links" ] || break
	sleep 0.1
done
[ "$n" = "$links" ] || { echo "fence.sh: the standby has ${n:-no} links after 60 s, not $links" >&2; exit 1; }
xmax() { psql "$primary" -Atc "$xmax_sql"; }
# bounded XID: the fence's condition with XID as its bound.
bounded() { echo "${cond/'$2'/"'$1'"}"; }

{
	echo '\set n random(1, :links)'
	echo "$lookup 'f' || :n;"
} >"$tmp/a.sql"
{
	echo '\set n random(1, :links)'
	echo "$lookup 'f' || :n ${cond/'$2'/:bound};"
} >"$tmp/b.sql"

# run WAY ROUND: one pgbench run on the standby; prints its row.
run() {
	local way=$1 round=$2 p0 p1 bound f=$tmp/run-$2-$1.txt script
	script=$(echo "$way" | tr AB ab).sql
	bound=$(xmax)
	p0=$(ticks_named postgres)
	(cd "$tmp" && pgbench -n -M prepared -r -c "$clients" -j 2 -T "$dur" -D links="$links" -D bound="$bound" -f "$script" "$standby") >"$f" 2>&1 ||
		{ echo "fence.sh: pgbench failed:" >&2; cat "$f" >&2; exit 1; }
	p1=$(ticks_named postgres)
	awk -v way="$way" -v round="$round" -v pt=$((p1 - p0)) -v hz="$hz" '
		/^number of failed transactions: / { failed = $5 }
		/^number of transactions actually processed: / { n = $6 }
		/^tps = / { tps = $3 }
		/FROM links WHERE code = / { lat = $1 }
		END {
			if (n == "" || tps == "" || lat == "") { print "fence.sh: could not read pgbench'"'"'s output" > "/dev/stderr"; exit 1 }
			printf "%s %s %.0f %.1f %.1f %d\n", round, way, tps, pt / hz * 1e6 / n, lat * 1000, failed + 0 }' "$f"
}

body() {
	local i held ahead code="f$(((links + 1) / 2))"
	held=$(psql "$standby" -v ON_ERROR_STOP=1 -Atc "$lookup '$code' $(bounded "$(xmax)")" | wc -l)
	ahead=$(psql "$standby" -v ON_ERROR_STOP=1 -Atc "$lookup '$code' $(bounded $(($(xmax) + 1000)))" | wc -l)
	echo "# check: B's lookup of $code with the primary's xmax as the bound: $held row(s) (want 1); with a bound 1,000 transactions ahead: $ahead (want 0)"
	[ "$held" = 1 ] && [ "$ahead" = 0 ] || { echo "fence.sh: the check above failed" >&2; exit 1; }
	echo "# rounds: round way per_s pg_cpu_us_each lookup_stmt_us failed"
	for i in $(seq 1 "$rounds"); do
		progress "round $i of $rounds"
		if [ $((i % 2)) -eq 1 ]; then run A "$i"; run B "$i"; else run B "$i"; run A "$i"; fi
	done | tee "$tmp/rows"
	echo "# B/A per round: round per_s pg_cpu_us_each lookup_stmt_us"
	awk '{ v[$1, $2, 3] = $3; v[$1, $2, 4] = $4; v[$1, $2, 5] = $5; r[$1] = 1 }
		END { for (i in r) printf "%s %.3f %.3f %.3f\n", i, v[i, "B", 3] / v[i, "A", 3], v[i, "B", 4] / v[i, "A", 4], v[i, "B", 5] / v[i, "A", 5] }' "$tmp/rows" |
		sort -n | medians
}
report() {
	echo "# What the replica fence costs a read on a standby: Postgres alone, $links links; A, the app's lookup; B, with the fence's condition; interleaved"
	echo "# made by:   benchmarks/fence.sh$quick -n $rounds -d $dur -c $clients -l $links (given: ${args:-none}); date $(date -u '+%Y-%m-%dT%H:%M:%SZ'); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ', dirty tree')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(psql -Atc 'SHOW server_version' "$admin" | sed 's/^/PostgreSQL /'), $(pgbench --version); shared_buffers $(psql -Atc 'SHOW shared_buffers' "$admin") on the primary, $(psql -Atc 'SHOW shared_buffers' "$standby_admin") on the standby"
	echo "# load:      $(cut -d' ' -f1-3 /proc/loadavg) (load averages over 1, 5, 15 min as the rounds started)"
	echo "# standby:   deploy/replica.sh up on 127.0.0.1:$rport (pg_basebackup of the primary; hot_standby on)"
	echo "# each run:  pgbench -n -M prepared -r -c $clients -j 2 -T $dur -D links=$links -D bound=<the primary's xmax, asked just before> -f WAY.sql, on the standby, where"
	sed 's/^/#              a.sql: /' "$tmp/a.sql"
	sed 's/^/#              b.sql: /' "$tmp/b.sql"
	echo "#            and the bound is asked of the primary as the fence asks it: $xmax_sql"
	echo "# columns:   per_s, transactions a second; pg_cpu_us_each, every postgres process's CPU (user+system, /proc, ended backends"
	echo "#            through the postmaster; primary and standby) over the transactions; lookup_stmt_us, the lookup's mean latency as"
	echo "#            pgbench -r gives it (client to server and back); failed, pgbench's failed transactions"
	body
}
if [ -n "$out" ]; then report | tee "$out"; else report; fi
