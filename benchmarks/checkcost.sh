#!/usr/bin/env bash
# checkcost.sh: step 39's cost of DB_CLIENT_CHECK where it acts, in
# Postgres: pgbench's select-only (-S -M prepared -c 8 -j 2, a database of
# its own at scale 10, made for the sitting and dropped after) with
# client_connection_check_interval unset (A, Postgres's default 0) and set
# to 1000 ms (B, the app's default), in interleaved rounds, even rounds B
# first. Per run: queries a second and every postgres process's CPU
# (user+system, /proc) per query; then per round B over A, and the
# medians and ranges.
#
#   benchmarks/checkcost.sh [-o FILE] [-n ROUNDS] [-d SECONDS]
#
#   -n, -d    rounds (default 7) and seconds per run (default 10)
#   -o FILE   where the output goes (default: standard output)
#
# The setting goes in each connection's startup packet (PGOPTIONS), as the
# app's SET does after connecting. Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs psql
# and pgbench (14 or later: one "tps =" line). About 2.5 minutes with the
# defaults. The CPU is every process named postgres on the machine: run
# nothing else on Postgres meanwhile. Step 39's output:
# benchmarks/checkcost.sh -o benchmarks/39-checkcost.txt.
set -euo pipefail

rounds=7 dur=10 out=''
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts o:n:d: opt; do
	case $opt in
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage
for v in "$rounds" "$dur"; do case $v in '' | *[!0-9]* | 0*) echo "checkcost.sh: -n and -d take a whole number above 0, not '$v'" >&2; exit 2 ;; esac; done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
[ -z "$out" ] || : >"$out" || { echo "checkcost.sh: cannot write $out" >&2; exit 2; }
for tool in psql pgbench; do
	command -v "$tool" >/dev/null || { echo "checkcost.sh: $tool not found (Debian/Ubuntu: sudo apt-get install postgresql-client postgresql-contrib)" >&2; exit 1; }
done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
. benchmarks/lib.sh # ticks_named, machine_line, medians
[ "$(ticks_named postgres)" -gt 0 ] || { echo "checkcost.sh: no process named postgres in /proc: Postgres's CPU cannot be measured here" >&2; exit 1; }
hz=$(getconf CLK_TCK)
nq=${admin%%\?*}
db="checkcost_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/checkcost.XXXXXX")
cleanup() {
	psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
emit() { if [ -n "$out" ]; then printf '%s\n' "$*" >>"$out"; else printf '%s\n' "$*"; fi; }

psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
dburl="${nq%/*}/$db${admin#"$nq"}"
pgbench -i -q -s 10 "$dburl" >"$tmp/init" 2>&1 || { cat "$tmp/init" >&2; exit 1; }
psql "$dburl" -qc 'VACUUM ANALYZE' >/dev/null

# one ARM: a run; prints "tps cpu_us_per_query", and checks in a session
# opened the same way that the setting is what the arm says.
one() {
	local opt want got t0 t1 tps
	case $1 in a) opt='' want=0 ;; b) opt='-c client_connection_check_interval=1000' want=1s ;; esac
	got=$(PGOPTIONS="$opt" psql "$dburl" -Atc 'SHOW client_connection_check_interval')
	[ "$got" = "$want" ] || { echo "checkcost.sh: arm $1 has client_connection_check_interval=$got, want $want" >&2; exit 1; }
	t0=$(ticks_named postgres)
	PGOPTIONS="$opt" pgbench -S -M prepared -c 8 -j 2 -T "$dur" -n "$dburl" >"$tmp/run" 2>&1 || { cat "$tmp/run" >&2; exit 1; }
	t1=$(ticks_named postgres)
	tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$tmp/run")
	[ -n "$tps" ] || { cat "$tmp/run" >&2; exit 1; }
	awk -v tps="$tps" -v d=$((t1 - t0)) -v hz="$hz" -v s="$dur" 'BEGIN { printf "%.0f %.1f\n", tps, d / hz * 1e6 / (tps * s) }'
}

emit "# checkcost.sh -n $rounds -d $dur ($(date -u +%Y-%m-%dT%H:%M:%SZ)); one sitting of interleaved rounds"
emit "# $(machine_line)"
emit "# Postgres $(psql "$admin" -Atc 'SHOW server_version'); pgbench -S -M prepared -c 8 -j 2 -T $dur, scale 10; A: client_connection_check_interval unset (0), B: 1000 ms (PGOPTIONS)"
emit "# round qpsA cpuA_us qpsB cpuB_us B/A_qps B/A_cpu"
rows=''
for r in $(seq 1 "$rounds"); do
	if [ $((r % 2)) -eq 0 ]; then
		read -r qb cb < <(one b)
		read -r qa ca < <(one a)
	else
		read -r qa ca < <(one a)
		read -r qb cb < <(one b)
	fi
	row=$(awk -v r="$r" -v qa="$qa" -v ca="$ca" -v qb="$qb" -v cb="$cb" 'BEGIN { printf "%d %d %.1f %d %.1f %.3f %.3f", r, qa, ca, qb, cb, qb / qa, cb / ca }')
	emit "$row"
	rows="$rows$row"$'\n'
done
emit "# medians (min-max) of the per-round ratios:"
emit "B/A queries a second: $(printf '%s' "$rows" | awk '{print $6}' | sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.3f (%.3f-%.3f)", m, v[1], v[NR]}')"
emit "B/A Postgres CPU per query: $(printf '%s' "$rows" | awk '{print $7}' | sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.3f (%.3f-%.3f)", m, v[1], v[NR]}')"
