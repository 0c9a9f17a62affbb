#!/usr/bin/env bash
# longtail.sh: step 14's sitting. Ten million links, traffic spread over all
# of them with a Zipf law, caches smaller than the links: what share of
# lookups each layer answers, what the redirect costs beside /healthz, and
# what a cold start asks of Postgres.
#
#   s10   Zipf s = 1.0 over the links: P(rank r) proportional to 1/r.
#   s08   Zipf s = 0.8: a flatter head and a longer tail. Breslau et al.,
#         "Web Caching and Zipf-like Distributions" (INFOCOM 1999), found
#         web requests Zipf-like with s between 0.64 and 0.83 in six traces.
#         Each of s10 and s08: the app on the kept database, a Redis of the
#         script's own capped by maxmemory (allkeys-lfu), a warm-up with
#         the stream, then rounds of wrk on /healthz and wrk replaying the
#         stream (benchmarks/zipf.lua), in alternating order; the CPU of
#         each process per response; and from the app's /metrics before
#         and after each redirect run, the share of lookups each layer
#         answered.
#   cold  Redis emptied and not capped, a fresh app, wrk replaying a Zipf
#         1.0 stream from the app's first second (no warm-up); then
#         Postgres's lookup queries (shortener_db_lookups_total) per
#         distinct code that reached Postgres: with every cache empty at
#         the start, each distinct code wrk asked for. The keys the app
#         wrote to Redis (counted with SCAN) should be the same codes, and
#         are shown beside them, but a write that timed out or that the
#         breaker skipped is missing there, so they are only a cross-check.
#
#   benchmarks/longtail.sh [-q] [-f] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS] [-w SECONDS] [-l LINKS]
#
#   -q        quick: 100,000 links, 1 round, 1 s runs, 1 s warm-up (give
#             other flags after -q to change one of those)
#   -f        seed the database again even if it looks right
#   -o DIR    where the outputs go: 14-longtail-s10.txt,
#             14-longtail-s08.txt, 14-cold.txt (default: a temporary
#             directory, removed at the end: give -o to keep them)
#   -p PARTS  comma-separated (default s10,s08,cold); -p seed only makes
#             sure the database is there (seeding it if not) and stops
#   -n ROUNDS rounds (default 5); cold: fresh starts
#   -d SECS   seconds per measured run (default 10)
#   -w SECS   warm-up of s10 and s08 with their own streams (default 60)
#   -l LINKS  links seeded (default 10,000,000)
#
# The links live in a database named shortener_longtail_LINKS that the
# script KEEPS between sittings, since seeding ten million takes minutes: it
# is used as it is if it holds exactly LINKS links, link 1 and link LINKS
# with their seeded codes, and the index on code; otherwise (or with -f) it
# is made again (COPY FREEZE from benchmarks/zipf -seed-copy, the index
# built after, ANALYZE). Drop it by hand when done:
#   psql "$ADMIN_DATABASE_URL" -c 'DROP DATABASE shortener_longtail_10000000'
# Click tables in it are emptied at the start of each part.
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable);
# LONGTAIL_REDIS_MAXMEMORY (default 64mb: Redis's cap in s10 and s08);
# LONGTAIL_LOCAL_CACHE_BYTES (default 33554432, 32 MiB: the app's
# LOCAL_CACHE_BYTES; an app that does not know the setting ignores it, and
# the header quotes what the app logged); LONGTAIL_KEEP_TMP=1 keeps the
# temporary directory (raw outputs, the app's logs). With the defaults, about 10
# minutes and a few more to seed; 1 with -q.
# Needs go, git, psql, redis-server, redis-cli, curl, wrk and /usr/bin/time
# (GNU time, Debian package time).
set -euo pipefail

conc=50 threads=2 out='' parts='s10 s08 cold' rounds=5 dur=10 warm=60 links=10000000 force=''
maxmem=${LONGTAIL_REDIS_MAXMEMORY:-64mb}
local_bytes=${LONGTAIL_LOCAL_CACHE_BYTES:-33554432}
# Streams are sized for this many requests a second (well above what wrk
# reaches on a 2-core machine): zipf.lua warns if a thread runs past its slice.
rate_cap=100000
args="$*"
while getopts qfo:p:n:d:w:l: opt; do
	case $opt in
	q) rounds=1 dur=1 warm=1 links=100000 ;;
	f) force=1 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; w) warm=${OPTARG%s} ;; l) links=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,60p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "w $warm" "l $links"; do
	case ${v#* } in '' | *[!0-9]*) echo "longtail.sh: -${v%% *} wants a whole number" >&2; exit 2 ;; esac
done
[ "$links" -ge 1000 ] || { echo "longtail.sh: -l wants 1000 links or more" >&2; exit 2; }
case $local_bytes in '' | *[!0-9]*) echo "longtail.sh: LONGTAIL_LOCAL_CACHE_BYTES wants a number of bytes" >&2; exit 2 ;; esac
for p in $parts; do case $p in s10 | s08 | cold | seed) ;; *) echo "longtail.sh: unknown part $p (s10, s08, cold, seed)" >&2; exit 2 ;; esac; done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
here=benchmarks
for tool in go git psql redis-server redis-cli curl wrk; do
	command -v "$tool" >/dev/null || { echo "longtail.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "longtail.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
. "$here/lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/longtail.XXXXXX")
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
# dbs: only a database being seeded, never the kept one.
dbs='' pids='' redis_port=''
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	for d in $dbs; do psql "$admin" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	[ -n "${LONGTAIL_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/14-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .
go build -o "$tmp/zipf" ./benchmarks/zipf

# ---- the database, kept between sittings

ldb="shortener_longtail_$links"
nq=${admin%%\?*}
ldburl="${nq%/*}/$ldb${admin#"$nq"}"
code1=$("$tmp/zipf" -code 1)
codeN=$("$tmp/zipf" -code "$links")
# db_ok: the kept database holds exactly $links seeded links and the index.
db_ok() {
	[ "$(psql "$admin" -Atc "SELECT count(*) FROM pg_database WHERE datname = '$ldb'")" = 1 ] || return 1
	[ "$(psql "$ldburl" -Atc "SELECT (SELECT count(*) FROM links) = $links
		AND (SELECT url FROM links WHERE code = '$code1') = 'https://example.com/seed/1'
		AND (SELECT url FROM links WHERE code = '$codeN') = 'https://example.com/seed/$links'
		AND EXISTS (SELECT 1 FROM pg_indexes WHERE tablename = 'links' AND indexname = 'links_code_key')" 2>/dev/null)" = t ]
}
# seed_db: build the database under a temporary name, renamed only once
# complete, so an interrupted seeding leaves nothing that looks kept.
# COPY into a table without the index, then the index (sql/schema.sql
# again), then ANALYZE. FREEZE (allowed since the table is truncated in
# the same transaction; since step 50 the table's trigger refuses a
# TRUNCATE, so it is off in that transaction alone) writes the rows frozen and all-visible, so the
# first sitting does not pay for setting hint bits on ten million rows,
# nor a VACUUM for it. At 1,000,000 links, one run each on the 2-core
# machine: sql/seed.sql 12.7 s; COPY into the indexed table 5.9 s; COPY,
# then the index, then ANALYZE 4.8 s; the same with FREEZE 6.4 s.
seed_db() {
	local build t0 t1
	build="${ldb}_building_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
	dbs="$dbs $build"
	local burl="${nq%/*}/$build${admin#"$nq"}"
	echo "longtail.sh: seeding $links links into $ldb (kept for later sittings)" >&2
	# Errors stop it; notices (schema.sql's "already exists") are not shown.
	local -x PGOPTIONS='-c client_min_messages=warning'
	t0=$(date +%s)
	psql "$admin" -qc "CREATE DATABASE $build" >/dev/null
	psql "$burl" -q -v ON_ERROR_STOP=1 -f sql/schema.sql >/dev/null
	psql "$burl" -qc 'DROP INDEX links_code_key' >/dev/null
	"$tmp/zipf" -seed-copy "$links" | psql "$burl" -q -v ON_ERROR_STOP=1 \
		-c 'BEGIN' -c 'ALTER TABLE links DISABLE TRIGGER links_keep_all_rows' -c 'TRUNCATE links' \
		-c 'COPY links (code, url) FROM STDIN WITH (FREEZE)' \
		-c 'ALTER TABLE links ENABLE ALWAYS TRIGGER links_keep_all_rows' -c 'COMMIT'
	psql "$burl" -q -v ON_ERROR_STOP=1 -f sql/schema.sql >/dev/null
	psql "$burl" -qc 'ANALYZE links' >/dev/null
	t1=$(date +%s)
	psql "$burl" -qc "COMMENT ON DATABASE $build IS 'seeded by benchmarks/longtail.sh at commit $(git rev-parse --short=12 HEAD) on $(date -u '+%Y-%m-%dT%H:%M:%SZ'): $links links by COPY in $((t1 - t0)) s'" >/dev/null
	psql "$admin" -qc "DROP DATABASE IF EXISTS $ldb WITH (FORCE)" >/dev/null
	psql "$admin" -qc "ALTER DATABASE $build RENAME TO $ldb" >/dev/null
	dbs=''
	seeded_now="seeded in this sitting in $((t1 - t0)) s"
}
seeded_now=''
if [ -n "$force" ] || ! db_ok; then seed_db; fi
db_ok || { echo "longtail.sh: $ldb does not hold what was seeded" >&2; exit 1; }
# The BRIN index on created_at, which the Bloom filter's sweep reads
# (bloom.go), is made by sql/schema.sql on the empty table, before the
# COPY: its ranges are summarized only by a VACUUM, which a Postgres with
# autovacuum off never runs, and a range not summarized is read whole.
# On ten million links each sweep read the whole table, 2.8 to 3.1 s a
# query, and under load they piled up (step 38,
# benchmarks/38-brin-sweep.txt). Summarized here, in a kept database too
# (nothing to do once done).
psql "$ldburl" -qAtc "SELECT brin_summarize_new_values('links_created_at_brin') FROM pg_class WHERE relname = 'links_created_at_brin'" >/dev/null
db_note=$(psql "$ldburl" -Atc "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '$ldb'")
db_size=$(psql "$ldburl" -Atc "SELECT format('table %s, index %s', pg_size_pretty(pg_relation_size('links')), pg_size_pretty(pg_indexes_size('links'))) ")
if [ "$parts" = seed ]; then
	echo "$ldb: $links links ($db_size); ${seeded_now:-kept from an earlier sitting}; its note: ${db_note:-none}"
	exit 0
fi

# ---- measuring

# CPU ticks: lib.sh's ticks_pids PIDS (comma- or space-separated, summed; one
# that has ended stops the script) and ticks_named NAME (every process so
# named, with children reaped: Postgres backends).
hz=$(getconf CLK_TCK)
rps() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
nresp() { awk '/requests in/ {print $1}' "$1"; }
# bad FILE: wrk's socket errors, and the responses that were not what was
# asked: for zipf.lua's runs every one that was not 302 (zipf.lua counts
# them; wrk's non-2xx/3xx count is among them, so it is not added, as it
# was in step 14's saved outputs, which count a 503 twice), else wrk's
# non-2xx/3xx.
bad() {
	awk '/Non-2xx or 3xx/ {x += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10}
		/^zipf.lua: responses not 302:/ {z = $5; lua = 1} END {print n + (lua ? z : x)}' "$1"
}
# wrapped FILE: whether a zipf.lua thread ran past its slice of the stream.
wrapped() { grep -c '^zipf.lua: WARNING' "$1" || true; }

# stream FILE SEED SECONDS S: a Zipf(S) stream for a run of SECONDS.
stream() { "$tmp/zipf" -links "$links" -s "$4" -n $(($3 * rate_cap)) -seed "$2" >"$1"; }

# wrk_run FILE URL [STREAM]: one run of $dur s at $conc connections, of
# /healthz or (with STREAM) of zipf.lua; the generator's CPU to FILE.cpu.
wrk_run() {
	if [ -n "${3:-}" ]; then
		ZIPF_STREAM=$3 ZIPF_THREADS=$threads /usr/bin/time -f '%U %S' -o "$1.cpu" \
			wrk -t"$threads" -c"$conc" -d"${dur}s" --latency -s "$here/zipf.lua" "$2" >"$1" 2>&1
	else
		/usr/bin/time -f '%U %S' -o "$1.cpu" wrk -t"$threads" -c"$conc" -d"${dur}s" --latency "$2" >"$1" 2>&1
	fi || { echo "longtail.sh: wrk failed:" >&2; cat "$1" >&2; exit 1; }
}

# scrape FILE: the app's metrics, once no request is in flight (requests
# wrk left behind finish within their deadlines).
scrape() {
	local i=0 n
	while :; do
		curl -fs "$murl/metrics" >"$1" || { echo "longtail.sh: $murl/metrics does not answer" >&2; exit 1; }
		n=$(awk '$1 == "shortener_http_requests_in_flight" {print $2 + 0}' "$1")
		[ "${n:-0}" = 0 ] && break
		i=$((i + 1)); [ "$i" -lt 100 ] || { echo "longtail.sh: requests still in flight after 10 s" >&2; exit 1; }
		sleep 0.1
	done
}
# metric FILE SERIES: a series' value (e.g. shortener_cache_lookups_total{cache="local",result="hit"}),
# 0 if the metric family is there but the series is not, NA if the family is not.
metric() {
	awk -v k="$2" 'BEGIN { split(k, a, "{"); fam = a[1] }
		$1 == k { v = $2; found = 1 } $1 == fam || index($1, fam "{") == 1 { fam_seen = 1 }
		END { if (found) printf "%.0f\n", v; else if (fam_seen) print 0; else print "NA" }' "$1"
}
# delta A B SERIES: the series' increase from scrape A to scrape B.
delta() {
	local a b
	a=$(metric "$1" "$3") b=$(metric "$2" "$3")
	if [ "$a" = NA ] || [ "$b" = NA ]; then echo NA; else echo $((b - a)); fi
}
cache_series() { echo "shortener_cache_lookups_total{cache=\"$1\",result=\"$2\"}"; }
db_series() { echo "shortener_db_lookups_total{result=\"$1\"}"; }
# layers A B: from two scrapes, "lookups local_share redis_share pg_share
# coalesced_share local_hit redis_hit pg_queries redis_failed": the share of
# lookups (those that reached the local cache, or Redis with no local
# cache) each layer answered, each cache's own hit ratio, Postgres's
# queries, and the Redis lookups that failed or that its breaker skipped.
layers() {
	local lh lm rh rm re rs pf pn pe co
	lh=$(delta "$1" "$2" "$(cache_series local hit)") lm=$(delta "$1" "$2" "$(cache_series local miss)")
	rh=$(delta "$1" "$2" "$(cache_series redis hit)") rm=$(delta "$1" "$2" "$(cache_series redis miss)")
	re=$(delta "$1" "$2" "$(cache_series redis error)") rs=$(delta "$1" "$2" "$(cache_series redis skipped)")
	pf=$(delta "$1" "$2" "$(db_series found)") pn=$(delta "$1" "$2" "$(db_series not_found)") pe=$(delta "$1" "$2" "$(db_series error)")
	co=$(delta "$1" "$2" shortener_lookups_coalesced_total)
	awk -v lh="$lh" -v lm="$lm" -v rh="$rh" -v rm="$rm" -v re="$re" -v rs="$rs" -v pf="$pf" -v pn="$pn" -v pe="$pe" -v co="$co" '
		function na(x) { return x == "NA" }
		function share(x, n) { return na(x) || n == 0 ? "NA" : sprintf("%.4f", x / n) }
		BEGIN {
			if (na(lh)) { lh = 0; lm = 0 }
			if (na(rh)) { rh = 0; rm = 0; re = 0; rs = 0 }
			tot = lh + lm; if (tot == 0) tot = rh + rm + re + rs
			q = na(pf) ? "NA" : pf + pn + pe
			printf "%d %s %s %s %s %s %s %s %d\n", tot, share(lh, tot), share(rh, tot), share(pf, tot), share(co, tot),
				share(lh, lh + lm), share(rh, rh + rm + re + rs), q, re + rs
		}'
}

# Medians over rounds: rows of "round v1 v2 ..." on stdin; prints the rows,
# a "median" row and a "min-max" row; a column with an NA has NA for both.
medians() {
	awk 'function med(x, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = x[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
	{ print; n++; for (c = 2; c <= NF; c++) { v[c, n] = $c + 0; if ($c == "NA") bad[c] = 1; if (n == 1 || $c + 0 < lo[c]) lo[c] = $c + 0; if (n == 1 || $c + 0 > hi[c]) hi[c] = $c + 0 }; nf = NF }
	END {
		printf "median"; for (c = 2; c <= nf; c++) { if (bad[c]) { printf " NA"; continue }; for (i = 1; i <= n; i++) x[i] = v[c, i]; printf " %s", med(x, n) }; printf "\n"
		printf "min-max"; for (c = 2; c <= nf; c++) if (bad[c]) printf " NA"; else printf " %s-%s", lo[c], hi[c]; printf "\n"
	}'
}

header() { # header TITLE PART
	echo "# $1"
	echo "# made by:   benchmarks/longtail.sh ${args:-(no flags)} (part $2): -n $rounds -d $dur -w $warm -l $links; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version') (shared_buffers $(psql "$admin" -Atc 'show shared_buffers')), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
	echo "# database:  $ldb, $links links ($db_size); ${seeded_now:-kept from an earlier sitting}; its note: ${db_note:-none}"
	echo "#            (kept between sittings when it holds exactly $links seeded links; -f seeds it again); click tables emptied before the part"
	echo "# load:      wrk -t$threads -c$conc, ${dur} s per run, all on this machine; the redirects: benchmarks/zipf.lua replaying a stream of"
	echo "#            benchmarks/zipf -links $links (a new seed per run, a thread per slice); every response but 302 counted as bad"
	echo "# cpu:       each process's user+system CPU over the measured run (/proc/PID/stat; postgres: every process so named, with"
	echo "#            reaped children; redis: the script's own; wrk: GNU time), in µs per response"
}

# start_app NAME: this tree's app on the kept database and the script's
# Redis, a key prefix of its own; sets app_url, murl, app_pid, app_log.
start_app() {
	local port mport
	port=$(freeport) mport=$(freeport)
	app_log="$tmp/app-$1.log"
	env DATABASE_URL="$ldburl" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" \
		REDIS_URL="redis://127.0.0.1:$redis_port/0" REDIS_KEY_PREFIX="longtail-$1:" \
		LOCAL_CACHE_BYTES="$local_bytes" "$tmp/app" 2>"$app_log" &
	app_pid=$!
	pids="$pids $app_pid"
	app_url="http://127.0.0.1:$port"
	murl="http://127.0.0.1:$mport"
	wait_healthy "$app_url" "$app_log"
}
stop_app() {
	kill "$app_pid"; wait "$app_pid" 2>/dev/null || true
	pids=$(echo "$pids" | tr ' ' '\n' | grep -vx "$app_pid" | tr '\n' ' ')
}
# The app's own words on its caches (what it understood of the settings),
# and how many warnings and errors it logged (a Redis timeout under load
# is a miss, served from Postgres).
app_caches() {
	grep -E 'level=INFO.*cache' "$app_log" | sed 's/^/#              /' | head -n 4 || true
	echo "#            warnings and errors the app logged (sampled: one per kind each 10 s): $(grep -cE 'level=(WARN|ERROR)' "$app_log" || true)"
}
redis_info() { redis-cli -p "$redis_port" info "$1" | tr -d '\r' | sed -n "s/^$2://p"; }
truncate_clicks() { psql "$ldburl" -qc 'TRUNCATE click_counts, click_events' >/dev/null; }

start_redis "$tmp"
redis_pid=$(redis_info server process_id)

# ---- s10 and s08

zipf_part() { # zipf_part NAME S SEEDBASE
	local name=$1 s=$2 base=$3 dir="$tmp/$1" i order k
	mkdir -p "$dir"
	truncate_clicks
	redis-cli -p "$redis_port" flushall >/dev/null
	redis-cli -p "$redis_port" config set maxmemory "$maxmem" >/dev/null
	redis-cli -p "$redis_port" config resetstat >/dev/null
	local base_mem
	base_mem=$(redis_info memory used_memory)
	start_app "$name"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$app_url/$code1")" = 302 ] || { echo "longtail.sh: the app does not redirect $code1" >&2; exit 1; }
	# Warm-up: the caches fill from the stream, as they would from traffic.
	local d=$dur
	dur=$warm; stream "$dir/warm.stream" "$base" "$warm" "$s"; wrk_run "$dir/warm" "$app_url" "$dir/warm.stream"
	dur=1; wrk_run "$dir/warm-h" "$app_url/healthz"; dur=$d
	rm -f "$dir/warm.stream"
	for i in $(seq 1 "$rounds"); do
		progress "part $name, round $i of $rounds"
		stream "$dir/$i.stream" $((base + i)) "$dur" "$s"
		if [ $((i % 2)) = 1 ]; then order="h r"; else order="r h"; fi
		for k in $order; do
			local t0 p0 r0 t1 p1 r1
			if [ "$k" = r ]; then scrape "$dir/$i.m0"; fi
			t0=$(ticks_pids "$app_pid") p0=$(ticks_named postgres) r0=$(ticks_pids "$redis_pid")
			if [ "$k" = h ]; then wrk_run "$dir/$i-h" "$app_url/healthz"; else wrk_run "$dir/$i-r" "$app_url" "$dir/$i.stream"; fi
			t1=$(ticks_pids "$app_pid") p1=$(ticks_named postgres) r1=$(ticks_pids "$redis_pid")
			if [ "$k" = r ]; then scrape "$dir/$i.m1"; fi
			awk -v r="$(rps "$dir/$i-$k")" -v n="$(nresp "$dir/$i-$k")" -v hz="$hz" -v a=$((t1 - t0)) -v p=$((p1 - p0)) -v rd=$((r1 - r0)) \
				-v g="$(awk '{print $1 + $2}' "$dir/$i-$k.cpu")" -v b="$(bad "$dir/$i-$k")" -v w="$(wrapped "$dir/$i-$k")" \
				'BEGIN { u = n ? 1e6 / hz / n : 0; printf "%.0f %.1f %.1f %.1f %.1f %d %d\n", r, a * u, p * u, rd * u, n ? g / n * 1e6 : 0, b, w }' >"$dir/$i-$k.sum"
		done
		rm -f "$dir/$i.stream"
		layers "$dir/$i.m0" "$dir/$i.m1" >"$dir/$i.layers"
	done
	local keys used evicted maxbytes
	keys=$(redis-cli -p "$redis_port" dbsize | tr -d '\r')
	used=$(redis_info memory used_memory) evicted=$(redis_info stats evicted_keys) maxbytes=$(redis_info memory maxmemory)
	{
		header "the long tail, Zipf s = $s over $links links: redirect beside /healthz, CPU per response, and the share of lookups each layer answered" "$name"
		echo "# caches:    Redis maxmemory $maxmem ($maxbytes bytes), allkeys-lfu, emptied before the part; the app's LOCAL_CACHE_BYTES=$local_bytes;"
		echo "#            at the end Redis held $keys keys = $(awk -v k="$keys" -v n="$links" 'BEGIN {printf "%.2f%%", 100 * k / n}') of the links, in used_memory $used bytes ($base_mem when empty:"
		echo "#            $(awk -v u="$used" -v b="$base_mem" -v k="$keys" 'BEGIN {printf "%.0f", k ? (u - b) / k : 0}') bytes a key; at that, all $links links would take $(awk -v u="$used" -v b="$base_mem" -v k="$keys" -v n="$links" 'BEGIN {printf "%.0f MB", k ? (u - b) / k * n / 1e6 : 0}'),"
		echo "#            and maxmemory is $(awk -v m="$maxbytes" -v u="$used" -v b="$base_mem" -v k="$keys" -v n="$links" 'BEGIN {printf "%.1f%%", (k && m && u > b) ? 100 * m / ((u - b) / k * n) : 0}') of that); keys evicted during the part: $evicted"
		echo "#            the app logged:"
		app_caches
		echo "# warm-up:   ${warm} s of zipf.lua (its own stream, seed $base), then 1 s of /healthz; round i's stream has seed $base+i"
		echo "# order:     /healthz then redirects in odd rounds, the reverse in even ones"
		echo "# metrics:   the app's /metrics scraped before and after each redirect run (once nothing is in flight): lookups ="
		echo "#            shortener_cache_lookups_total{cache=\"local\"} (hit+miss), or {cache=\"redis\"} with no local cache; answered by local ="
		echo "#            local hits, redis = redis hits, postgres = shortener_db_lookups_total{result=\"found\"}, coalesced ="
		echo "#            shortener_lookups_coalesced_total, each / lookups; NA: the app has no such metric"
		echo "#"
		echo "# A. req/s, and the ratio within each round (target for s = 1.0: redirect/healthz >= 0.75)"
		echo "# round healthz redirect redirect/healthz"
		for i in $(seq 1 "$rounds"); do
			awk -v i="$i" -v h="$(cut -d' ' -f1 "$dir/$i-h.sum")" -v r="$(cut -d' ' -f1 "$dir/$i-r.sum")" 'BEGIN {printf "%d %d %d %.3f\n", i, h, r, h ? r / h : 0}'
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# B. CPU µs per response: /healthz's app and wrk; the redirect's app, postgres, redis and wrk"
		echo "# round h_app h_wrk r_app r_postgres r_redis r_wrk"
		for i in $(seq 1 "$rounds"); do
			echo "$i $(cut -d' ' -f2,5 "$dir/$i-h.sum") $(cut -d' ' -f2-5 "$dir/$i-r.sum")"
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# C. lookups in each redirect run, the share each layer answered, each cache's own hit ratio, Postgres queries, and"
		echo "#    Redis lookups that failed (timeout) or that its breaker skipped"
		echo "# round lookups local redis postgres coalesced local_hit redis_hit pg_queries redis_failed"
		for i in $(seq 1 "$rounds"); do echo "$i $(cat "$dir/$i.layers")"; done | medians | sed 's/^/# /'
		echo "#"
		echo "# D. bad responses (wrk's errors, non-2xx/3xx; for redirects every status but 302), all rounds: $(cat "$dir"/*-[hr].sum | awk '{n += $6} END {print n + 0}')"
		echo "#    runs in which a zipf.lua thread ran past its slice of the stream (0 wanted): $(cat "$dir"/*-r.sum | awk '{n += ($7 > 0)} END {print n + 0}')"
		for i in $(seq 1 "$rounds"); do for k in h r; do
			printf '\n===== round %s, %s =====\n' "$i" "$([ "$k" = h ] && echo /healthz || echo 'redirects (zipf.lua)')"; cat "$dir/$i-$k"
		done; done
	} >"$out/14-longtail-$name.txt"
	stop_app
}

if want s10; then zipf_part s10 1.0 1000; fi
if want s08; then zipf_part s08 0.8 2000; fi

# ---- cold

if want cold; then
	dir="$tmp/cold"
	mkdir -p "$dir"
	redis-cli -p "$redis_port" config set maxmemory 0 >/dev/null
	for i in $(seq 1 "$rounds"); do
		progress "cold start, round $i of $rounds"
		truncate_clicks
		redis-cli -p "$redis_port" flushall >/dev/null
		stream "$dir/$i.stream" $((3000 + i)) "$dur" 1.0
		start_app "cold$i"
		scrape "$dir/$i.m0"
		t0=$(ticks_pids "$app_pid") p0=$(ticks_named postgres) r0=$(ticks_pids "$redis_pid")
		wrk_run "$dir/$i" "$app_url" "$dir/$i.stream"
		t1=$(ticks_pids "$app_pid") p1=$(ticks_named postgres) r1=$(ticks_pids "$redis_pid")
		scrape "$dir/$i.m1"
		# Distinct codes that reached Postgres. Redis was empty and only the
		# app fills it, from Postgres, so the first request for a code
		# misses every cache: the codes wrk asked for, give or take those
		# in flight at the end. The keys the app wrote to Redis under its
		# prefix should be those codes too, but a write that timed out, or
		# that the breaker skipped, is missing from them.
		asked=$(awk '/^zipf.lua: thread [0-9]+: slice from line/ {
				first = $7 + 0; len = $8 + 0; n = $10 + 0
				if (n > len) n = len
				printf "%d %d\n", first, first + n - 1 }' "$dir/$i" | while read -r a b; do sed -n "${a},${b}p" "$dir/$i.stream"; done | sort -u | wc -l)
		keys=$(redis-cli -p "$redis_port" --scan --pattern "longtail-cold$i:link:*" | wc -l)
		read -r tot _ _ _ _ _ _ q rfail < <(layers "$dir/$i.m0" "$dir/$i.m1")
		awk -v i="$i" -v r="$(rps "$dir/$i")" -v n="$(nresp "$dir/$i")" -v hz="$hz" -v a=$((t1 - t0)) -v p=$((p1 - p0)) -v rd=$((r1 - r0)) \
			-v g="$(awk '{print $1 + $2}' "$dir/$i.cpu")" -v b="$(bad "$dir/$i")" -v w="$(wrapped "$dir/$i")" -v q="$q" -v k="$keys" -v asked="$asked" \
			-v tot="$tot" -v rf="$rfail" \
			'BEGIN { u = n ? 1e6 / hz / n : 0
				printf "%d %.0f %d %s %s %d %s %d %d %.1f %.1f %.1f %.1f %d %d\n", i, r, asked, q, (q == "NA" || !asked) ? "NA" : sprintf("%.4f", q / asked),
					k, (q == "NA" || !k) ? "NA" : sprintf("%.4f", q / k), tot, rf, a * u, p * u, rd * u, n ? g / n * 1e6 : 0, b, w }' >"$dir/$i.sum"
		rm -f "$dir/$i.stream"
		stop_app
	done
	{
		header "a cold start under load: Redis empty, a fresh app, Zipf s = 1.0 over $links links from the first second; Postgres queries per distinct code" cold
		echo "# caches:    Redis emptied (FLUSHALL) before each round and not capped (maxmemory 0); the app's LOCAL_CACHE_BYTES=$local_bytes;"
		echo "#            the app logged:"
		app_caches
		echo "# rounds:    each a fresh app (key prefix longtail-coldI:) and a new stream (seed 3000+i), no warm-up: wrk starts once /healthz answers"
		echo "# method:    pg_queries = shortener_db_lookups_total (found+not_found+error) over the run, from /metrics before and after"
		echo "#            (once nothing is in flight). distinct = the distinct codes in the stream lines wrk's threads generated: Redis"
		echo "#            starts empty and only the app fills it, from Postgres, so a code's first request misses every cache and each"
		echo "#            distinct code asked for reaches Postgres. It counts too the requests in flight when wrk stopped (at most"
		echo "#            $conc + 1 codes that may not have reached Postgres), so queries/distinct errs low by at most (${conc}+1)/distinct."
		echo "#            queries/distinct is the figure the target bounds (<= 1.05)."
		echo "#            Cross-check: keys = the app's keys in Redis (redis-cli --scan --pattern 'longtail-coldI:link:*'); every link"
		echo "#            the app finds in Postgres it writes there, but a write that timed out or that the breaker skipped is"
		echo "#            missing, so keys <= distinct and queries/keys errs high by as much as redis_failed (Redis lookups that"
		echo "#            failed or were skipped) suggests. NA: the app has no shortener_db_lookups_total"
		echo "#"
		echo "# round req/s distinct pg_queries queries/distinct keys queries/keys lookups redis_failed app_us postgres_us redis_us wrk_us bad wrapped"
		for i in $(seq 1 "$rounds"); do cat "$dir/$i.sum"; done | medians | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do printf '\n===== round %s =====\n' "$i"; cat "$dir/$i"; done
	} >"$out/14-cold.txt"
fi

for f in "$out"/14-*.txt; do
	[ -f "$f" ] || continue
	echo "== $(basename "$f")"
	grep -E '^# (round|median|min-max|[A-D]\.|caches|  +at the end)' "$f" || true
done
if [ "$keep" ]; then echo "Outputs in $out" | sed "s|$repo/||"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
