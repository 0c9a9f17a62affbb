#!/usr/bin/env bash
# abandoned.sh: step 39's reproduction. What a statement the app gives up
# on leaves behind in Postgres. One app (its own database, empty, and its
# own Redis, as a deployment of several instances runs) sweeps its Bloom
# filter every second (BLOOM_SWEEP=1s) while another session holds an
# ACCESS EXCLUSIVE lock on links for SECONDS: each sweep waits for the
# lock, sends nothing, and until step 39 was dropped at the app's reply
# deadline (DB_TIMEOUT or the click writes' 5 s, plus 1 s: 6 s with the
# defaults), the app trying again at the next tick on a new connection;
# from step 40 it waits on a pool of its own until its own deadline (a
# minute), and is cancelled there. About every second
# (t_s: seconds since the lock was asked for) the script counts the
# database's backends (the lock's own session and the counting one left
# out), how many of them wait for the lock, and the age of the oldest
# statement running.
#
#   benchmarks/abandoned.sh [-o FILE] [-d SECONDS] [-A 'VAR=VALUE ...'] [-B 'VAR=VALUE ...'] A B
#
#   A, B      two commits (anything git rev-parse takes), each built in a
#             worktree of its own; the same commit twice with -A or -B
#   -A, -B    more environment for A's or B's app (-A DB_CLIENT_CHECK=0)
#   -d SECS   how long the lock is held (default 60); the count goes on
#             15 s after it is released
#   -o FILE   where the output goes (default: standard output)
#
# A runs, then B: one after the other, not interleaved (what is counted
# is backends, not a rate: the machine's load moves it little). No
# requests are sent. At the end of each side, its sweeps that failed and
# succeeded (shortener_bloom_sweeps_total, from its /metrics) and its
# log's "sweep failed" lines (sampled: one a minute at most).
# Step 39's outputs: benchmarks/abandoned.sh -o benchmarks/39-abandoned.txt
# ':/^Step 38:' HEAD, and -o benchmarks/39-abandoned-check-off.txt -A
# DB_CLIENT_CHECK=0 HEAD HEAD (HEAD: a draft of step 39, its code id in
# each side's line). Step 40's: -d 30 -o benchmarks/40-sweep-waits.txt
# ':/^Step 39:' HEAD, and -d 90 -o benchmarks/40-sweep-minute.txt
# ':/^Step 39:' HEAD (HEAD: a draft of step 40). Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# git, psql, redis-server, redis-cli and curl. About 3 minutes after the
# builds.
set -euo pipefail

held=60 out='' env_a='' env_b=''
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts o:d:A:B: opt; do
	case $opt in
	o) out=$OPTARG ;; d) held=${OPTARG%s} ;; A) env_a=$OPTARG ;; B) env_b=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
case $held in '' | *[!0-9]* | 0*) echo "abandoned.sh: -d takes whole seconds above 0, not '$held'" >&2; exit 2 ;; esac
read -r -a words_a <<<"$env_a"
read -r -a words_b <<<"$env_b"
for e in ${words_a[@]+"${words_a[@]}"} ${words_b[@]+"${words_b[@]}"}; do case $e in [A-Z_]*=*) ;; *) echo "abandoned.sh: -A/-B take VAR=VALUE words, not '$e'" >&2; exit 2 ;; esac; done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
[ -z "$out" ] || : >"$out" || { echo "abandoned.sh: cannot write $out" >&2; exit 2; }
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
for tool in go git psql redis-server redis-cli curl; do
	command -v "$tool" >/dev/null || { echo "abandoned.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
. benchmarks/lib.sh # step_tree, start_redis, freeport, wait_healthy, machine_line
commit() {
	local h
	h=$(git rev-parse --verify -q "$1") && [ "$(git cat-file -t "$h")" = commit ] && echo "$h" ||
		{ echo "abandoned.sh: no commit $1" >&2; exit 2; }
}
hash_a=$(commit "$1")
hash_b=$(commit "$2")
[ "$hash_a $env_a" != "$hash_b $env_b" ] || { echo "abandoned.sh: A and B are the same commit with the same environment" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/abandoned.XXXXXX")
app_pid='' lock_pid='' redis_ports='' trees='' dbs=''
nq=${admin%%\?*}
cleanup() {
	for p in $lock_pid $app_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	for p in $redis_ports; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	for d in $dbs; do psql "$admin" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	for t in $trees; do git worktree remove --force "$t" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

emit() { if [ -n "$out" ]; then printf '%s\n' "$*" >>"$out"; else printf '%s\n' "$*"; fi; }

# run SIDE HASH ENV: build, start, hold the lock, count; prints the side's
# rows and the end of its log's sweep lines.
run() {
	local side=$1 hash=$2 extra=$3 tree db dburl port mport t t0 row n w oldest max=0
	tree="$tmp/tree-$side"
	trees="$trees $tree"
	step_tree "$hash" "$tree" "$tmp/app-$side"
	db="abandoned_${side}_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
	dbs="$dbs $db"
	psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
	dburl="${nq%/*}/$db${admin#"$nq"}"
	mkdir -p "$tmp/redis-$side"
	start_redis "$tmp/redis-$side" 64mb
	redis_ports="$redis_ports $redis_port"
	port=$(freeport) mport=$(freeport)
	local -a words=()
	read -r -a words <<<"$extra"
	env DATABASE_URL="$dburl" REDIS_URL="redis://127.0.0.1:$redis_port/0" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" BLOOM_SWEEP=1s \
		${words[@]+"${words[@]}"} "$tmp/app-$side" 2>"$tmp/$side.log" &
	app_pid=$!
	wait_healthy "http://127.0.0.1:$port" "$tmp/$side.log"
	# The filter is built and trusted before the lock: the sweeps run from then.
	for _ in $(seq 1 300); do grep -q 'bloom filter trusted' "$tmp/$side.log" && break; sleep 0.2; done
	grep -q 'bloom filter trusted' "$tmp/$side.log" || { echo "abandoned.sh: $side's filter was not trusted within 60 s; its log:" >&2; cat "$tmp/$side.log" >&2; exit 1; }
	emit ""
	emit "== $side: commit $(git rev-parse --short=12 "$hash") ($(git log -1 --format=%s "$hash")), code id $(sh benchmarks/codeid.sh "$tree")${extra:+, with $extra}"
	emit "its start line: $(grep -m1 'store selected' "$tmp/$side.log" || echo '(none)')"
	emit "t_s backends waiting_for_lock oldest_query_s"
	PGAPPNAME=abandoned-lock psql "$dburl" -qc "BEGIN; LOCK TABLE links IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep($held); COMMIT;" >"$tmp/$side-lock.log" 2>&1 &
	lock_pid=$!
	t0=$(date +%s%N) t=0
	while [ "$t" -lt $((held + 15)) ]; do
		sleep 1
		t=$((($(date +%s%N) - t0) / 1000000000)) # seconds since the lock was asked for
		# A count that fails (Postgres refusing connections, say) is a
		# row of its own, not the end of the run.
		if ! row=$(PGAPPNAME=abandoned-count psql "$admin" -Atq -F' ' -v db="$db" 2>&1 <<'SQL'
SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock'),
       coalesce(round(max(extract(epoch FROM now() - query_start)) FILTER (WHERE state = 'active')), 0)
FROM pg_stat_activity
WHERE datname = :'db' AND application_name NOT IN ('abandoned-lock', 'abandoned-count')
SQL
		); then
			emit "$t count failed: $(printf '%s' "$row" | tr '\n' ' ')"
			continue
		fi
		read -r n w oldest <<<"$row"
		[ "$n" -le "$max" ] || max=$n
		emit "$t $n $w $oldest"
	done
	wait "$lock_pid" || { echo "abandoned.sh: the lock's session failed:" >&2; cat "$tmp/$side-lock.log" >&2; exit 1; }
	lock_pid=''
	emit "most backends at once: $max"
	emit "its sweeps: $(curl -fs "http://127.0.0.1:$mport/metrics" | awk '/^shortener_bloom_sweeps_total/ { sub(/.*result="/, "", $1); sub(/".*/, "", $1); printf "%s %s  ", $1, $2 }' || echo '(metrics did not answer)')"
	emit "its log's \"sweep failed\" lines: $(grep -c 'sweep failed' "$tmp/$side.log" || true) (the first 3 and the last:)"
	{ grep 'sweep failed' "$tmp/$side.log" || true; } | awk '{ l = $0 } NR <= 3 { print } END { if (NR > 3) print l }' | while IFS= read -r l; do emit "  $l"; done
	kill "$app_pid" 2>/dev/null || true # (it may have exited: its log is above)
	wait "$app_pid" || true             # its exit status on SIGTERM
	app_pid=''
}

emit "# abandoned.sh -d $held${env_a:+ -A '$env_a'}${env_b:+ -B '$env_b'} $(printf '%q ' "$1" "$2")($(date -u +%Y-%m-%dT%H:%M:%SZ))"
emit "# $(machine_line)"
emit "# Postgres: $(psql "$admin" -Atc 'SHOW server_version'), max_connections $(psql "$admin" -Atc 'SHOW max_connections'); A then B, one after the other, no requests"
run a "$hash_a" "$env_a"
run b "$hash_b" "$env_b"
