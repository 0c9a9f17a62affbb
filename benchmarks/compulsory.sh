#!/usr/bin/env bash
# compulsory.sh: the share of a Zipf stream's lookups that ask for a link not
# asked for before in the stream: misses that no cache of any size avoids
# (compulsory misses), so 100% minus it is the best hit ratio a cache that
# starts empty can reach. The streams are benchmarks/cachesim.sh's (seed 1,
# 5,000,000 codes over 10,000,000 links); the first 1,000,000 lookups are
# its warm-up (20%), not counted. Prints to stdout; step 14 saved it as
# benchmarks/14-compulsory.txt.
#
#   benchmarks/compulsory.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/compulsory.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/zipf" ./benchmarks/zipf
echo "# compulsory misses: made by benchmarks/compulsory.sh, commit $(git rev-parse --short=12 HEAD), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
for s in 1.0 0.8; do
	echo "# stream: benchmarks/zipf -links 10000000 -s $s -n 5000000 -seed 1"
	"$tmp/zipf" -links 10000000 -s "$s" -n 5000000 -seed 1 | awk -v s="$s" -v w=1000000 '
		!($1 in seen) { seen[$1] = 1; if (NR > w) n++ }
		END { printf "s=%s: %d lookups, %d distinct codes; after the first %d, %d lookups (%.2f%%) ask for a code not asked before\n", s, NR, length(seen), w, n, n / (NR - w) * 100 }'
done
