#!/usr/bin/env bash
# cachesim.sh: step 14's choice of the in-process cache's policy. For Zipf
# s = 1.0 and s = 0.8 over ten million links, a recorded stream of codes
# (benchmarks/zipf, seed 1) replayed through golang-lru and otter at equal
# measured heap (benchmarks/cachesim says how). Writes 14-cachesim-s10.txt
# and 14-cachesim-s08.txt into DIR.
#
#   benchmarks/cachesim.sh [-q] [-o DIR]
#
#   -q      quick: 200,000 codes over 1,000,000 links, budgets 1MiB,4MiB, 1 run
#   -o DIR  where the outputs go (default: a temporary directory, removed)
#
# About 6 minutes with the defaults (5,000,000 codes, budgets 8, 32 and
# 128 MiB, 3 runs), a few seconds with -q. Needs go.
set -euo pipefail
links=10000000 n=5000000 budgets=8MiB,32MiB,128MiB runs=3 gets=2000000 out=''
while getopts qo: opt; do
	case $opt in
	q) links=1000000 n=200000 budgets=1MiB,4MiB runs=1 gets=200000 ;;
	o) out=$OPTARG ;;
	*) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cachesim.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
go build -o "$tmp/zipf" ./benchmarks/zipf
(cd benchmarks/cachesim && go build -o "$tmp/cachesim" .) # a module of its own (step 24)
for s in 1.0 0.8; do
	name=$(echo "$s" | tr -d .)
	"$tmp/zipf" -links "$links" -s "$s" -n "$n" -seed 1 >"$tmp/stream"
	{
		echo "# made by:   benchmarks/cachesim.sh${keep:+ -o DIR}: the stream by benchmarks/zipf -links $links -s $s -n $n -seed 1 (Zipf s = $s over $links links)"
		"$tmp/cachesim" -stream "$tmp/stream" -budgets "$budgets" -runs "$runs" -gets "$gets"
	} >"$out/14-cachesim-s$name.txt"
	grep -v '^#' "$out/14-cachesim-s$name.txt" | sed "s/^/s=$s /"
done
if [ "$keep" ]; then echo "Outputs in $out"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
