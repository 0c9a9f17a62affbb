#!/usr/bin/env bash
# hostspair.sh: one part of the three hosts' experiment (benchmarks/hosts.sh
# -q -p PART), run from two trees in turn, in one sitting: A B B A A B ...
# (each arm first as often as the other), each run's outputs kept under
# OUT/NN-ARM/. Then one line per run: the redirects that failed, and each
# app's waits for a request-pool connection over the load (from the
# output's counters, since step 42).
#
#   benchmarks/hostspair.sh TREE_A TREE_B PART ROUNDS OUT
#
# TREE_A and TREE_B are clones of this repository (each carries its own
# hosts.sh; both must have step 42's, which writes the counters). Run as
# root, nothing else on the hosts' network (deploy/hosts.sh). Each run
# brings the hosts up and down: about 4 minutes. ROUNDS 0 runs nothing
# and prints the lines for the runs already in OUT (a sitting stopped
# early).
set -euo pipefail
[ $# -eq 5 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
a=$1 b=$2 part=$3 rounds=$4 out=$5
mkdir -p "$out"
order=()
for ((i = 0; i < rounds; i++)); do
	if ((i % 2 == 0)); then order+=(A B); else order+=(B A); fi
done
n=0
for arm in "${order[@]}"; do
	n=$((n + 1))
	tree=$a
	[ "$arm" = A ] || tree=$b
	d="$out/$(printf '%02d' "$n")-$arm"
	echo "run $n: arm $arm ($tree), part $part, $(date -u '+%H:%M:%S')"
	(cd "$tree" && benchmarks/hosts.sh -q -p "$part" -o "$d") >"$d.log" 2>&1 || { tail -n 20 "$d.log"; echo "hostspair.sh: run $n failed" >&2; exit 1; }
done
echo
echo "# run arm  redirects_failed  request_pool_waits_per_app  (from each run's 20-fail-$part.txt)"
for d in "$out"/[0-9]*-[AB]; do
	f="$d/20-fail-$part.txt"
	failed=$(sed -n '/^## redirects/,/^## creates/p' "$f" | sed -n 's/^total: .* \([0-9]*\) failed$/\1/p')
	waits=$(awk '$2 ~ /^go_sql_wait_count_total\{db_name="shortener"\}/ { printf "%s%s:%s", sep, $1, $3; sep = " " }' "$f")
	echo "${d##*/} $failed ${waits:-none}"
done
