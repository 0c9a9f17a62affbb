#!/usr/bin/env bash
# decodecost.sh: what reading a create's body costs, step 26's decodeJSON
# against this step's (which reads the body whole and checks its keys,
# checkJSONKeys), in-process, in interleaved rounds. Each side is a test
# binary built from its own tree (step 26's commit, found by its subject,
# with this step's BenchmarkDecodeCreate copied in; and HEAD), run in
# turn ROUNDS times: -test.bench '^BenchmarkDecodeCreate$' -test.benchtime
# N x, one CPU. Prints each round's ns/op and allocs/op, and the median of
# the per-round differences with their range.
#
#   benchmarks/decodecost.sh [-n ROUNDS] [-x ITERATIONS] [-o FILE]
#
# Needs only Go. About a minute.
set -euo pipefail
rounds=11 iters=200000 out=''
while getopts n:x:o: opt; do
	case $opt in n) rounds=$OPTARG ;; x) iters=$OPTARG ;; o) out=$OPTARG ;; *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
for v in "$rounds" "$iters"; do
	case $v in '' | *[!0-9]* | 0*) echo "decodecost.sh: -n and -x take whole numbers above 0" >&2; exit 2 ;; esac
done
repo=$(git rev-parse --show-toplevel)
. "$repo/benchmarks/lib.sh" # machine_line
old=$(git -C "$repo" rev-parse ':/^Step 26:')
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/old" >/dev/null 2>&1 || true; git -C "$repo" worktree remove --force "$work/new" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/old" "$old" >/dev/null
git -C "$repo" worktree add --detach "$work/new" HEAD >/dev/null
# The benchmark, as this step has it, into step 26's tree.
awk '/^\/\/ BenchmarkDecodeCreate /,/^}$/' "$work/new/links_test.go" >"$work/bench.go"
[ -s "$work/bench.go" ] || { echo "decodecost.sh: BenchmarkDecodeCreate not found in HEAD's links_test.go" >&2; exit 1; }
{ printf 'package main\n\nimport (\n\t"net/http/httptest"\n\t"strings"\n\t"testing"\n)\n\n'; cat "$work/bench.go"; } >"$work/old/decodecost_test.go"
for side in old new; do
	(cd "$work/$side" && go test -c -o "$work/$side.test" .) || { echo "decodecost.sh: build of $side failed" >&2; exit 1; }
done
run() { # SIDE: ns/op and allocs/op of one run
	(cd "$work/$1" && "$work/$1.test" -test.run '^$' -test.bench '^BenchmarkDecodeCreate$' -test.benchtime "${iters}x" -test.cpu 1 -test.benchmem) |
		awk '/^BenchmarkDecodeCreate/ { for (i = 1; i <= NF; i++) { if ($(i) == "ns/op") ns = $(i-1); if ($(i) == "allocs/op") al = $(i-1) } } END { if (ns == "") exit 1; print ns, al }'
}
{
	echo "# reading a create's body: step 26's decodeJSON against step 27's (body read whole, keys checked), in-process"
	echo "# made by:   benchmarks/decodecost.sh -n $rounds -x $iters; step 26 = ${old:0:12}, HEAD = $(git -C "$repo" rev-parse --short=12 HEAD)$(git -C "$repo" diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree: HEAD as committed was measured)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | cut -d' ' -f3-)"
	echo "# body:      {\"url\":\"https://example.com/some/path?q=1\",\"max_clicks\":10} (BenchmarkDecodeCreate, links_test.go)"
	echo "# rounds:    interleaved, step 26 then step 27 in each; one sitting"
	echo "#"
	echo "round  step26_ns  step27_ns  diff_ns  step26_allocs  step27_allocs"
	diffs=()
	for r in $(seq 1 "$rounds"); do
		read -r ons oal < <(run old)
		read -r nns nal < <(run new)
		d=$(awk -v a="$nns" -v b="$ons" 'BEGIN { printf "%.1f", a - b }')
		diffs+=("$d")
		printf '%5d  %9s  %9s  %7s  %13s  %13s\n' "$r" "$ons" "$nns" "$d" "$oal" "$nal"
	done
	printf '%s\n' "${diffs[@]}" | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "# step 27 minus step 26, ns per body: median %.1f, rounds %.1f to %.1f (%d rounds)\n", m, v[1], v[NR], NR }'
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
