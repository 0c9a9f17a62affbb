#!/usr/bin/env bash
# stats.sh: step 17's sitting. What the stats cost the redirect, and what
# they take on disk.
#
#   redirect  two instances of this tree on one database (LINKS links
#             seeded) and one Redis of the script's own: one with STATS=off,
#             one with the stats on (the default). Rounds of wrk, in an
#             order that turns each round: /healthz, then the redirect of
#             each instance for one hot link, and for a Zipf(1.0) stream
#             over the seeded links (benchmarks/zipf.lua), every request
#             with a browser's User-Agent and a Referer, so that each click
#             is a person's and is classified, hashed and summed. CPU per
#             response of the app and wrk; the clicks each instance
#             dropped (queue full) or lost (a batch that failed), from its
#             /metrics, and the clicks Postgres holds against the 302s
#             wrk counted. Target: stats on >= 0.85 of stats off.
#   storage   one instance with the stats on, TRUSTED_PROXIES=127.0.0.1;
#             vegeta at a fixed rate for a fixed count of clicks, each with
#             an X-Forwarded-For, User-Agent and Referer drawn from pools
#             (benchmarks/statsgen writes the targets, over a Zipf(1.0)
#             stream of the seeded links, and the exact count of distinct
#             visitors of each link): the bytes of each table
#             (pg_total_relation_size of its partitions) per click, per
#             link-hour and per link-day; the uniques the API gives
#             against the exact counts.
#   uniques   TestUniquesError: the sketch's estimate against the exact
#             count of 10 to 1,000,000 distinct visitors, each seen three
#             times, hashed as the click worker hashes them.
#
#   benchmarks/stats.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS] [-l LINKS] [-c CLICKS] [-R RATE]
#
#   -q        quick: 1 round of 1 s, 2,000 links, 3,000 clicks
#   -o DIR    where the outputs go: 17-redirect.txt, 17-storage.txt, 17-uniques.txt
#             (default: a temporary directory, removed at the end)
#   -p PARTS  comma-separated (default redirect,storage,uniques)
#   -n, -d    rounds (default 5) and seconds per run (default 10)
#   -l LINKS  links seeded for the Zipf stream (default 100,000)
#   -c CLICKS clicks sent in storage (default 100,000; rounded up to whole
#             seconds of RATE)
#   -R RATE   clicks a second in storage (default 2,000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). About 6
# minutes with the defaults. Needs go, git, psql, redis-server, redis-cli,
# curl, wrk, vegeta and /usr/bin/time (GNU time).
set -euo pipefail

conc=50 out='' parts='redirect storage uniques' rounds=5 dur=10 links=100000 clicks=100000 rate=2000
args="$*"
while getopts qo:p:n:d:l:c:R: opt; do
	case $opt in
	q) rounds=1 dur=1 links=2000 clicks=3000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; l) links=$OPTARG ;; c) clicks=$OPTARG ;; R) rate=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "l $links" "c $clicks" "R $rate"; do
	case ${v#* } in '' | *[!0-9]* | 0) echo "stats.sh: -${v%% *} wants a whole number above 0" >&2; exit 2 ;; esac
done
for p in $parts; do case $p in redirect | storage | uniques) ;; *) echo "stats.sh: unknown part $p (redirect, storage, uniques)" >&2; exit 2 ;; esac; done
. "$(dirname "$0")/lib.sh"
sitting stats go git psql redis-server redis-cli curl wrk vegeta
[ -x /usr/bin/time ] || { echo "stats.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
outputs_dir

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/17-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .
go build -o "$tmp/zipf" ./benchmarks/zipf
go build -o "$tmp/statsgen" ./benchmarks/statsgen
nq=${admin%%\?*}
dburl="${nq%/*}/$db${admin#"$nq"}"

ticks() { for p in $(echo "$1" | tr ',' ' '); do cat "/proc/$p/stat" || exit 1; done | awk '{s += $14 + $15} END {print s + 0}'; }
# pg_ticks: the CPU of every postgres process (the server's, whoever asked).
pg_ticks() { { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk '$2 == "(postgres)" {s += $14 + $15} END {print s + 0}'; }
hz=$(getconf CLK_TCK)
rps() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
nresp() { awk '/requests in/ {print $1}' "$1"; }
# bad FILE: socket errors and, for zipf.lua, every answer not a 302 (it
# counts them; wrk alone does not count a 3xx or a 200 as an error).
bad() {
	awk '/Non-2xx or 3xx/ {x += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10}
		/^zipf.lua: responses not 302:/ {z = $5; lua = 1} END {print n + (lua ? z : x)}' "$1"
}
header() { # header TITLE PART
	echo "# $1"
	echo "# made by:   benchmarks/stats.sh ${args:-(no flags)} (part $2): -n $rounds -d $dur -l $links -c $clicks -R $rate; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version'), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2), vegeta $(go version -m "$(command -v vegeta)" 2>/dev/null | awk '$1 == "mod" {print $3}')"
}
# start_app NAME ENV...: an instance of this tree's app on the sitting's
# database and Redis; sets NAME_url, NAME_murl, NAME_pid, NAME_log.
start_app() {
	local name=$1 port mport log
	shift
	port=$(freeport) mport=$(freeport)
	log="$tmp/app-$name.log"
	env DATABASE_URL="$dburl" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" \
		REDIS_URL="redis://127.0.0.1:$redis_port/0" REDIS_KEY_PREFIX="stats-$name:" CREATE_RATE=0 "$@" "$tmp/app" 2>"$log" &
	eval "${name}_pid=$! ${name}_url=http://127.0.0.1:$port ${name}_murl=http://127.0.0.1:$mport/metrics ${name}_log=$log"
	pids="$pids $!"
	wait_healthy "http://127.0.0.1:$port" "$log"
}
stop_apps() {
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	pids=''
}
metric() { curl -fsS "$1" | awk -v m="$2" '$1 == m {print $2 + 0; f = 1} END {if (!f) print 0}'; }
browser='Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0'

start_redis "$tmp"
psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
# Seeded before the instances start, as a deployment's links are there
# before its processes (each builds its Bloom filter from them at start).
PGOPTIONS='-c client_min_messages=warning' psql "$dburl" -q -v ON_ERROR_STOP=1 -f sql/schema.sql >/dev/null
"$tmp/zipf" -seed-copy "$links" | psql "$dburl" -q -v ON_ERROR_STOP=1 -c 'COPY links (code, url) FROM STDIN'
psql "$dburl" -qc 'ANALYZE links' >/dev/null
hot=$("$tmp/zipf" -code 1)

# ---- redirect

if want redirect; then
	dir="$tmp/redirect"
	mkdir -p "$dir"
	start_app f STATS=off
	start_app s
	for u in "$f_url" "$s_url"; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$u/$hot")" = 302 ] || { echo "stats.sh: no redirect for $hot at $u" >&2; exit 1; }
	done
	# Enough of the stream for the fastest run: 200,000 requests a second.
	"$tmp/zipf" -links "$links" -s 1.0 -n $((dur * 200000 + 200000)) -seed 17 >"$tmp/stream"
	clicks0=$(psql "$dburl" -Atc 'SELECT coalesce(sum(clicks), 0) FROM click_counts')
	# run KEY FILE: one run; KEY picks the instance and the URL.
	run() {
		local k=$1 f=$2 url app t0 t1
		case $k in
		h) url="$s_url/healthz" app=$s_pid ;;
		fh) url="$f_url/$hot" app=$f_pid ;;
		sh) url="$s_url/$hot" app=$s_pid ;;
		fz) url="$f_url" app=$f_pid ;;
		sz) url="$s_url" app=$s_pid ;;
		esac
		t0=$(ticks "$app") p0=$(pg_ticks)
		case $k in
		?z) ZIPF_STREAM="$tmp/stream" ZIPF_THREADS=2 /usr/bin/time -f '%U %S' -o "$f.cpu" \
			wrk -t2 -c"$conc" -d"${dur}s" --latency -H "User-Agent: $browser" -H 'Referer: https://news.example.com/' \
			-s "$here/zipf.lua" "$url" >"$f" 2>&1 ;;
		*) /usr/bin/time -f '%U %S' -o "$f.cpu" \
			wrk -t2 -c"$conc" -d"${dur}s" --latency -H "User-Agent: $browser" -H 'Referer: https://news.example.com/' "$url" >"$f" 2>&1 ;;
		esac
		t1=$(ticks "$app") p1=$(pg_ticks)
		awk -v r="$(rps "$f")" -v n="$(nresp "$f")" -v hz="$hz" -v a=$((t1 - t0)) -v g="$(awk '{print $1 + $2}' "$f.cpu")" -v b="$(bad "$f")" -v p=$((p1 - p0)) \
			'BEGIN { printf "%.0f %.1f %.1f %d %.1f\n", r, n ? a * 1e6 / hz / n : 0, n ? g / n * 1e6 : 0, b, n ? p * 1e6 / hz / n : 0 }' >"$f.sum"
	}
	for k in fh sh fz sz h; do run "$k" "$dir/warm-$k"; done
	keys="h fh sh fz sz"
	for i in $(seq 1 "$rounds"); do
		for k in $keys; do run "$k" "$dir/$i-$k"; done
		keys="${keys#* } ${keys%% *}" # the next round starts one later
	done
	# Every queued click is written within CLICK_FLUSH (1 s); then the
	# instances stop (draining what is left) and Postgres is asked.
	sleep 2
	fdrop=$(metric "$f_murl" shortener_clicks_dropped_total) sdrop=$(metric "$s_murl" shortener_clicks_dropped_total)
	flost=$(metric "$f_murl" shortener_clicks_lost_total) slost=$(metric "$s_murl" shortener_clicks_lost_total)
	sslost=$(metric "$s_murl" shortener_stats_lost_total)
	stop_apps
	stored=$(($(psql "$dburl" -Atc 'SELECT coalesce(sum(clicks), 0) FROM click_counts') - clicks0))
	rollup=$(psql "$dburl" -Atc 'SELECT coalesce(sum(people + bots), 0) FROM click_hours')
	sent=$(for f in "$dir"/*-fh "$dir"/*-sh "$dir"/*-fz "$dir"/*-sz; do nresp "$f"; done | awk '{s += $1} END {print s}')
	srent=$(for f in "$dir"/*-sh "$dir"/*-sz; do nresp "$f"; done | awk '{s += $1} END {print s}')
	{
		header "the redirect with the stats on and off: two instances on one database, a hot link and Zipf(1.0) over $links links" redirect
		echo "# load:      wrk -t2 -c$conc -d${dur}s, every request with a browser's User-Agent and a Referer; zipf: benchmarks/zipf.lua over a stream of"
		echo "#            benchmarks/zipf -links $links -s 1.0 -seed 17; one warm-up run of each first; the order turns each round (h fh sh fz sz, then fh sh fz sz h, ...)"
		echo "# keys:      h = /healthz (stats-on instance); fh, sh = the hot link, stats off / on; fz, sz = the Zipf stream, stats off / on"
		echo "# cpu:       the app's user+system CPU over the run (/proc/PID/stat), wrk's (GNU time) and all postgres processes' (/proc), µs per response"
		echo "# bad:       socket errors, and answers that were not 302 (zipf.lua counts them), all runs: $(cat "$dir"/*.sum | awk '{n += $4} END {print n + 0}')"
		echo "# clicks:    stats off dropped $fdrop, lost $flost; stats on dropped $sdrop, lost $slost, stats lost $sslost (their /metrics before they stopped)"
		echo "#            wrk's responses to the two instances (warm-up too; wrk does not count the requests in flight when it stops): $sent; click_counts grew by $stored;"
		echo "#            the stats-on instance's: $srent; its hour rollups hold $rollup clicks"
		echo "#"
		echo "# round  healthz  hot_off hot_on on/off  zipf_off zipf_on on/off  hot_on/h zipf_on/h  app_h app_fh app_sh app_fz app_sz  wrk_h wrk_sh wrk_sz  pg_fh pg_sh pg_fz pg_sz  (target: on/off >= 0.85)"
		for i in $(seq 1 "$rounds"); do
			read -r h ha hw _ _ <"$dir/$i-h.sum"; read -r fh fha _ _ fhp <"$dir/$i-fh.sum"; read -r sh sha shw _ shp <"$dir/$i-sh.sum"
			read -r fz fza _ _ fzp <"$dir/$i-fz.sum"; read -r sz sza szw _ szp <"$dir/$i-sz.sum"
			awk -v i="$i" -v h="$h" -v fh="$fh" -v sh="$sh" -v fz="$fz" -v sz="$sz" -v ha="$ha" -v fha="$fha" -v sha="$sha" -v fza="$fza" -v sza="$sza" -v hw="$hw" -v shw="$shw" -v szw="$szw" \
				-v fhp="$fhp" -v shp="$shp" -v fzp="$fzp" -v szp="$szp" \
				'BEGIN {printf "%d %d %d %d %.3f %d %d %.3f %.3f %.3f %s %s %s %s %s %s %s %s %s %s %s %s\n", i, h, fh, sh, sh / fh, fz, sz, sz / fz, sh / h, sz / h, ha, fha, sha, fza, sza, hw, shw, szw, fhp, shp, fzp, szp}'
		done | medians | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do for k in h fh sh fz sz; do
			printf '\n===== round %s, %s =====\n' "$i" "$k"; cat "$dir/$i-$k"
		done; done
	} >"$out/17-redirect.txt"
fi

# ---- storage

if want storage; then
	dir="$tmp/storage"
	mkdir -p "$dir"
	# The redirect part's clicks (one visitor, 127.0.0.1, on every link it
	# asked for) would count here: the click tables start empty.
	psql "$dburl" -qc 'TRUNCATE click_hours, click_days, click_counts' >/dev/null
	start_app t TRUSTED_PROXIES=127.0.0.1 CLICK_FLUSH=100ms STATS_FLUSH=1s
	# vegeta sends RATE a second for whole seconds, and starts the targets
	# over when they run out: exactly as many targets as it will send.
	secs=$(((clicks + rate - 1) / rate))
	clicks=$((secs * rate))
	"$tmp/zipf" -links "$links" -s 1.0 -n "$clicks" -seed 18 | "$tmp/statsgen" -base "$t_url" -seed 17 -targets "$dir/targets" >"$dir/exact"
	before=0
	wal0=$(psql "$dburl" -Atc 'SELECT pg_current_wal_lsn()')
	vegeta attack -targets "$dir/targets" -rate "$rate" -duration "${secs}s" -redirects -1 -timeout 10s >"$dir/results.bin"
	vegeta report <"$dir/results.bin" >"$dir/report"
	sleep 3 # CLICK_FLUSH, then STATS_FLUSH
	tdrop=$(metric "$t_murl" shortener_clicks_dropped_total) tlost=$(metric "$t_murl" shortener_clicks_lost_total)
	# The uniques of a link's day, from the API, beside the exact count:
	# the 300 links with the most visitors, and every 50th of the rest.
	grep -v '^#' "$dir/exact" | sort -k2,2nr -k1,1 | awk 'NR <= 300 || NR % 50 == 0' | while read -r code exact; do
		u=$(curl -fsS "$t_url/api/links/$code/stats?by=day&from=$(date -u +%Y-%m-%dT00:00:00Z)" | sed -n 's/.*"uniques":\([0-9]*\).*/\1/p' | tail -n 1)
		echo "$code $exact ${u:-none}"
	done >"$dir/uniques"
	stop_apps
	q() { psql "$dburl" -Atc "$1"; }
	wal=$(q "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal0')")
	size() { q "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '$1'::regclass"; }
	q 'VACUUM ANALYZE click_hours, click_days' >/dev/null
	hours_bytes=$(size click_hours) days_bytes=$(size click_days)
	nclicks=$(($(q 'SELECT coalesce(sum(people + bots), 0) FROM click_hours') - before))
	nhours=$(q 'SELECT count(*) FROM click_hours') ndays=$(q 'SELECT count(*) FROM click_days')
	{
		header "what the stats take on disk, and the uniques against exact counts: one instance, clicks from many visitors, agents and sites" storage
		echo "# load:      vegeta attack -rate $rate -duration ${secs}s over the targets of benchmarks/zipf -links $links -s 1.0 -n $clicks -seed 18 | benchmarks/statsgen -seed 17"
		echo "#            (X-Forwarded-For, User-Agent and Referer drawn from pools; TRUSTED_PROXIES=127.0.0.1, CLICK_FLUSH=100ms, STATS_FLUSH=1s)"
		echo "# clicks:    dropped $tdrop, lost $tlost (the instance's /metrics); in the hour rollups: $nclicks"
		echo "# tables:    after VACUUM; pg_total_relation_size of each table's partitions (heap, TOAST, primary key)"
		echo "#"
		awk -v c="$nclicks" -v hb="$hours_bytes" -v db="$days_bytes" -v nh="$nhours" -v nd="$ndays" 'BEGIN {
			printf "# click_hours: %d rows (link-hours), %d bytes: %.1f bytes per link-hour\n", nh, hb, nh ? hb / nh : 0
			printf "# click_days:  %d rows (link-days), %d bytes: %.1f bytes per link-day\n", nd, db, nd ? db / nd : 0
			printf "# both:        %.1f bytes per click (%d clicks)\n", c ? (hb + db) / c : 0, c }'
		awk -v w="$wal" -v c="$nclicks" 'BEGIN {printf "# WAL:         %d bytes written while the clicks came (the whole server, this database alone in use): %.1f bytes per click\n", w, c ? w / c : 0}'
		echo "#"
		echo "# uniques per link-day, the API's against the exact count of distinct visitors (people only), for the 300 links with the most"
		echo "# visitors and every 50th of the rest ($(grep -vc '^#' "$dir/exact") links had a visitor):"
		awk '$3 != "none" && $2 > 0 {e = ($3 - $2) / $2; if (e < 0) e = -e; s += e; n++; if (e > m) m = e; b[$2 < 100 ? "1-99" : $2 < 1000 ? "100-999" : "1000+"]++}
			$3 == "none" {none++}
			END {printf "#   links %d, mean |error| %.3f%%, max |error| %.3f%%, no answer %d; by size: ", n, n ? s / n * 100 : 0, m * 100, none; for (k in b) printf "%s: %d links  ", k, b[k]; printf "\n"}' "$dir/uniques"
		echo "#"
		echo "# the 20 links with the most visitors: code exact api"
		sort -k2,2nr "$dir/uniques" | head -n 20 | sed 's/^/#   /'
		echo
		echo "===== vegeta report ====="
		cat "$dir/report"
		echo
		echo "===== the rows of the busiest link (click_days), as stored ====="
		q "SELECT code, day, people, bots, octet_length(uniques) AS sketch_bytes, referrers, agents FROM click_days ORDER BY people DESC LIMIT 3"
	} >"$out/17-storage.txt"
fi

# ---- uniques

if want uniques; then
	{
		header "HyperLogLog against exact counts: the sketch the click worker keeps per link and day" uniques
		echo "# how:       go test -count=1 -v -run '^TestUniquesError\$' . (stats_test.go): n distinct addresses, each inserted three times,"
		echo "#            hashed with HMAC-SHA256 under a fixed key as the worker hashes them; precision 14 (standard error 0.81%)"
		echo "#"
		TEST_DATABASE_URL="$admin" TEST_REDIS_URL="redis://127.0.0.1:$redis_port/0" go test -count=1 -v -run '^TestUniquesError$' . 2>&1
	} >"$out/17-uniques.txt"
fi

cat "$out"/17-*.txt | grep '^# ' | grep -v '^# made by\|^# machine\|^# software' | head -n 60
outputs_note
