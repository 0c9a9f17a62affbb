#!/usr/bin/env bash
# writes.sh: step 10's sitting, in one command. Starts a Redis of its own
# and a fresh Postgres database seeded with sql/seed.sql, builds this tree,
# and measures:
#
#   creates  hey (bench.sh), POST /shorten from one client, four copies of
#            the app at once, in rounds of short runs in alternating order
#            (as step 09's cost): /healthz; a transaction per create
#            (CREATE_BATCH=1, as steps 02 to 09); the same with Postgres's
#            synchronous_commit=off (for measuring only: it can lose
#            acknowledged links); group commit as built (CREATE_BATCH=128);
#            and group commit without the rate limit (CREATE_RATE=0). The
#            others have CREATE_RATE=1000000: a limit checked in Redis that
#            never refuses. Postgres's CPU and WAL (pg_stat_wal) are read
#            around every run.
#   kill     vegeta creates at a fixed rate, the app killed with SIGKILL
#            half-way; every code answered 201 is then looked up in
#            Postgres. Group commit, then a transaction per create.
#   scale    a second database seeded with 10,000,000 links (timed, sizes
#            against shared_buffers); redirects with no cache (no Redis,
#            LOCAL_CACHE_BYTES=0) at a fixed rate, uniform and Zipf, on it
#            and on the 500,000-link database (vload.sh).
#   replica  a streaming replica (deploy/replica.sh) read by the app
#            (DATABASE_REPLICA_URL, no cache); its lag, sampled every half
#            second, under creates at a fixed rate; then create-and-follow
#            pairs (POST, then GET of the new code at once), counting the
#            reads the replica could not answer yet.
#
#   benchmarks/writes.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d DURATION] [-R RATE]
#
#   -q        quick: 1 round of 1s runs at concurrency 10, 10,000 rows, 200/s
#   -o DIR    where the outputs go, named 10-*.txt (default: a temporary directory)
#   -p PARTS  which parts, comma-separated (default creates,kill,scale,replica;
#             by default, replica is skipped, with a message, when the
#             primary's pg_hba.conf allows no replication connections:
#             deploy/replica.sh up says how to allow them)
#   -n, -d    creates: rounds, and each hey run's duration (default 6, 5s;
#             warm-up 1s); concurrency 50
#   -R RATE   creates per second in the kill experiment (default 2000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# psql, redis-server, redis-cli, curl, hey and vegeta.
set -euo pipefail

conc=50 rows=500000 rate=2000 out='' parts='creates kill scale replica' asked=''
rounds=6 rdur=5s kdur=8 kat=4 big=10000000 sdur=20s srate=1000 rdur2=20 pairs=1000
while getopts qo:p:n:d:R: opt; do
	case $opt in
	q) rounds=1 rdur=1s conc=10 rows=10000 rate=200 kdur=4 kat=2 big=100000 sdur=2s srate=200 rdur2=3 pairs=20 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) rdur=$OPTARG ;; R) rate=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') asked=1 ;;
	*) sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
sitting writes go psql redis-server redis-cli curl hey vegeta
outputs_dir
dbs="${db}_big"
stop_signal=KILL # a cut-short run's apps need no drain

# The replica needs the primary to allow replication connections, which a
# stock pg_hba.conf does not: asked for by -p, that is an error (from
# deploy/replica.sh up, with the line to add); by default, the part is
# skipped, said now and again in the summary.
skipped=''
if want replica && [ -z "$asked" ] &&
	[ "$(psql "$admin" -XAtqc "select count(*) from pg_hba_file_rules where 'replication' = any(database) and error is null")" = 0 ]; then
	skipped="replica skipped: the primary's pg_hba.conf ($(psql "$admin" -XAtqc 'show hba_file')) allows no replication connections; deploy/replica.sh up says which line to add"
	echo "writes.sh: $skipped" >&2
	parts=$(echo " $parts " | sed 's/ replica / /')
fi

go build -o "$tmp/shortener" .
backends "$rows"
codeid=$(sh "$here/codeid.sh")
dirty=$(git diff --quiet HEAD -- . ':!benchmarks/10-*' || echo ' (dirty tree)')
stamp() { echo "# made by:   benchmarks/writes.sh ($1); code id $codeid, commit $(git rev-parse --short=12 HEAD)$dirty, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"; }

# start NAME VAR=VALUE...: a copy of the app with those settings, in the
# background; sets pid_NAME and base_NAME.
start() {
	name=$1; shift
	port=$(freeport)
	env ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$(freeport)" "$@" "$tmp/shortener" 2>"$tmp/$name.log" &
	eval "pid_$name=$! base_$name=http://127.0.0.1:$port"
	pids="$pids $!"
	wait_healthy "http://127.0.0.1:$port" "$tmp/$name.log"
}

# wal: the cluster's WAL counters (pg_stat_wal, Postgres 14 and later):
# records, bytes, syncs to disk.
wal() { psql "$admin" -Atc "select wal_records, wal_bytes, wal_sync from pg_stat_wal" | tr '|' ' '; }

if want creates; then
	limit="CREATE_RATE=1000000 CREATE_BURST=1000000"
	# shellcheck disable=SC2086 # the settings split on purpose
	{
		start single CREATE_BATCH=1 $limit
		start async CREATE_BATCH=1 $limit DATABASE_URL="$dburl&options=-c%20synchronous_commit%3Doff"
		start batch $limit
		start nolimit CREATE_RATE=0
	}
	mkdir "$tmp/c"
	i=1
	while [ "$i" -le "$rounds" ]; do
		if [ $((i % 2)) = 1 ]; then order="healthz single async batch nolimit"; else order="nolimit batch async single healthz"; fi
		for v in $order; do
			if [ "$v" = healthz ]; then
				sh "$here/bench.sh" -n 1 -d "$rdur" -c "$conc" -w 1s -p "$pid_batch" \
					-l "writes.sh: round $i, /healthz (of batch)" -o "$tmp/c/$i-healthz.txt" healthz "$base_batch"
				echo "0 0 0" >"$tmp/c/$i-healthz.wal"
			else
				eval "p=\$pid_$v b=\$base_$v"
				w0=$(wal)
				sh "$here/bench.sh" -n 1 -d "$rdur" -c "$conc" -w 1s -p "$p" \
					-l "writes.sh: round $i, create, $v" -o "$tmp/c/$i-$v.txt" create "$b"
				# (the warm-up's creates are in these WAL counts too)
				echo "$w0 $(wal)" | awk '{print $4 - $1, $5 - $2, $6 - $3}' >"$tmp/c/$i-$v.wal"
			fi
		done
		i=$((i + 1))
	done
	# val FILE: median req/s, p99 ms, server and Postgres CPU-µs per response, responses (measured)
	val() { awk '/^# median req\/s:/ {r = $4} /^# median p99:/ {q = $4} /^#   \[[0-9]+\]/ {n += $3} /^#   server/ {s = $3} /^#   postgres/ {g = $3} END {printf "%.1f %.2f %.1f %.1f %d", r, q, n ? s / n * 1e6 : 0, n ? g / n * 1e6 : 0, n}' "$1"; }
	{
		echo "# creates: a transaction per create, the same with synchronous_commit=off, group commit, and group commit without the rate limit"
		stamp "part creates"
		echo "# method:    four copies of the app at once (Postgres with $rows seeded links, Redis, one client: hey), $rounds rounds; in each, one bench.sh"
		echo "#            run of $rdur at concurrency $conc after a 1 s warm-up, for /healthz and each variant, in alternating order (odd rounds:"
		echo "#            healthz single async batch nolimit; even rounds the reverse); ratios are taken within each round. Raw outputs follow."
		echo "# variants:  single  = CREATE_BATCH=1, a transaction (a commit, a WAL flush) per create, as in steps 02-09"
		echo "#            async   = single with synchronous_commit=off for its connections (DATABASE_URL ...&options=-c synchronous_commit=off)"
		echo "#            batch   = group commit as built (CREATE_BATCH default)"
		echo "#            nolimit = batch with CREATE_RATE=0 (no Redis call per create); the others CREATE_RATE=1000000 CREATE_BURST=1000000"
		echo "# per create: app CPU and Postgres CPU (all its processes) over the run / responses; WAL records, bytes and syncs (pg_stat_wal,"
		echo "#            whole cluster) over the warm-up and the run / the run's responses (so slightly high)"
		echo "#"
		echo "# round variant   req/s ratio_to_healthz p99_ms app_us pg_us wal_rec wal_bytes wal_syncs"
	} >"$tmp/summary"
	: >"$tmp/rows"
	i=1
	while [ "$i" -le "$rounds" ]; do
		h=$(val "$tmp/c/$i-healthz.txt" | cut -d' ' -f1)
		for v in single async batch nolimit; do
			echo "$i $v $h $(val "$tmp/c/$i-$v.txt") $(cat "$tmp/c/$i-$v.wal")" >>"$tmp/rows"
		done
		i=$((i + 1))
	done
	{
		cat "$tmp/summary"
		awk '{printf "# %5d %-8s %7.0f %16.3f %6.2f %6.1f %5.1f %7.2f %9.0f %9.3f\n", $1, $2, $4, $4 / $3, $5, $6, $7, $9 / $8, $10 / $8, $11 / $8}' "$tmp/rows"
		echo "# medians over the rounds:"
		for v in single async batch nolimit; do
			awk -v v="$v" '$2 == v {n++; r[n] = $4; q[n] = $4 / $3; p[n] = $5; a[n] = $6; g[n] = $7; s[n] = $11 / $8}
			function med(x, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = x[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
			function lo(x, n,    i, m) { m = x[1]; for (i = 2; i <= n; i++) if (x[i] < m) m = x[i]; return m }
			function hi(x, n,    i, m) { m = x[1]; for (i = 2; i <= n; i++) if (x[i] > m) m = x[i]; return m }
			END {printf "#   %-8s req/s %7.0f  ratio to /healthz %.3f (min %.3f, max %.3f)  p99 %.2f ms  app %.1f us  postgres %.1f us  WAL syncs per create %.3f\n", v, med(r, n), med(q, n), lo(q, n), hi(q, n), med(p, n), med(a, n), med(g, n), med(s, n)}' "$tmp/rows"
		done
		awk '{print $3}' "$tmp/rows" | sort -n | awk '{a[NR] = $1} END {printf "#   /healthz req/s, median of the rounds: %.0f\n", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
		echo "# group commit batch sizes, from batch's /metrics at the end (shortener_create_batch_size):"
		curl -fsS "$(sed -n 's/.*msg="metrics listening" addr=\([^ ]*\).*/http:\/\/\1\/metrics/p' "$tmp/batch.log")" | grep '^shortener_create_batch_size' | sed 's/^/#   /'
		i=1
		while [ "$i" -le "$rounds" ]; do
			for v in healthz single async batch nolimit; do
				printf '\n===== round %s, %s =====\n' "$i" "$v"
				cat "$tmp/c/$i-$v.txt"
			done
			i=$((i + 1))
		done
	} >"$out/10-creates.txt"
	for v in single async batch nolimit; do eval "kill \$pid_$v; wait \$pid_$v || true"; done
	pids=''
fi

if want kill; then
	# vegeta keeps every response body in its results; the 201s' bodies
	# hold the codes the app promised.
	echo '{"url":"https://example.com/kill-9"}' >"$tmp/body.json"
	printf 'POST %s/shorten\nContent-Type: application/json\n@%s\n' "http://127.0.0.1:PORT" "$tmp/body.json" >"$tmp/creates.tpl"
	for v in batch single; do
		case $v in batch) set -- CREATE_RATE=0 ;; single) set -- CREATE_RATE=0 CREATE_BATCH=1 ;; esac
		start "k$v" "$@"
		eval "p=\$pid_k$v b=\$base_k$v"
		sed "s|http://127.0.0.1:PORT|$b|" "$tmp/creates.tpl" >"$tmp/creates"
		before=$(psql "$DATABASE_URL" -Atc "select count(*) from links")
		(sleep "$kat"; kill -9 "$p") &
		killer=$!
		vegeta attack -targets "$tmp/creates" -rate "$rate" -duration "${kdur}s" -timeout 5s >"$tmp/k$v.bin" || true
		wait "$killer" || true
		wait "$p" 2>/dev/null || true
		vegeta encode --to json <"$tmp/k$v.bin" >"$tmp/k$v.json"
		# The code of every 201, from its body (base64 in vegeta's JSON). grep
		# finds nothing when no create was answered before the kill: that is
		# a result (0 acknowledged), and must not end the script under pipefail.
		{ grep '"code":201' "$tmp/k$v.json" || true; } | sed 's/.*"body":"\([^"]*\)".*/\1/' | while read -r b64; do
			printf '%s' "$b64" | base64 -d | sed -n 's/.*"code":"\([^"]*\)".*/\1/p'
		done >"$tmp/k$v.codes"
		acked=$(wc -l <"$tmp/k$v.codes" | tr -d ' ')
		psql "$DATABASE_URL" -qc "CREATE TABLE acked_$v (code text)" >/dev/null
		psql "$DATABASE_URL" -qc "\\copy acked_$v from '$tmp/k$v.codes'" >/dev/null
		found=$(psql "$DATABASE_URL" -Atc "select count(*) from acked_$v a join links l using (code)")
		after=$(psql "$DATABASE_URL" -Atc "select count(*) from links")
		missing=$(psql "$DATABASE_URL" -Atc "select coalesce(string_agg(code, ' '), '') from (select code from acked_$v except select code from links) m")
		{
			echo "# kill -9 under create load: every 201 checked against Postgres ($v)"
			stamp "part kill"
			echo "# method:    vegeta attack -rate $rate -duration ${kdur}s -timeout 5s, POST /shorten (one client), app with $* (defaults otherwise),"
			echo "#            SIGKILL to the app ${kat} s in; then the code in each 201's body is looked up in the links table"
			echo "# answered 201 (acknowledged): $acked"
			echo "# of those, in Postgres:       $found"
			echo "# acknowledged but missing:    $((acked - found))${missing:+ ($missing)}"
			echo "# links added during the run: $((after - before)) (more than acknowledged = committed, but the kill came before the answer left)"
			echo "# vegeta's report:"
			vegeta report <"$tmp/k$v.bin" | sed 's/^/#   /'
		} >"$out/10-kill9-$v.txt"
		psql "$DATABASE_URL" -qc "DROP TABLE acked_$v" >/dev/null
	done
fi

if want scale; then
	# The big database: the same seed, 20 times the links, timed.
	bigdb="${db}_big"
	psql "$admin" -qc "CREATE DATABASE $bigdb" >/dev/null
	bigurl=$(echo "$dburl" | sed "s|/$db?|/$bigdb?|")
	psql "$bigurl" -q -f sql/schema.sql >/dev/null
	t0=$(date +%s)
	psql "$bigurl" -q -v rows="$big" -f sql/seed.sql >/dev/null
	seeded=$(($(date +%s) - t0))
	{
		echo "# the table at $big links, against $rows"
		stamp "part scale"
		echo "# seeding $big links with sql/seed.sql (one INSERT ... SELECT, then ANALYZE): $seeded s"
		for u in "$bigurl" "$dburl"; do
			psql "$u" -XAt -F ' ' -c "select (select count(*) from links), pg_size_pretty(pg_relation_size('links')), pg_size_pretty(pg_relation_size('links_code_key')), pg_size_pretty(pg_relation_size('links_pkey')), pg_size_pretty(pg_total_relation_size('links')), current_setting('shared_buffers')" |
				awk '{printf "# %s links: table %s %s, unique index on code %s %s, primary key %s %s, all with TOAST %s %s; shared_buffers %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}'
		done
		echo "# (the machine's memory, 23.5 GiB, holds either whole in the OS page cache: reads past shared_buffers are copies from memory, not disk reads)"
	} >"$out/10-scale-sizes.txt"
	# A copy of the app on each database, no cache of any kind, clicks off:
	# every redirect is a lookup in Postgres.
	nocache="LOCAL_CACHE_BYTES=0 CLICKS=off REDIS_URL="
	# shellcheck disable=SC2086 # the settings split on purpose
	{
		start big DATABASE_URL="$bigurl" $nocache
		start small $nocache
	}
	blks() { psql "$1" -XAtc "select blks_hit, blks_read from pg_stat_database where datname = current_database()"; }
	for v in big small; do
		eval "p=\$pid_$v b=\$base_$v"
		if [ "$v" = big ]; then n=$big u=$bigurl; else n=$rows u=$dburl; fi
		distinct=$((n < 10000000 ? n : 10000000))
		for dist in uniform zipf; do
			if [ "$dist" = uniform ]; then s=0; else s=1.0; fi
			sh "$here/targets.sh" -n "$distinct" -s "$s" -k 100000 "$b" >"$tmp/t-$v-$dist"
			b0=$(blks "$u")
			DATABASE_URL=$u sh "$here/vload.sh" -r "$srate" -d "$sdur" -p "$p" -t "$tmp/t-$v-$dist" \
				-l "writes.sh: redirects with no cache at $srate/s, $dist over $n links (LOCAL_CACHE_BYTES=0, no Redis, CLICKS=off)" \
				-o "$out/10-scale-$v-$dist.txt"
			echo "$b0 $(blks "$u")" | tr '|' ' ' | awk -v f="10-scale-$v-$dist" '{h = $3 - $1; r = $4 - $2; printf "# %s: shared_buffers hits %d, reads %d (from the OS or disk): %.1f%% hits\n", f, h, r, (h + r) ? 100 * h / (h + r) : 0}' >>"$out/10-scale-sizes.txt"
		done
	done
	for v in big small; do eval "kill \$pid_$v; wait \$pid_$v || true"; done
	pids=''
	psql "$admin" -qc "DROP DATABASE $bigdb WITH (FORCE)" >/dev/null
fi

if want replica; then
	# The replica's server runs as the user postgres, which must reach its
	# directory inside this one.
	chmod o+x "$tmp"
	export REPLICA_DIR="$tmp/replica" REPLICA_PORT="$(freeport)" PRIMARY_URL="$admin"
	deploy/replica.sh up >"$tmp/replica.log" 2>&1 || { cat "$tmp/replica.log" >&2; exit 1; }
	replica=1
	repurl=$(echo "$dburl" | sed "s|127.0.0.1:[0-9]*/|127.0.0.1:$REPLICA_PORT/|")
	# wait until the replica has the database as it is on the primary
	want_links=$(psql "$dburl" -XAtc 'select count(*) from links')
	i=0
	until [ "$(psql "$repurl" -XAtc 'select count(*) from links' 2>/dev/null)" = "$want_links" ]; do
		i=$((i + 1)); [ "$i" -lt 100 ] || { echo "writes.sh: the replica has not got the links" >&2; exit 1; }
		sleep 0.2
	done
	# shellcheck disable=SC2086 # the settings split on purpose
	start rep DATABASE_REPLICA_URL="$repurl" LOCAL_CACHE_BYTES=0 REDIS_URL= CREATE_RATE=0
	mbase=$(sed -n 's/.*msg="metrics listening" addr=\([^ ]*\).*/http:\/\/\1/p' "$tmp/rep.log")
	missed() { curl -fsS "$mbase/metrics" | awk '/^shortener_replica_reads_total\{result="missed"\}/ {print $2 + 0}'; }
	lagrow() { psql "$admin" -XAt -F ' ' -c "select to_char(clock_timestamp(), 'HH24:MI:SS.MS'), pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), coalesce(extract(epoch from replay_lag) * 1000, 0) from pg_stat_replication" | head -n 1; }
	go build -o "$tmp/ryw" ./benchmarks/ryw
	echo '{"url":"https://example.com/replica-load"}' >"$tmp/rbody.json"
	printf 'POST %s/shorten\nContent-Type: application/json\n@%s\n' "$base_rep" "$tmp/rbody.json" >"$tmp/rcreates"
	{
		echo "# a streaming replica under create load: lag, and reads right after a create"
		stamp "part replica"
		echo "# replica: deploy/replica.sh (pg_basebackup -R -X stream, hot standby, asynchronous), on this machine; app: DATABASE_REPLICA_URL set,"
		echo "#          LOCAL_CACHE_BYTES=0, no Redis, CREATE_RATE=0: every redirect reads the replica first, the primary when the replica has no such code"
		echo "#"
		echo "# 1. idle, no other load: go run ./benchmarks/ryw -n $pairs"
		m0=$(missed)
		"$tmp/ryw" -base "$base_rep" -replica "$repurl" -n "$pairs" | sed 's/^/#    /'
		echo "#    the app's reads the replica could not answer, asked of the primary instead (replica_reads_total{result=\"missed\"}): $(($(missed) - m0))"
		echo "#"
		echo "# 2. under creates: vegeta -rate $rate POST /shorten for ${rdur2}s; ryw beside it; the primary's pg_stat_replication every 0.5 s"
		vegeta attack -targets "$tmp/rcreates" -rate "$rate" -duration "${rdur2}s" -timeout 5s >"$tmp/rload.bin" &
		vpid=$!
		# Sampled for as long as the load runs, and no longer.
		(
			while kill -0 "$vpid" 2>/dev/null; do lagrow; sleep 0.5; done
		) >"$tmp/lag.txt" &
		lpid=$!
		m0=$(missed)
		"$tmp/ryw" -base "$base_rep" -replica "$repurl" -n "$pairs" >"$tmp/ryw2.txt"
		m1=$(missed)
		wait "$vpid" || true
		wait "$lpid" || true
		sed 's/^/#    /' "$tmp/ryw2.txt"
		echo "#    the app's reads the replica could not answer, asked of the primary instead: $((m1 - m0))"
		echo "#    the create load, vegeta's report:"
		vegeta report <"$tmp/rload.bin" | sed 's/^/#      /'
		echo "#    lag samples (time, bytes of WAL the replica has not replayed, replay_lag ms as Postgres reports it):"
		sed 's/^/#      /' "$tmp/lag.txt"
		awk '{b[NR] = $2; l[NR] = $3} END {n = NR; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) { if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } if (l[j] < l[i]) { t = l[i]; l[i] = l[j]; l[j] = t } }
			printf "#    over %d samples: bytes behind median %d, max %d; replay_lag median %.1f ms, max %.1f ms\n", n, b[int((n + 1) / 2)], b[n], l[int((n + 1) / 2)], l[n]}' "$tmp/lag.txt"
		echo "#"
		echo "# the app's reads of the replica over the whole run (shortener_replica_reads_total):"
		curl -fsS "$mbase/metrics" | grep '^shortener_replica_reads_total' | sed 's/^/#   /'
	} >"$out/10-replica.txt"
	kill "$pid_rep"; wait "$pid_rep" || true
	pids=''
	deploy/replica.sh down >/dev/null; replica=''
fi

for f in "$out"/10-*.txt; do
	[ -f "$f" ] || continue # no outputs: the glob matched nothing
	case $f in
	*10-creates.txt) head="medians over the rounds (the ratios docs/10 quotes):
$(sed -n '/^# medians over the rounds:/,/^#   \/healthz/p' "$f" | sed '1d; s/^# /    /')" ;;
	*10-replica.txt) head="$(grep -h 'not on the replica yet\|other than 302\|over .* samples' "$f" | sed 's/^# *//' | paste -sd ' ' -)" ;;
	*10-scale-sizes.txt) head="$(grep -h '^# seeding' "$f" | sed 's/^# *//')" ;;
	*10-scale-*) head="$(grep -hE '^#   Latencies' "$f" | sed 's/^# *//' | tr -s ' ')" ;;
	# (with -o benchmarks, the glob takes profile.sh's 10-profile-*.txt too,
	# where grep finds nothing: that must not end the script under pipefail)
	*) head="$({ grep -h '^# acknowledged but missing' "$f" || true; } | sed 's/^# *//')" ;;
	esac
	printf '%-20s %s\n' "$(basename "$f" .txt)" "$head"
done
[ -z "$skipped" ] || echo "$skipped"
outputs_note
