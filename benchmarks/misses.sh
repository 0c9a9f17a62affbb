#!/usr/bin/env bash
# misses.sh: step 15's sitting. A flood of codes that do not exist, against
# ten million links: what share reaches Postgres, what a 404 costs beside
# /healthz, the Bloom filter's false-positive rate against the one it was
# sized for, and what keeping every instance's filter in step costs a create.
#
#   flood    the kept database of benchmarks/longtail.sh (ten million links),
#            a Redis of the script's own, and two apps on them: "bloom" (this
#            tree's defaults: the filter and the negative cache) and "plain"
#            (BLOOM=off NEG_CACHE_SIZE=0: step 14's miss path). Once the
#            bloom app's filter is built (its build time and size are taken
#            from its log and /metrics), rounds of wrk on /healthz and wrk
#            with benchmarks/misses.lua (a random well-formed code a
#            request) on each app, and on the bloom app once more with
#            MISSES_WRK_FORMAT=1 (what the generator's own cost does to the
#            ratio), in rotating order; CPU per response of
#            each process; from each app's /metrics before and after its
#            run, the Postgres lookups per response and the filter's answers.
#   creates  a fresh database, three instances of the app on it and on the
#            script's Redis, each with BLOOM on (every create is published and
#            waits for the other instances' acks) or BLOOM=off, in alternating
#            rounds: hey POST /shorten to one instance, creates per second
#            and their latency, and the acks that timed out.
#
#   benchmarks/misses.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS] [-l LINKS]
#
#   -q        quick: 100,000 links, 1 round, 1 s runs
#   -o DIR    where the outputs go: 15-flood.txt, 15-creates.txt (default: a
#             temporary directory, removed at the end)
#   -p PARTS  comma-separated (default flood,creates)
#   -n ROUNDS rounds (default 5)
#   -d SECS   seconds per measured run (default 10)
#   -l LINKS  links in the kept database (default 10,000,000): made by
#             benchmarks/longtail.sh -p seed -l LINKS if it is not there
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable);
# MISSES_KEEP_TMP=1 keeps the temporary directory (raw outputs, app logs).
# With the defaults, about 6 minutes; with -n 7, about 8 (and the seeding,
# if it has to).
# Needs go, git, psql, redis-server, redis-cli, curl, wrk, hey and
# /usr/bin/time (GNU time, Debian package time).
set -euo pipefail

conc=50 threads=2 out='' parts='flood creates' rounds=5 dur=10 links=10000000
args="$*"
while getopts qo:p:n:d:l: opt; do
	case $opt in
	q) rounds=1 dur=1 links=100000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; l) links=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "l $links"; do
	case ${v#* } in '' | *[!0-9]*) echo "misses.sh: -${v%% *} wants a whole number" >&2; exit 2 ;; esac
done
for p in $parts; do case $p in flood | creates) ;; *) echo "misses.sh: unknown part $p (flood, creates)" >&2; exit 2 ;; esac; done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
here=benchmarks
for tool in go git psql redis-server redis-cli curl wrk hey; do
	command -v "$tool" >/dev/null || { echo "misses.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "misses.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
. "$here/lib.sh"
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/misses.XXXXXX")
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
cdb="shortener_misses_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
pids='' redis_port='' cdb_made=''
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	[ -z "$cdb_made" ] || psql "$admin" -qc "DROP DATABASE IF EXISTS $cdb WITH (FORCE)" >/dev/null 2>&1 || true
	[ -n "${MISSES_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/15-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .

# CPU ticks: lib.sh's ticks_pids (a comma list, summed) and ticks_named.
hz=$(getconf CLK_TCK)
rps() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
nresp() { awk '/requests in/ {print $1}' "$1"; }
# bad FILE: wrk's socket errors.
bad() { awk '/Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$1"; }
# statuses A B: from two scrapes of the app, the redirect route's answers
# over the run: "404s 302s others" (shortener_http_requests_total; its
# labels hold a space, hence no $1 match).
statuses() {
	awk 'FNR == 1 {f++} index($0, "shortener_http_requests_total{method=\"GET\",route=\"GET /{code}\",status=\"") == 1 {
			split($0, a, "status=\""); split(a[2], b, "\""); v[f, b[1]] = $NF; seen[b[1]] = 1 }
		END { for (s in seen) { d = v[2, s] - v[1, s]; if (s == "404") nf += d; else if (s == "302") f3 += d; else o += d }
			printf "%d %d %d\n", nf, f3, o }' "$1" "$2"
}
# wrk_run FILE URL [lua]: one run of $dur s; with lua, benchmarks/misses.lua
# on a new file of random codes (150,000 a second of the run, far more
# than wrk reaches here: misses.lua warns if a thread runs out), made
# before the run so that drawing them costs wrk nothing while it measures.
wrk_run() { # wrk_run FILE URL [lua [1: wrk.format]]
	if [ -n "${3:-}" ]; then
		tr -dc '0-9A-Za-z' </dev/urandom | fold -w 7 | head -n $((dur * 150000)) >"$tmp/codes" || true
		[ "$(wc -l <"$tmp/codes")" = $((dur * 150000)) ] || { echo "misses.sh: could not make the codes" >&2; exit 1; }
		MISSES_STREAM="$tmp/codes" MISSES_THREADS=$threads MISSES_WRK_FORMAT=${4:-0} /usr/bin/time -f '%U %S' -o "$1.cpu" \
			wrk -t"$threads" -c"$conc" -d"${dur}s" --latency -s "$here/misses.lua" "$2" >"$1" 2>&1
	else
		/usr/bin/time -f '%U %S' -o "$1.cpu" wrk -t"$threads" -c"$conc" -d"${dur}s" --latency "$2" >"$1" 2>&1
	fi || { echo "misses.sh: wrk failed:" >&2; cat "$1" >&2; exit 1; }
}
scrape() { # scrape FILE MURL
	local i=0 n
	while :; do
		curl -fs "$2/metrics" >"$1" || { echo "misses.sh: $2/metrics does not answer" >&2; exit 1; }
		n=$(awk '$1 == "shortener_http_requests_in_flight" {print $2 + 0}' "$1")
		[ "${n:-0}" = 0 ] && break
		i=$((i + 1)); [ "$i" -lt 100 ] || { echo "misses.sh: requests still in flight after 10 s" >&2; exit 1; }
		sleep 0.1
	done
}
metric() {
	awk -v k="$2" 'BEGIN { split(k, a, "{"); fam = a[1] }
		$1 == k { v = $2; found = 1 } $1 == fam || index($1, fam "{") == 1 { fam_seen = 1 }
		END { if (found) printf "%.0f\n", v; else if (fam_seen) print 0; else print "NA" }' "$1"
}
metricf() { awk -v k="$2" '$1 == k { v = $2; f = 1 } END { if (f) print v; else print "NA" }' "$1"; }
delta() {
	local a b
	a=$(metric "$1" "$3") b=$(metric "$2" "$3")
	if [ "$a" = NA ] || [ "$b" = NA ]; then echo NA; else echo $((b - a)); fi
}
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
	echo "# made by:   benchmarks/misses.sh ${args:-(no flags)} (part $2): -n $rounds -d $dur -l $links; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version') (shared_buffers $(psql "$admin" -Atc 'show shared_buffers')), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
}

# start_app NAME DBURL ENV...: an instance of this tree's app; sets
# app_url, murl, app_pid, app_log (and NAME_url, NAME_murl, NAME_pid, NAME_log).
start_app() {
	local name=$1 dburl=$2 port mport
	shift 2
	port=$(freeport) mport=$(freeport)
	app_log="$tmp/app-$name.log"
	env DATABASE_URL="$dburl" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" \
		REDIS_URL="redis://127.0.0.1:$redis_port/0" REDIS_KEY_PREFIX="misses-$name:" CREATE_RATE=0 "$@" "$tmp/app" 2>"$app_log" &
	app_pid=$!
	pids="$pids $app_pid"
	app_url="http://127.0.0.1:$port" murl="http://127.0.0.1:$mport"
	wait_healthy "$app_url" "$app_log"
	eval "${name}_url=\$app_url ${name}_murl=\$murl ${name}_pid=\$app_pid ${name}_log=\$app_log"
}

start_redis "$tmp"
redis_pid=$(redis-cli -p "$redis_port" info server | tr -d '\r' | sed -n 's/^process_id://p')

# ---- flood

if want flood; then
	benchmarks/longtail.sh -p seed -l "$links" >"$tmp/seed.txt" || { cat "$tmp/seed.txt" >&2; exit 1; }
	ldb="shortener_longtail_$links"
	nq=${admin%%\?*}
	ldburl="${nq%/*}/$ldb${admin#"$nq"}"
	psql "$ldburl" -qc 'TRUNCATE click_counts, click_events' >/dev/null
	# The BRIN index step 15 adds, built on the kept table once more (the
	# app's start would build it in its migration if it were missing):
	# how long that takes on ten million rows.
	psql "$ldburl" -qc 'DROP INDEX IF EXISTS links_created_at_brin' >/dev/null
	brin=$(psql "$ldburl" -Atc '\timing on' -c "$(grep -E '^CREATE INDEX (CONCURRENTLY )?IF NOT EXISTS links_created_at_brin' sql/schema.sql)" | sed -n 's/^Time: //p')
	brin_size=$(psql "$ldburl" -Atc "SELECT pg_size_pretty(pg_relation_size('links_created_at_brin'))")
	dir="$tmp/flood"
	mkdir -p "$dir"
	t_start=$(date +%s.%N)
	start_app bloom "$ldburl"
	# The filter is built in the background: wait for the app to trust it.
	i=0
	until [ "$(curl -fs "$bloom_murl/metrics" | awk '$1 == "shortener_bloom_trusted" {print $2 + 0}')" = 1 ]; do
		i=$((i + 1)); [ "$i" -lt 1200 ] || { echo "misses.sh: the filter was not trusted within 120 s" >&2; cat "$bloom_log" >&2; exit 1; }
		sleep 0.1
	done
	t_trusted=$(date +%s.%N)
	start_app plain "$ldburl" BLOOM=off NEG_CACHE_SIZE=0
	scrape "$dir/built.m" "$bloom_murl"
	# Warm-up: each app's pools and Postgres's buffers.
	d=$dur; dur=2
	wrk_run "$dir/warm-b" "$bloom_url" lua; wrk_run "$dir/warm-p" "$plain_url" lua; wrk_run "$dir/warm-h" "$bloom_url/healthz"
	dur=$d
	for i in $(seq 1 "$rounds"); do
		progress "round $i of $rounds"
		case $((i % 4)) in 1) order="h b p s" ;; 2) order="b p s h" ;; 3) order="p s h b" ;; 0) order="s h b p" ;; esac
		for k in $order; do
			local_pid=$bloom_pid local_murl=$bloom_murl
			if [ "$k" = p ]; then local_pid=$plain_pid local_murl=$plain_murl; fi
			scrape "$dir/$i-$k.m0" "$local_murl"
			t0=$(ticks_pids "$local_pid") p0=$(ticks_named postgres) r0=$(ticks_pids "$redis_pid")
			case $k in
			h) wrk_run "$dir/$i-h" "$bloom_url/healthz" ;;
			b) wrk_run "$dir/$i-b" "$bloom_url" lua ;;
			p) wrk_run "$dir/$i-p" "$plain_url" lua ;;
			s) wrk_run "$dir/$i-s" "$bloom_url" lua 1 ;;
			esac
			t1=$(ticks_pids "$local_pid") p1=$(ticks_named postgres) r1=$(ticks_pids "$redis_pid")
			scrape "$dir/$i-$k.m1" "$local_murl"
			read -r st_404 st_302 st_other < <(statuses "$dir/$i-$k.m0" "$dir/$i-$k.m1")
			if [ "$k" = h ]; then st_302=0 st_other=$(awk '/Non-2xx or 3xx/ {x += $NF} END {print x + 0}' "$dir/$i-h"); fi
			q=NA
			a=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" 'shortener_db_lookups_total{result="found"}')
			b=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" 'shortener_db_lookups_total{result="not_found"}')
			c=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" 'shortener_db_lookups_total{result="error"}')
			[ "$a" = NA ] || q=$((a + b + c))
			no=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" 'shortener_bloom_lookups_total{result="no"}')
			maybe=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" 'shortener_bloom_lookups_total{result="maybe"}')
			untr=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" 'shortener_bloom_lookups_total{result="untrusted"}')
			fp=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" shortener_bloom_false_positives_total)
			neg=$(delta "$dir/$i-$k.m0" "$dir/$i-$k.m1" shortener_negcache_hits_total)
			awk -v r="$(rps "$dir/$i-$k")" -v n="$(nresp "$dir/$i-$k")" -v hz="$hz" -v a=$((t1 - t0)) -v p=$((p1 - p0)) -v rd=$((r1 - r0)) \
				-v g="$(awk '{print $1 + $2}' "$dir/$i-$k.cpu")" -v b=$(($(bad "$dir/$i-$k") + st_other)) -v f="$st_302" \
				-v q="$q" -v no="$no" -v maybe="$maybe" -v untr="$untr" -v fp="$fp" -v neg="$neg" \
				'function na(x) { return x == "NA" }
				BEGIN { u = n ? 1e6 / hz / n : 0
					printf "%.0f %.1f %.1f %.1f %.1f %d %d %s %s %s %s %s %s %s\n", r, a * u, p * u, rd * u, n ? g / n * 1e6 : 0, b, f,
						na(q) ? "NA" : q, (na(q) || !n) ? "NA" : sprintf("%.5f", q / n), na(no) ? "NA" : no, na(maybe) ? "NA" : maybe,
						na(untr) ? "NA" : untr, na(fp) ? "NA" : fp, (na(fp) || na(no) || fp + no == 0) ? "NA" : sprintf("%.6f", fp / (fp + no)) }' >"$dir/$i-$k.sum"
			[ "$k" = h ] || echo "$neg" >"$dir/$i-$k.neg"
		done
	done
	codes=$(metricf "$dir/built.m" shortener_bloom_codes) cap=$(metricf "$dir/built.m" shortener_bloom_capacity)
	build=$(metricf "$dir/built.m" shortener_bloom_build_seconds)
	p_set=$(grep -o 'fp_rate=[0-9.e-]*' "$bloom_log" | head -n 1 | cut -d= -f2)
	{
		header "a flood of codes that do not exist, over $links links: 404s beside /healthz, what reaches Postgres, the filter's false positives" flood
		echo "# database:  shortener_longtail_$links (benchmarks/longtail.sh -p seed): $(tail -n 1 "$tmp/seed.txt" | cut -d: -f2-)"
		echo "#            step 15's BRIN index on links(created_at), dropped and made again by the script: ${brin:-?}, $brin_size"
		echo "# apps:      bloom = this tree's defaults; plain = BLOOM=off NEG_CACHE_SIZE=0 (step 14's miss path); both on the script's Redis"
		echo "#            (keys prefixed misses-bloom: / misses-plain:), CREATE_RATE=0; each app's log on the filter and the negative cache:"
		grep -iE 'bloom|negative' "$bloom_log" | grep -v 'level=DEBUG' | head -n 6 | sed 's/^/#              /' || true
		echo "# filter:    trusted $(awk -v a="$t_start" -v b="$t_trusted" 'BEGIN {printf "%.1f", b - a}') s after the app was started (the wait above, not the app's own figure);"
		echo "#            /metrics once trusted: shortener_bloom_codes $codes, shortener_bloom_capacity $cap, shortener_bloom_build_seconds $build;"
		echo "#            RSS of the bloom app $(awk '/^VmRSS/ {print $2, $3}' "/proc/$bloom_pid/status"), of the plain app $(awk '/^VmRSS/ {print $2, $3}' "/proc/$plain_pid/status") (at the end)"
		echo "#            sized for the capacity at fp rate ${p_set:-?}: m = ceil(-cap ln p / (ln 2)^2) bits, k = ceil(ln 2 m / cap) hashes (bloom/v3's"
		echo "#            EstimateParameters); expected rate at the fill reached, (1 - e^(-k codes / m))^k = $(awk -v n="$codes" -v c="$cap" -v p="${p_set:-0.01}" 'BEGIN {
				if (c == "NA" || n == "NA") { print "NA"; exit } m = -c * log(p) / (log(2) ^ 2); m = (m == int(m)) ? m : int(m) + 1; k = log(2) * m / c; k = (k == int(k)) ? k : int(k) + 1
				printf "%.6f (m = %d bits = %.1f MB, k = %d); at the capacity it would be %.6f", (1 - exp(-k * n / m)) ^ k, m, m / 8e6, k, (1 - exp(-k * c / m)) ^ k }')"
		echo "# load:      wrk -t$threads -c$conc, ${dur} s per run; 404s: benchmarks/misses.lua (a random well-formed code each request, from a"
		echo "#            file of $((dur * 150000)) drawn anew before each run with tr -dc '0-9A-Za-z' </dev/urandom); warm-up 2 s of"
		echo "#            each, then rounds in rotating order (h b p s, b p s h, p s h b, s h b p); h = /healthz on the bloom app;"
		echo "#            s = the bloom app loaded by misses.lua with MISSES_WRK_FORMAT=1"
		echo "# cpu:       each process's user+system CPU over the run (/proc/PID/stat: the app measured; postgres: every process so named,"
		echo "#            with reaped children; redis: the script's own; wrk: GNU time), in µs per response"
		echo "# metrics:   each app's /metrics before and after its run: pg = shortener_db_lookups_total (all results), pg/resp = pg per response;"
		echo "#            no, maybe, untrusted = shortener_bloom_lookups_total by result; fp = shortener_bloom_false_positives_total;"
		echo "#            fp_rate = fp / (fp + no): the share of absent codes the filter let through"
		echo "#"
		echo "# A. req/s, and each flood's ratio to /healthz within its round (target: bloom >= 0.80); bloom_wf = the bloom app loaded"
		echo "#    by misses.lua with MISSES_WRK_FORMAT=1 (wrk.format builds each request: the generator's own cost, compared)"
		echo "# round healthz bloom plain bloom_wf bloom/healthz plain/healthz bloom_wf/healthz"
		for i in $(seq 1 "$rounds"); do
			awk -v i="$i" -v h="$(cut -d' ' -f1 "$dir/$i-h.sum")" -v b="$(cut -d' ' -f1 "$dir/$i-b.sum")" -v p="$(cut -d' ' -f1 "$dir/$i-p.sum")" \
				-v s="$(cut -d' ' -f1 "$dir/$i-s.sum")" 'BEGIN {printf "%d %d %d %d %d %.3f %.3f %.3f\n", i, h, b, p, s, h ? b / h : 0, h ? p / h : 0, h ? s / h : 0}'
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# B. CPU µs per response (app, postgres, redis, wrk)"
		echo "# round h_app h_pg h_redis h_wrk b_app b_pg b_redis b_wrk p_app p_pg p_redis p_wrk wf_app wf_wrk"
		for i in $(seq 1 "$rounds"); do
			echo "$i $(cut -d' ' -f2-5 "$dir/$i-h.sum") $(cut -d' ' -f2-5 "$dir/$i-b.sum") $(cut -d' ' -f2-5 "$dir/$i-p.sum") $(cut -d' ' -f2,5 "$dir/$i-s.sum")"
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# C. what reached Postgres, and the filter's answers (target: bloom pg/resp <= 0.01)"
		echo "# round b_pg b_pg/resp b_no b_maybe b_untrusted b_fp b_fp_rate b_negcache_hits p_pg p_pg/resp"
		for i in $(seq 1 "$rounds"); do
			echo "$i $(cut -d' ' -f8-14 "$dir/$i-b.sum") $(cat "$dir/$i-b.neg") $(cut -d' ' -f8-9 "$dir/$i-p.sum")"
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# D. bad responses (wrk's socket errors; for /healthz its non-2xx/3xx; for floods every status but 404 and 302 in the app's"
		echo "#    shortener_http_requests_total), all rounds: $(cat "$dir"/*-[hbps].sum | awk '{n += $6} END {print n + 0}')"
		echo "#    runs in which a misses.lua thread came to the end of its codes (0 wanted): $(cat "$dir"/*-[bps] | grep -c '^misses.lua: WARNING' || true)"
		echo "#    302s (a random code that exists: expected about $(awk -v l="$links" 'BEGIN {printf "%.2g", l / 62^7}') of requests): bloom $(cat "$dir"/*-[bs].sum | awk '{n += $7} END {print n + 0}') in $(cat "$dir"/*-[bs].sum | awk '{n += $10 + $11 + $12} END {print n + 0}') filter lookups, plain $(cat "$dir"/*-p.sum | awk '{n += $7} END {print n + 0}')"
		for i in $(seq 1 "$rounds"); do for k in h b p s; do
			printf '\n===== round %s, %s =====\n' "$i" "$(case $k in h) echo /healthz ;; b) echo 'bloom app, misses.lua' ;; p) echo 'plain app, misses.lua' ;; s) echo 'bloom app, misses.lua with MISSES_WRK_FORMAT=1' ;; esac)"; cat "$dir/$i-$k"
		done; done
	} >"$out/15-flood.txt"
	for p in $bloom_pid $plain_pid; do kill "$p"; wait "$p" 2>/dev/null || true; done
	pids=''
fi

# ---- creates

if want creates; then
	dir="$tmp/creates"
	mkdir -p "$dir"
	psql "$admin" -qc "CREATE DATABASE $cdb" >/dev/null
	cdb_made=1
	nq=${admin%%\?*}
	cdburl="${nq%/*}/$cdb${admin#"$nq"}"
	for s in on off; do
		for j in 1 2 3; do
			if [ $s = on ]; then start_app "c${s}$j" "$cdburl" REDIS_KEY_PREFIX="misses-con:"; else start_app "c${s}$j" "$cdburl" BLOOM=off REDIS_KEY_PREFIX="misses-coff:"; fi
		done
	done
	body='{"url":"https://example.com/a/fairly/ordinary/path?with=query"}'
	hey_run() { # hey_run FILE URL
		/usr/bin/time -f '%U %S' -o "$1.cpu" hey -z "${dur}s" -c "$conc" -m POST -T application/json -d "$body" "$2/shorten" >"$1" 2>&1 ||
			{ echo "misses.sh: hey failed:" >&2; cat "$1" >&2; exit 1; }
	}
	hey_run "$dir/warm-on" "$con1_url"; hey_run "$dir/warm-off" "$coff1_url"
	for i in $(seq 1 "$rounds"); do
		if [ $((i % 2)) = 1 ]; then order="on off"; else order="off on"; fi
		for s in $order; do
			eval "u=\$c${s}1_url m=\$c${s}1_murl p1=\$c${s}1_pid p2=\$c${s}2_pid p3=\$c${s}3_pid"
			scrape "$dir/$i-$s.m0" "$m"
			t0=$(ticks_pids "$p1") o0=$(ticks_pids "$p2,$p3") g0=$(ticks_named postgres) r0=$(ticks_pids "$redis_pid")
			hey_run "$dir/$i-$s" "$u"
			t1=$(ticks_pids "$p1") o1=$(ticks_pids "$p2,$p3") g1=$(ticks_named postgres) r1=$(ticks_pids "$redis_pid")
			scrape "$dir/$i-$s.m1" "$m"
			to=$(delta "$dir/$i-$s.m0" "$dir/$i-$s.m1" shortener_bloom_ack_timeouts_total)
			pf=$(delta "$dir/$i-$s.m0" "$dir/$i-$s.m1" shortener_bloom_publish_failures_total)
			n=$(awk '/\[201\]/ {print $2}' "$dir/$i-$s")
			other=$(awk '/^Status code distribution:/ {f = 1; next} f && /\[[0-9]+\]/ && !/\[201\]/ {x += $2} /^Error distribution:/ {f = 0} END {print x + 0}' "$dir/$i-$s")
			errs=$(awk '/^Error distribution:/ {f = 1; next} f && /\[[0-9]+\]/ {x += substr($1, 2) + 0} END {print x + 0}' "$dir/$i-$s")
			awk -v r="$(awk '/Requests\/sec:/ {print $2}' "$dir/$i-$s")" -v n="${n:-0}" -v hz="$hz" -v a=$((t1 - t0)) -v o=$((o1 - o0)) -v g=$((g1 - g0)) -v rd=$((r1 - r0)) \
				-v p50="$(awk '/^ *50%+ in / {print $3 * 1000}' "$dir/$i-$s")" -v p99="$(awk '/^ *99%+ in / {print $3 * 1000}' "$dir/$i-$s")" \
				-v to="$to" -v pf="$pf" -v bad=$((other + errs)) -v hc="$(awk '{print $1 + $2}' "$dir/$i-$s.cpu")" \
				'BEGIN { u = n ? 1e6 / hz / n : 0
					printf "%.0f %.2f %.2f %.1f %.1f %.1f %.1f %.1f %s %s %d\n", r, p50, p99, a * u, o * u, g * u, rd * u, n ? hc / n * 1e6 : 0, to, pf, bad }' >"$dir/$i-$s.sum"
		done
	done
	rows=$(psql "$cdburl" -Atc 'SELECT count(*) FROM links')
	{
		header "creates with every instance's filter kept in step (BLOOM on: publish, then wait for the acks) against BLOOM=off, three instances" creates
		echo "# database:  a fresh one of the script's own ($rows links at the end), dropped after; the script's Redis"
		echo "# apps:      three instances with BLOOM on (defaults; prefix misses-con:) and three with BLOOM=off (prefix misses-coff:), all"
		echo "#            running throughout; CREATE_RATE=0; the load goes to the first of each three, the other two receive the feed"
		echo "#            and ack. The first instance's log on the filter:"
		grep -iE 'bloom' "$con1_log" | head -n 4 | sed 's/^/#              /' || true
		echo "# load:      hey -z ${dur}s -c $conc -m POST /shorten with a 63-byte URL, directly to the instance; rounds alternate on/off"
		echo "# cpu:       µs per 201: the loaded instance, the other two together, postgres, redis, hey"
		echo "# acks:      shortener_bloom_ack_timeouts_total and shortener_bloom_publish_failures_total on the loaded instance, over the run"
		echo "#"
		echo "# round on_rps off_rps on/off on_p50_ms off_p50_ms on_p99_ms off_p99_ms"
		for i in $(seq 1 "$rounds"); do
			read -r a ap5 ap9 _ < "$dir/$i-on.sum"; read -r b bp5 bp9 _ < "$dir/$i-off.sum"
			awk -v i="$i" -v a="$a" -v b="$b" -v a5="$ap5" -v b5="$bp5" -v a9="$ap9" -v b9="$bp9" 'BEGIN {printf "%d %d %d %.3f %s %s %s %s\n", i, a, b, b ? a / b : 0, a5, b5, a9, b9}'
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# round on_app on_others on_pg on_redis on_hey off_app off_others off_pg off_redis off_hey on_ack_timeouts on_publish_failures"
		for i in $(seq 1 "$rounds"); do
			echo "$i $(cut -d' ' -f4-8 "$dir/$i-on.sum") $(cut -d' ' -f4-8 "$dir/$i-off.sum") $(cut -d' ' -f9-10 "$dir/$i-on.sum")"
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# bad responses (not 201, or hey's errors), all rounds: $(cat "$dir"/*-o[nf]*.sum | awk '{n += $11} END {print n + 0}')"
		for i in $(seq 1 "$rounds"); do for s in on off; do
			printf '\n===== round %s, BLOOM %s =====\n' "$i" "$s"; cat "$dir/$i-$s"
		done; done
	} >"$out/15-creates.txt"
fi

for f in "$out"/15-*.txt; do
	[ -f "$f" ] || continue
	echo "== $(basename "$f")"
	grep -E '^# (round|median|min-max|[A-D]\.|filter|  +/metrics|  +expected|bad|  +302s)' "$f" || true
done
if [ "$keep" ]; then echo "Outputs in $out" | sed "s|$repo/||"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
