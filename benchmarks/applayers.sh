#!/usr/bin/env bash
# applayers.sh: step 21's in-process measure. What the app's own code
# (observe to the handler, no network, no syscalls) costs a /healthz and a
# cached redirect, in time and allocations: BenchmarkAppLayers
# (allocs_test.go) at an earlier step and at this tree, in alternating
# rounds (the earlier step first in each). The earlier step is built from
# its commit with this tree's allocs_test.go dropped in (the benchmark did
# not exist before step 21) and the test helpers (testdb_test.go) of its
# own commit, or of step 21's for a step before 21: the helpers call the
# constructors of their own step (step 24 changed one). A step before 20
# may lack what those files use and not build.
#
#   benchmarks/applayers.sh [-s STEP] [-n ROUNDS] [-o FILE]
#
#   -s STEP    the earlier step (default 20)
#   -n ROUNDS  rounds, each one -count=1 run of each (default 5)
#   -o FILE    where to write (default: stdout)
#
# Takes about 10 s a round. Needs go, git and TEST_DATABASE_URL (the
# benchmark's link is in Postgres, behind the local cache).
set -euo pipefail

step=20 rounds=5 out=''
while getopts s:n:o: opt; do
	case $opt in
	s) step=$OPTARG ;; n) rounds=$OPTARG ;; o) out=$OPTARG ;;
	*) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
[ -n "${TEST_DATABASE_URL:-}" ] || { echo "applayers.sh: TEST_DATABASE_URL is not set (see README, Tests)" >&2; exit 1; }
. "$(dirname "$0")/lib.sh" # medians
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
repo=$(git rev-parse --show-toplevel)
cd "$repo"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/applayers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

then=$(git rev-parse --short=12 ":/^Step $step:")
mkdir "$tmp/src"
git archive "$then" | tar -x -C "$tmp/src"
cp allocs_test.go "$tmp/src/"
helpers=$then
git cat-file -e "$then:allocs_test.go" 2>/dev/null || helpers=$(git rev-parse --short=12 ':/^Step 21:')
git show "$helpers:testdb_test.go" >"$tmp/src/testdb_test.go"
(cd "$tmp/src" && go test -c -o "$tmp/then.test" .)
go test -c -o "$tmp/now.test" .
for i in $(seq 1 "$rounds"); do
	progress "round $i of $rounds"
	for w in then now; do
		# Both run from the repository's root; -test.run '^$' runs no
		# test, only the benchmark.
		echo "===== round $i, $w"
		"$tmp/$w.test" -test.run '^$' -test.bench AppLayers -test.benchmem -test.count 1 2>&1
	done
done >"$tmp/raw"
{
	echo "# the app's own layers in process: BenchmarkAppLayers (allocs_test.go), step $step against this tree"
	echo "# made by:   benchmarks/applayers.sh -s $step -n $rounds; $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# then:      step $step, commit $then ($(git log -1 --format=%s "$then")), with this tree's allocs_test.go and commit $helpers's testdb_test.go"
	echo "# now:       this tree: commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree)'), code id $(sh benchmarks/codeid.sh)"
	echo "# machine:   $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), $(nproc) cores; $(go version | cut -d' ' -f3)"
	echo "# how:       go test -c of each; in each round then, now; each run one benchmark of each path (-test.benchtime 1s), one goroutine serving,"
	echo "#            the handler chain a deployed instance has (Postgres behind the local cache, metrics on, clicks queued, counted and written"
	echo "#            in 1,000s by the queue's worker on another goroutine; no stats of step 17)"
	echo "#"
	echo "# ns per request, per round (then now, for healthz, then the redirect)"
	echo "# round healthz_then healthz_now redirect_then redirect_now"
	awk '/^===== round/ {r = $3; sub(",", "", r); w = $4}
		/^BenchmarkAppLayers\/healthz/ {v[r, w, "h"] = $3}
		/^BenchmarkAppLayers\/allocs1/ {v[r, w, "r"] = $3}
		END {for (i = 1; i <= r; i++) printf "%d %s %s %s %s\n", i, v[i, "then", "h"], v[i, "now", "h"], v[i, "then", "r"], v[i, "now", "r"]}' "$tmp/raw" |
		medians | sed 's/^/# /'
	echo
	cat "$tmp/raw"
} >"${out:-/dev/stdout}"
