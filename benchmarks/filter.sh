#!/usr/bin/env bash
# filter.sh: step 15's Bloom filter on its own, in one process (no load
# test): the false-positive rate measured against the one the filter was
# sized for (TestBloomFalsePositiveRate), how long adding N codes takes and
# how many bytes the filter is (BenchmarkBloomBuild: the build without
# reading Postgres), and the CPU of an unknown code's "no" in a filter of
# that size, half full (BenchmarkBloomLookupNo).
#
#   benchmarks/filter.sh [-q] [-o FILE]
#
#   -q       quick: a million codes, one run each
#   -o FILE  where to write (default: stdout)
#
# Needs go. About a minute; -q a few seconds.
set -euo pipefail
codes=10000000 count=3 out=''
while getopts qo: opt; do
	case $opt in
	q) codes=1000000 count=1 ;;
	o) out=$OPTARG ;;
	*) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
cd "$(git rev-parse --show-toplevel)"
run() {
	echo "# step 15's Bloom filter in one process: false-positive rate, build time and size, the cost of a \"no\""
	echo "# made by:   benchmarks/filter.sh $*; code id $(sh benchmarks/codeid.sh), commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/15-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(uname -sr); $(go version | awk '{print $3}')"
	echo "# commands:  go test -count=1 -v -run '^TestBloomFalsePositiveRate\$' .   (no database needed)"
	echo "#            BLOOM_BENCH_CODES=$codes go test -run '^\$' -bench 'BloomBuild|BloomLookupNo' -benchtime 3x|1s -count $count ."
	echo
	go test -count=1 -v -run '^TestBloomFalsePositiveRate$' . 2>&1 | grep -E 'false-positive|^(ok|FAIL|---)'
	echo
	BLOOM_BENCH_CODES=$codes go test -run '^$' -bench 'BloomBuild' -benchtime 3x -count "$count" . 2>&1 | grep -E '^(Benchmark|ok|FAIL|goos|goarch|cpu)'
	BLOOM_BENCH_CODES=$codes go test -run '^$' -bench 'BloomLookupNo' -benchtime 1s -count "$count" . 2>&1 | grep -E '^(Benchmark|ok|FAIL)'
}
if [ -n "$out" ]; then run "$@" >"$out"; echo "Output in $out"; else run "$@"; fi
