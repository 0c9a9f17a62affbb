#!/usr/bin/env bash
# slowhistory.sh: the history checker (TestHistoryUnderFaults) with Redis
# slowed for a span, in interleaved rounds: this commit's retries against
# step 28's (a change's retry and the feed's republish waited
# REDIS_TIMEOUT, and the change's asked the breaker), put back in a copy
# of the tree with the substitutions benchmarks/unfix.sh calls slowretry
# and feedrepublish. Each run prints the least bound its history meets: how
# late the latest read on another instance was to see a change.
#
#   benchmarks/slowhistory.sh [-o FILE] [-r ROUNDS] [-b BUSY] [-c REV] [-u NAMES] [-R]
#
# -R: both test binaries built with -race, as CI's suites run.
# -c REV: the old arm is the tree of commit REV as it is (its code and its
# test), not HEAD's with substitutions: docs/31 set step 30 against 31
# with -c ':/^Step 30:'.
# -u NAMES: the old arm is HEAD's tree with these of benchmarks/unfix.sh's
# substitutions (default: slowretry feedrepublish); docs/33 set its probes
# against none with -u noprobes.
# ROUNDS pairs (default 3), the order within a pair alternating. BUSY
# busy loops (default 0) run beside each test, which then runs with
# GOMAXPROCS=1, as in docs/27's busy runs. Environment: TEST_DATABASE_URL
# and TEST_REDIS_URL (deploy/services.sh env prints them). About 3
# minutes a pair.
set -euo pipefail
out='' rounds=3 busy=0 rev='' race='' names='slowretry feedrepublish'
while getopts o:r:b:c:u:R opt; do
	case $opt in
	o) out=$OPTARG ;;
	r) rounds=$OPTARG ;;
	b) busy=$OPTARG ;;
	c) rev=$OPTARG ;;
	u) names=$OPTARG ;;
	R) race=-race ;;
	*) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
: "${TEST_DATABASE_URL:?slowhistory.sh: set TEST_DATABASE_URL (deploy/services.sh env prints it)}"
: "${TEST_REDIS_URL:?slowhistory.sh: set TEST_REDIS_URL (deploy/services.sh env prints it)}"
repo=$(git rev-parse --show-toplevel)
. "$repo/benchmarks/lib.sh" # machine_line
work=$(mktemp -d)
loops=()
cleanup() {
	[ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true
	git -C "$repo" worktree remove --force "$work/new" >/dev/null 2>&1 || true
	git -C "$repo" worktree remove --force "$work/old" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
git -C "$repo" worktree add --detach "$work/new" HEAD >/dev/null
git -C "$repo" worktree add --detach "$work/old" "${rev:-HEAD}" >/dev/null
undone=''
[ -z "$rev" ] || names=''
for name in $names; do
	IFS='|' read -r _ file subst _ <<<"$(grep "^$name|" "$repo/benchmarks/unfix.sh")"
	before=$(md5sum <"$work/old/$file")
	perl -0777 -pi -e "$subst" "$work/old/$file"
	[ "$(md5sum <"$work/old/$file")" != "$before" ] || { echo "slowhistory.sh: $name changed nothing in $file" >&2; exit 1; }
	undone="$undone $file: perl -0777 -pe '$subst';"
done
gmp=''
[ "$busy" = 0 ] || gmp=1
for t in new old; do (cd "$work/$t" && go test $race -c -o "$work/$t.test" .); done
for _ in $(seq "$busy"); do
	sh -c 'while :; do :; done' &
	loops+=($!)
done

run() { # ARM ROUND
	local log=$work/$1-$2.log start rc=0
	start=$(date +%s)
	(cd "$work/$1" && GOMAXPROCS=${gmp:-$(nproc)} "$work/$1.test" -test.count=1 -test.v -test.run '^TestHistoryUnderFaults$') >"$log" 2>&1 || rc=$?
	echo "== round $2, $1: $([ $rc = 0 ] && echo ok || echo FAIL) after $(($(date +%s) - start)) s"
	grep -E 'operations (in|on)|instance [0-9]:|least bound|not allowed|--- (PASS|FAIL)|_test\.go:[0-9]+:' "$log" | sort -u | head -12 | sed 's/^ */   /'
}
{
	if [ -n "$rev" ]; then
		echo "# TestHistoryUnderFaults, Redis slowed for a span, in interleaved rounds: this commit (new) and $(git -C "$repo" log -1 --format='%h %s' "$rev") (old)"
	else
		echo "# TestHistoryUnderFaults, Redis slowed for a span, in interleaved rounds: this commit (new) and this commit with $names undone (old)"
	fi
	echo "# made by:   benchmarks/slowhistory.sh -r $rounds -b $busy${rev:+ -c '$rev'}$([ -n "$rev" ] || echo " -u '$names'")${race:+ -R}; commit $(git -C "$repo" rev-parse --short=12 HEAD)$(git -C "$repo" diff --quiet HEAD || echo ' (tree dirty)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | cut -d' ' -f3-); Postgres and Redis at TEST_DATABASE_URL and TEST_REDIS_URL"
	if [ -n "$rev" ]; then
		echo "# old:       a worktree of $(git -C "$repo" rev-parse --short=12 "$rev"), as it is"
	else
		echo "# old:       a worktree of HEAD with (benchmarks/unfix.sh $names)$undone"
	fi
	echo "# each:      the test binary of each tree${race:+ (built with -race)}, -test.run '^TestHistoryUnderFaults\$' -test.v; GOMAXPROCS=${gmp:-$(nproc)}; $busy busy loops beside it"
	echo "#            the checker's bound is 5 s at the clients' pace (since step 31, more on a machine that cannot keep it: the run says);"
	echo "#            'least bound' is the least the run's history meets, to the millisecond"
	echo "#"
	for r in $(seq "$rounds"); do
		if [ $((r % 2)) = 1 ]; then run new "$r"; run old "$r"; else run old "$r"; run new "$r"; fi
	done
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
