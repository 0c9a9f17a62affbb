#!/usr/bin/env bash
# coldbuilds.sh: what four of CI's jobs pay to build when they start
# together on an empty Go build cache, against the same four after one
# process has built HEAD's packages alone (docs/32).
#
#   benchmarks/coldbuilds.sh [-r ROUNDS] [STEP...]      default: 1 round, steps 28 29 30 31
#
# Each job does what .ci/job does before a step's suite runs: gofmt -l,
# go vet ./... (and in benchmarks/drivers if the step has it; CI vets
# benchmarks/cachesim too), then builds and links its -race test binaries
# without running them (go test -race -run '^$' -exec true ./...), in a
# worktree of its own. Two arms, in turn, each on an empty GOCACHE in a
# folder this run makes (the module cache is the machine's: run once
# first, so that the first arm does not download):
#   together   the jobs at once;
#   warmfirst  first HEAD's go vet and test build, in the repository
#              itself, alone (as .ci/run's section "Go's caches" does);
#              then the jobs at once.
# Prints, per arm, each job's wall time, the arm's wall time, and the busy
# and idle CPU time of the whole machine meanwhile (from /proc/stat, in
# seconds of one core). Run nothing else meanwhile. Takes about 20 minutes
# a round on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
rounds=1
while getopts r: opt; do
	case $opt in r) rounds=$OPTARG ;; *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
case $rounds in '' | *[!0-9]* | 0) echo "coldbuilds.sh: -r takes a whole number above 0" >&2; exit 2 ;; esac
[ $# -gt 0 ] || set -- 28 29 30 31
export PATH="$PATH:/usr/local/go/bin"
tmp=$(mktemp -d)
trap 'for t in "$tmp"/wt*; do [ ! -d "$t" ] || git -C "$repo" worktree remove --force "$t" >/dev/null 2>&1 || true; done; rm -rf "$tmp"' EXIT
for nn in "$@"; do
	git -C "$repo" worktree add -q --detach "$tmp/wt$nn" ":/^Step $nn:" || { echo "coldbuilds.sh: no step $nn" >&2; exit 1; }
done

cpu() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
job() { # the work of one of CI's step jobs before its suite (called in an && list: set -e is off here)
	cd "$tmp/wt$1" || return 1
	[ -z "$(gofmt -l .)" ] || { echo "coldbuilds.sh: step $1: gofmt would change files" >&2; return 1; }
	go vet ./... || return 1
	if [ -f benchmarks/drivers/go.mod ]; then (cd benchmarks/drivers && go vet ./...) || return 1; fi
	go test -race -count=1 -run '^$' -exec true ./... >/dev/null
}
arm() {
	local name=$1 b0 i0 b1 i1 t0 s nn
	shift
	export GOCACHE="$tmp/cache"
	rm -rf "$GOCACHE" && mkdir -p "$GOCACHE"
	read -r b0 i0 < <(cpu)
	t0=$(now)
	if [ "$name" = warmfirst ]; then
		(cd "$repo" && go vet ./... && go test -race -count=1 -run '^$' -exec true ./... >/dev/null)
		echo "  HEAD alone first: $(since "$t0") s"
	fi
	local pids=() p
	for nn in "$@"; do
		(s=$(now) && job "$nn" && echo "  job $nn: $(since "$s") s") &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || { echo "coldbuilds.sh: a job failed" >&2; exit 1; }; done
	read -r b1 i1 < <(cpu)
	echo "arm $name: wall $(since "$t0") s; busy CPU $(((b1 - b0) / 100)) s; idle $(((i1 - i0) / 100)) s"
}
echo "# coldbuilds.sh $*: $(go version), $(nproc) cores, $(git -C "$repo" rev-parse --short HEAD), $(date -u +%FT%TZ)"
for r in $(seq 1 "$rounds"); do
	echo "round $r"
	arm together "$@"
	arm warmfirst "$@"
done
