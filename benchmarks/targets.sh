#!/bin/sh
# targets.sh: write vegeta targets for the redirect of seeded links, drawn
# with a Zipf law, so that a load test sees a few hot links and a long tail,
# as a real shortener does, instead of one link over and over.
#
#   benchmarks/targets.sh [options] BASE > targets.txt
#
#   BASE          the service, e.g. http://127.0.0.1:8080
#   -n DISTINCT   draw from seeded links 1..DISTINCT (default 100000); the
#                 database must hold at least that many (sql/seed.sql)
#   -s EXPONENT   Zipf exponent s: popularity rank r has probability
#                 proportional to 1/r^s (default 1.0; 0 = uniform)
#   -k COUNT      how many targets to write (default 100000); vegeta cycles
#                 through them in order
#   -x SEED       random seed (default 1): the same options give the same file
#
# Ranks are given to links by a random permutation, so the hottest links
# are spread over the table rather than being links 1, 2, 3. The file starts
# with comment lines (vegeta skips them) saying how it was made, how many
# distinct codes it holds and what share of it the top 1% of links get.
# Link n's code is sql/seed.sql's: n * 1000000007 mod 62^7, in base62.
# POSIX sh and awk. The random numbers come from a generator written here
# (Park-Miller), not awk's rand(), whose sequence differs between awks.
set -eu

n=100000 s=1.0 k=100000 seed=1
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts n:s:k:x:h opt; do
	case $opt in
	n) n=$OPTARG ;; s) s=$OPTARG ;; k) k=$OPTARG ;; x) seed=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
base=${1%/}

isint() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }
isint "$n" && [ "$n" -ge 1 ] || { echo "targets: -n must be a whole number >= 1, not '$n'" >&2; exit 2; }
isint "$k" && [ "$k" -ge 1 ] || { echo "targets: -k must be a whole number >= 1, not '$k'" >&2; exit 2; }
isint "$seed" || { echo "targets: -x must be a whole number, not '$seed'" >&2; exit 2; }
case $s in '' | *[!0-9.]* | *.*.* | .) echo "targets: -s must be a number >= 0, not '$s'" >&2; exit 2 ;; esac
case $base in http://* | https://*) ;; *) echo "targets: BASE must start with http:// or https://, not '$base'" >&2; exit 2 ;; esac

awk -v n="$n" -v s="$s" -v k="$k" -v seed="$seed" -v base="$base" \
	-v cmd="benchmarks/targets.sh -n $n -s $s -k $k -x $seed $base" '
# Park-Miller "minimal standard" generator: state * 48271 stays below 2^53,
# so every awk computes it exactly in its doubles.
function next01() { state = (state * 48271) % 2147483647; return state / 2147483647 }
# mulmod: a * b mod m, exactly. Numbers in awk are doubles, exact up to
# 2^53; a * 1000000007 passes that for a over 9,007,199, so b is taken
# 11 bits at a time and every partial result stays under 2^53.
function mulmod(a, b, m,   r, i) {
	r = 0
	for (i = 2; i >= 0; i--) r = (r * 2048 + a * (int(b / 2 ^ (11 * i)) % 2048)) % m
	return r
}
function code(i,   v, c, d) { # sql/seed.sql: i * 1000000007 mod 62^7 in base62
	v = mulmod(i, 1000000007, 3521614606208)
	c = ""
	for (d = 0; d < 7; d++) { c = substr(alpha, v % 62 + 1, 1) c; v = int(v / 62) }
	return c
}
BEGIN {
	alpha = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	state = seed % 2147483646 + 1
	for (i = 0; i < 10; i++) next01()
	# cumulative weights of ranks 1..n
	for (r = 1; r <= n; r++) { h += (s == 1 ? 1 / r : r ^ -s); cdf[r] = h }
	# rank -> link: a Fisher-Yates shuffle of 1..n
	for (i = 1; i <= n; i++) link[i] = i
	for (i = n; i > 1; i--) {
		j = int(next01() * i) + 1; if (j > i) j = i
		t = link[i]; link[i] = link[j]; link[j] = t
	}
	top = int((n + 99) / 100) # the top 1% of ranks, at least one
	for (q = 1; q <= k; q++) {
		u = next01() * h
		lo = 1; hi = n # smallest rank whose cumulative weight reaches u
		while (lo < hi) { mid = int((lo + hi) / 2); if (cdf[mid] < u) lo = mid + 1; else hi = mid }
		pick[q] = lo
		if (!(lo in seen)) { seen[lo] = 1; distinct++ }
		if (lo <= top) hot++
		if (lo == 1) first++
	}
	printf "# made by: %s\n", cmd
	printf "# %d targets, %d distinct codes of %d links; the top 1%% of links (%d) get %.1f%% of targets (Zipf law: %.1f%%), the top link (n=%d) %.2f%% (%.2f%%)\n",
		k, distinct, n, top, 100 * hot / k, 100 * cdf[top] / h, link[1], 100 * first / k, 100 * cdf[1] / h
	for (q = 1; q <= k; q++) printf "GET %s/%s\n", base, code(link[pick[q]])
}'
