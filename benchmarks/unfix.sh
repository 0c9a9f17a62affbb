#!/usr/bin/env bash
# unfix.sh: each of step 27's fixes (and step 29's, 30's, 31's, 33's, 34's, 35's, 36's, 41's, 42's, 43's, 45's, 46's, 47's, 48's, 49's and 50's) undone, one at a
# time, and the test written for it run against the result: a test that
# passes with its fix undone proves nothing. For each: a copy of the
# committed tree (git worktree, detached at HEAD), one substitution that
# puts back the step before's behaviour (perl, printed below with its
# test), the test run once, its verdict and failure lines. The working tree is never touched. The last
# line is not a fix: it stops every instance from dropping what other
# instances' changes tell it (through Redis, and since step 49 through
# Postgres too), and the history checker
# (TestHistoryUnderFaults) must refuse what follows.
#
#   benchmarks/unfix.sh [-o FILE] [NAME ...]
#
# NAME picks fixes by name (default: all). Environment: TEST_DATABASE_URL
# and TEST_REDIS_URL, as for go test (deploy/services.sh env prints them);
# nginx on the PATH or in /usr/sbin. Each builds its tree and runs its
# test: 58 s each on average in benchmarks/49-unfix.txt, so about 67
# minutes for all 69 (arithmetic); the nginx one sends its slow body to
# the end (100 s), many wait for a bound (30 s), and each run of the
# history checker takes 30 s at least (its pace).
set -euo pipefail
out=''
while getopts o: opt; do
	case $opt in o) out=$OPTARG ;; *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
: "${TEST_DATABASE_URL:?unfix.sh: set TEST_DATABASE_URL (deploy/services.sh env prints it)}"
: "${TEST_REDIS_URL:?unfix.sh: set TEST_REDIS_URL (deploy/services.sh env prints it)}"
repo=$(git rev-parse --show-toplevel)
. "$repo/benchmarks/lib.sh" # machine_line
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/tree" HEAD >/dev/null

# name|file|perl substitution (-0777: the whole file at once)|test
#
# Step 29's feedhistory (the republish's fix undone, with the history
# checker) is gone since step 30: the links listener also tells every
# instance of a new link, and the checker passed with the republish alone
# undone (benchmarks/30-unfix.txt); with the listener off as well it
# fails (benchmarks/30-feedhistory-both.txt). feedrepublish, the
# republish's own test, stays.
#
# Step 29's slowhistory (its patient retry undone, with the history
# checker) is gone since step 49 for the same kind of reason: every
# instance now hears each edit from Postgres too, and the checker passed
# with the retry alone undone (benchmarks/49-unfix-second.txt). slowretry,
# impatient and askbreaker, the retry's own tests, stay.
fixes='
flight|flight.go|s/f\.group\.DoChan\(flightKey\(code, f\.changes\.load\(\)\), /f.group.DoChan(code, /|TestFlightAfterDrop
unclear|invalidate.go|s/(func changeMayHaveLanded\(err error\) bool \{\n)/$1\treturn err == nil\n/|TestUnclearChangeIsReread
lateclick|store_postgres.go|s/context\.WithTimeout\(context\.WithoutCancel\(ctx\), 2\*s\.timeout\)/context.WithTimeout(ctx, s.timeout)/|TestLateClickCounts
hangup|errors.go|s/return statusClientClosed, "client closed request", 0/return http.StatusServiceUnavailable, "request cancelled", 0/|TestClientHangUpIs499
jsonkeys|jsonbody.go|s/(func checkJSONKeys\(raw \[\]byte, fields \[\]string\) error \{\n)/$1\treturn nil\n/|TestJSONKeysReadOneWay
proxies|clientip.go|s/(func tooWide\(p netip\.Prefix\) bool \{\n)/$1\treturn false\n/|TestTrustedProxiesNotWide
slowbody|deploy/nginx.conf|s/\n    proxy_request_buffering off;//|TestNginxSlowBodyEnds
dropped|redis.go|s/\n\t\tsubscribers\.lost\(ctx\)//|TestSubscriberHearsDrops
retry|invalidate.go|s/case s\.retryNow <- struct\{\}\{\}:\n\t\tdefault: \/\/ one is asked for already\n/default:\n\t\t\tif s.retry != nil {\n\t\t\t\ts.retry(ctx)\n\t\t\t}\n/|TestSubscriberDropsWhileRetrying
migrate|pgschema.go|s/have == want/have == "never"/g; s/SET LOCAL lock_timeout = %d/SET LOCAL application_name = %d/|TestRestartTakesNoLockOnLinks
sentinelpw|redis.go|s/\n\t\tSentinelPassword: +sent\.password,//|TestRedisSentinelWithItsOwnPassword
sweep0|config.go|s/if cfg\.bloomSweep == 0 && cfg\.bloom/if false \&\& cfg.bloom/|TestLoadConfigRefusalsNameTheirVariable
pendingread|cache.go|s/\tif c\.isPending\(code\) \x7c\x7c c\.isRecent\(code\) \x7c\x7c c\.heard/\tif c.isRecent(code) \x7c\x7c c.heard/|TestChangeWhileRedisDown
replicadb|pgschema.go|s/pqErr\.Code == "3D000" \x7c\x7c //|TestReplicaWaitsForDatabase
slowretry|invalidate.go|s/\tpatient := c\.rdb\.WithTimeout\(pendingTellTimeout\)\n//; s/stored, err := c\.setAll\(cctx, patient, tells\)/stored, err := make([]bool, len(tells)), cctx.Err()/; s/c\.tellPatiently\(ctx, patient, k\.code, k\.t\)/c.tell(ctx, k.code, k.t)/|TestRetryOutwaitsASlowRedis
impatient|invalidate.go|s/c\.rdb\.WithTimeout\(pendingTellTimeout\)/c.rdb.Client/; s/(cctx, cancel := context\.WithTimeout\(ctx, )pendingTellTimeout/$1c.rdb.timeout/g|TestRetryOutwaitsASlowRedis
askbreaker|invalidate.go|s/(\tstored, err := c\.setAll\(cctx, patient, tells\)\n)/$1\tif ok, _ := c.rdb.breaker.allow(); !ok {\n\t\terr = errors.New("breaker open")\n\t}\n/|TestRetryOutwaitsASlowRedis
pipeline|invalidate.go|s/stored, err := c\.setAll\(cctx, patient, tells\)/stored, err := make([]bool, len(tells)), cctx.Err()/|TestRetryTellsEveryCodeInOneRoundTrip
feedrepublish|feedsend.go|s/f\.rdb\.WithTimeout\(pendingTellTimeout\)\.Pipelined/f.rdb.Pipelined/; s/(ctx, cancel := context\.WithTimeout\(ctx, )pendingTellTimeout\+/$1f.rdb.timeout+/|TestFeedRepublishOutwaitsASlowRedis
listener|wire.go|s/listener := newLinkListener\(cfg\.databaseURL, cfg\.listenPing, bf, neg, changes, m\.bloomCounts\(\), log\)/_ = changes/; s/wg\.Go\(func\(\) \{ listener\.run\(bctx\) \}\)/_ = newLinkListener/|TestLinksFromElsewhereAreFound
importlisten|wire.go|s/listener := newLinkListener\(cfg\.databaseURL, cfg\.listenPing, bf, neg, changes, m\.bloomCounts\(\), log\)/_ = changes/; s/wg\.Go\(func\(\) \{ listener\.run\(bctx\) \}\)/_ = newLinkListener/|TestImportedLinksAreFound
trigger|sql/schema.sql|s/CREATE OR REPLACE TRIGGER links_announce[^;]*;//|TestLinksFromElsewhereAreFound
notifysize|sql/schema.sql|s/IF n <= 200 AND octet_length\(payload\) < 8000 THEN/IF n <= 200 THEN/|TestLongCodesDoNotFailInserts
readall|linklisten.go|s/l\.bloom\.readAll\(\)/_ = l.bloom/|TestLinksFromElsewhereAreFound
reread|bloom.go|s/(\t\tb\.listenUp = true\n)\t\}\n\tb\.listenEpoch\+\+/$1\t} else {\n\t\tb.listenEpoch++\n\t}/|TestLinksAddedWhileDeafAreFound
deaftrust|bloom.go|s/ && \(!b\.listens[^\n]*//|TestLinksAddedWhileDeafAreFound
forged|linklisten.go|s/if validCode\(c\) \{/if c != "" {/|TestForgedNotificationsRedirectNowhere
ping|linklisten.go|s/(func \(l \*linkListener\) pings\([^\n]*\n)/$1\treturn\n/|TestSilentListenerIsReplaced
shutdown|linklisten.go|s/(func \(d \*listenDialer\) shutDown\(\) error \{\n)/$1\treturn nil\n/|TestListenerStopsWhilePostgresIsSilent
lagpurge|lag.go|s/(func \(s \*subscriber\) behind\([^\n]*\n)\tfor _, p := range s\.purge \{\n\t\tp\(\)\n\t\}\n/$1/|TestSubscriberBehindPurges
lagforged|lag.go|s/(\tat, ok := w\.out\[nonce\]\n\tif !ok \{\n)\t\treturn 0, false/$1\t\tclear(w.out)\n\t\treturn 0, true/|TestSubscriberBehindPurges
noprobes|lag.go|s/(func \(s \*subscriber\) lagLoop\(ctx context\.Context\) \{\n)/$1\treturn\n/|TestSubscriberBehindPurges
countacks|feedsend.go|s/(func \(f \*codeFeed\) publishedLive\([^\n]*\n)/$1\treturn nil, err\n/|TestFeedOperatorSubscriberHoldsNoCreate
ackcap50ms|config_defaults.go|s/defaultBloomAckTimeout = 5 \* time\.Second/defaultBloomAckTimeout = 50 * time.Millisecond/|TestFeedWaitsForSlowInstance
ackcapstall|config_defaults.go|s/defaultBloomAckTimeout = 5 \* time\.Second/defaultBloomAckTimeout = 50 * time.Millisecond/|TestFeedStalledInstanceHoldsCreateUntilItsRegistrationEnds
forgedlive|live.go|s/!f\.auth\.verify\(mac, "feed-live", f\.live, id, u\)/mac == ""/|TestFeedIgnoresForgedRegistrations
memorycall|live.go|s/redis\.pcall\(\x27MEMORY/redis.call(\x27MEMORY/g|TestFeedWhereMemoryIsRefused
heardrenewal|ackwait.go|s/\t\tcase ok && renewed\.Add\(-liveTTL\)\.After\(published\.Add\(liveMargin\)\):\n\t\t\tdelete\(w\.need, id\) \/\/ heard: see above\n//|TestAckWaitersLapsed
countcap|bloomfeed.go|s/wait := min\(f\.ackTimeout, f\.countWait\)/wait := f.ackTimeout/|TestFeedWhereMemoryIsRefused
nodereg|live.go|s/\t\t\tf\.deregister\(\)\n//|TestFeedStopsCleanly
substays|lag.go|s/if nobody\+\+; nobody >= 2 \{/if nobody++; false {/|TestFeedAndInvalidationsFollowAFailoverWhileTheOldMasterRuns
nowait|redis.go|s/\tif replicas == 0 \{\n\t\treturn write\(rdb\)/\tif true {\n\t\treturn write(rdb)/|TestChangeCountsOnlyOnceAReplicaHasIt
nowaitretry|invalidate.go|s/if n := c\.rdb\.waitReplicas; n > 0 \{/if n := c.rdb.waitReplicas; false \&\& n > 0 {/|TestChangeCountsOnlyOnceAReplicaHasIt
probekey|live.go|s/if redis\.call\(\x27DEL\x27, KEYS\[2\]\) == 0 then return -1 end//|TestRegistrationNeedsItsProbe
noresend|recent.go|s/(func \(c \*cachedStore\) resendRecent\(ctx context\.Context\) \{\n)/$1\treturn\n/|TestResubscriptionTellsRecentChangesAgain
ownrecent|cache.go|s/if c\.isPending\(code\) \x7c\x7c c\.isRecent\(code\) \x7c\x7c c\.heard/if c.isPending(code) \x7c\x7c c.heard/|TestOwnRecentChangeIsReadFromThePrimary
alertbreaker|deploy/alerts.yml|s/max\(shortener_redis_breaker_open\) > 0/sum(rate(shortener_cache_lookups_total{cache="redis",result="skipped"}[5m])) > 0/|TestAlertRules
lookuppool|store_postgres.go|s/\tif s\.openSide != nil \{/\tif false && s.openSide != nil {/|TestLookupsDoNotWaitForWrites
unheard|bloomfeed.go|s/(\t\t\tf\.counts\.ackUnheard\.Inc\(\)\n)/$1\t\t\tf.counts.ackTimeouts.Inc()\n\t\t\treturn\n/|TestFeedCreatorNotListeningWaitsForRenewals
moved|live.go|s/if redis\.call\(\x27EXISTS\x27, KEYS\[2\]\) == 0 then return -1 end\n//|TestFeedCreatorWhoseClientMovesAnnouncesAgain
plainindex|pgschema.go|s/conn\.ExecContext\(ctx, stmt\)/conn.ExecContext(ctx, strings.Replace(stmt, "CONCURRENTLY ", "", 1))/|TestNewIndexLetsWritesPass
invalidindex|pgschema.go|s/case !valid:/case false:/|TestInvalidIndexIsBuiltAgain
heard|cache.go|s/ \x7c\x7c c\.heard\.has\(code\)//|TestHeardChangeIsReadFromThePrimary
fence|store_postgres.go|s/ AND pg_snapshot_xmin\(pg_current_snapshot\(\)\) >= \$2::xid8/ AND \$2::xid8 IS NOT NULL/|TestStandbyBehindIsReadFromThePrimary
raise|wire.go|s/purges = append\(\[\]func\(\)\{r\.fence\.raise\}, purges\.\.\.\)/_ = r/|TestUnheardChangeAfterAPurgeIsReadFromThePrimary
raiseretry|replicafence.go|s/again = time\.After\(min\(fenceRetry, f\.maxLag\/4\)\)/_ = fenceRetry/|TestFenceRaiseIsAnsweredSoon
oneloop|replicafence.go|s/wg\.Go\(func\(\) \{ f\.runStandby\(ctx\) \}\)/_ = f.runStandby/; s/if err := f\.askPrimary\(ctx\); err != nil && f\.raisePending\(\) \{/err := f.askPrimary(ctx)\n\t\tf.askStandby(ctx)\n\t\tif err != nil \&\& f.raisePending() {/|TestFenceRaiseIsAnsweredSoon
changes|linklisten.go|s/\[\]string\{linksChannel, changesChannel\}/[]string{linksChannel}/|TestEditsFromElsewhereReachEveryCache
changesredis|linklisten.go|s/\[\]string\{linksChannel, changesChannel\}/[]string{linksChannel}/|TestEditReachesOthersWhileRedisIsDown
retell|wire.go|s/cache\.remember\(context\.Background\(\), code\)/_ = code/|TestEditsFromElsewhereReachEveryCache
nextversion|sql/schema.sql|s/NEW\.version := OLD\.version \+ 1;/NULL;/|TestEditsFromElsewhereReachEveryCache
oldcodes|sql/schema.sql|s/ UNION SELECT code FROM was//g|TestEditsFromElsewhereReachEveryCache
deafpurge|linklisten.go|s/if l\.changes\.purge != nil \{\n\t\tl\.changes\.purge\(\)\n\t\}\n\tif l\.neg/if l.neg/|TestEditsWhileDeafArePurged
changedall|linklisten.go|s/if l\.changes\.purge != nil \{\n\t\t\tl\.changes\.purge\(\)\n\t\t\}\n\t\tl\.counts\.notifiedChangedAll/l.counts.notifiedChangedAll/|TestManyEditsPurge
always|sql/schema.sql|s/ENABLE ALWAYS TRIGGER/ENABLE TRIGGER/g|TestTriggersFireInEveryRole
truncate|sql/schema.sql|s/CREATE OR REPLACE TRIGGER links_keep_all_rows\n[^\n]*\n[^\n]*\n//; s/ALTER TABLE links ENABLE ALWAYS TRIGGER links_keep_all_rows;\n//|TestTriggersFireInEveryRole
restarttriggers|pgschema.go|s/return off == 0, nil/return true, nil/|TestTriggersPutRightAtStart
noredisheard|wire.go|s/\} else if r, ok := bottom\.\(\*replicaReads\); ok \{/} else if r, ok := bottom.(*replicaReads); ok \&\& false {/|TestHeardWithoutRedisIsReadFromThePrimary
nodrops|wire.go|s/startSubscriber\(rdb, cache\.channel, drops,/startSubscriber(rdb, cache.channel, nil,/; s/for _, d := range drops \{\n\t\t\t\td\(code\)\n\t\t\t\}/_ = drops/|TestHistoryUnderFaults
'
{
	echo "# step 27's, 29's, 30's, 31's, 33's, 34's, 35's, 36's, 41's, 42's, 43's, 45's, 46's, 47's, 48's, 49's and 50's fixes undone one at a time, each with the test written for it"
	echo "# made by:   benchmarks/unfix.sh $*; commit $(git -C "$repo" rev-parse --short=12 HEAD), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | cut -d' ' -f3-)"
	echo "# each:      a worktree of HEAD, one perl substitution undoing the fix (shown), go test -count=1 -run '^TEST\$' ."
	echo "#            'FAIL' is what a test must say with its fix undone; 'ok' would mean it cannot tell"
	echo "#            the last, nodrops, undoes no fix: every instance ignores the invalidations it hears, and the history checker must refuse the run"
	echo "#"
	failed=0
	while IFS='|' read -r name file subst test; do
		[ -n "$name" ] || continue
		if [ $# -gt 0 ]; then
			case " $* " in *" $name "*) ;; *) continue ;; esac
		fi
		git -C "$work/tree" checkout -q -- .
		before=$(md5sum <"$work/tree/$file")
		perl -0777 -pi -e "$subst" "$work/tree/$file"
		if [ "$(md5sum <"$work/tree/$file")" = "$before" ]; then
			echo "== $name: the substitution changed nothing in $file: the script is out of date"
			failed=1
			continue
		fi
		echo "== $name: $file, undone with perl -0777 -pe '$subst'; test $test"
		log=$work/$name.log
		start=$(date +%s)
		if (cd "$work/tree" && go test -count=1 -run "^$test\$" . >"$log" 2>&1); then
			echo "   ok after $(($(date +%s) - start)) s: the test passed with its fix undone"
			failed=1
		else
			echo "   FAIL after $(($(date +%s) - start)) s; what it said:"
			grep -E '_test\.go:[0-9]+:|^--- FAIL|\[build failed\]|cannot|undefined' "$log" | head -8 | sed 's/^/     /'
			if grep -q '\[build failed\]\|undefined' "$log"; then
				echo "   (a build failure: the substitution broke the code, not the behaviour)"
				failed=1
			fi
		fi
	done <<<"$fixes"
	echo "#"
	if [ $failed = 0 ]; then echo "# every test failed with its fix undone"; else echo "# NOT every test failed with its fix undone: see above"; fi
	[ $failed = 0 ]
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
