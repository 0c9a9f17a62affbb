#!/usr/bin/env bash
# page.sh: step 19's sitting. The page for people: what it weighs, how soon
# its first byte comes, and what serving it costs against /healthz.
#
#   weight  every file a first visit loads, plain and gzipped (curl, with
#           and without Accept-Encoding: gzip), with its headers; the JSON
#           the stats page asks for; and what a second visit costs (the
#           page revalidated: a 304; the CSS and scripts not asked for).
#   ttfb    N requests each on a new connection (curl, time_starttransfer:
#           connect, send, the first byte back) for /healthz, /, a stats
#           page and a script, in turn; median, p90 and the fastest.
#   speed   rounds of hey -z DURATION -c 50 (keep-alive) for /healthz, /
#           (hey asks for gzip, as a browser does), / revalidated
#           (If-None-Match: a 304) and the CSS; and wrk for /healthz and /
#           (Accept-Encoding: gzip) in the same rounds. The order of a
#           round is turned and, every other round, reversed, so that no
#           run always follows the same one. CPU per answer of the app
#           and of the load generator.
#
#   benchmarks/page.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS] [-t TRIES]
#
#   -q        quick: 1 round of 1 s, 20 tries
#   -o DIR    where the outputs go: 19-weight.txt, 19-ttfb.txt, 19-page.txt
#             (default: a temporary directory, removed at the end)
#   -p PARTS  comma-separated (default weight,ttfb,speed)
#   -n, -d    rounds (default 5) and seconds per run (default 10)
#   -t TRIES  requests per URL for ttfb (default 300)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). About 7
# minutes with the defaults. Needs go, git, psql, curl, hey, wrk and
# /usr/bin/time (GNU time).
set -euo pipefail

conc=50 out='' parts='weight ttfb speed' rounds=5 dur=10 tries=300
args="$*"
while getopts qo:p:n:d:t: opt; do
	case $opt in
	q) rounds=1 dur=1 tries=20 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; t) tries=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "t $tries"; do
	case ${v#* } in '' | *[!0-9]* | 0) echo "page.sh: -${v%% *} wants a whole number above 0" >&2; exit 2 ;; esac
done
for p in $parts; do case $p in weight | ttfb | speed) ;; *) echo "page.sh: unknown part $p (weight, ttfb, speed)" >&2; exit 2 ;; esac; done
. "$(dirname "$0")/lib.sh"
sitting page go git psql curl hey wrk
[ -x /usr/bin/time ] || { echo "page.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
outputs_dir

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/19-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
header() { # header TITLE PART
	echo "# $1"
	echo "# made by:   benchmarks/page.sh ${args:-(no flags)} (part $2): -n $rounds -d $dur -t $tries; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), $(curl --version | head -n 1 | cut -d' ' -f1-2), hey $(go version -m "$(command -v hey)" 2>/dev/null | awk '$1 == "mod" {print $3}'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
	echo "# app:       this tree, one instance on a database of its own (1,000 links), no Redis; the page is served from memory (page.go)"
}

seeded_db "$admin" 1000
port=$(freeport)
DATABASE_URL="$dburl" ADDR="127.0.0.1:$port" METRICS_ADDR=off "$tmp/app" 2>"$tmp/app.log" &
pid=$!
pids=$pid
base="http://127.0.0.1:$port"
wait_healthy "$base" "$tmp/app.log"
# The page's own files, by the names it gives them.
curl -fsS "$base/" >"$tmp/index.html"
css=$(grep -o '/static/app\.[0-9a-f]*\.css' "$tmp/index.html")
sjs=$(grep -o '/static/shorten\.[0-9a-f]*\.js' "$tmp/index.html")
curl -fsS "$base/stats/$code" >"$tmp/link.html"
ljs=$(grep -o '/static/link\.[0-9a-f]*\.js' "$tmp/link.html")
etag_gz=$(curl -fsS -o /dev/null -D - -H 'Accept-Encoding: gzip' "$base/" | tr -d '\r' | sed -n 's/^[Ee][Tt]ag: //p')

# ---- weight

if want weight; then
	# row NAME PATH: bytes of the body plain and gzipped, and of the headers.
	row() {
		local p g h
		p=$(curl -fsS -o /dev/null -w '%{size_download}' "$base$2")
		g=$(curl -fsS -o /dev/null -w '%{size_download}' -H 'Accept-Encoding: gzip' "$base$2")
		h=$(curl -fsS -o /dev/null -w '%{size_header}' -H 'Accept-Encoding: gzip' "$base$2")
		echo "$1 $2 $p $g $h"
	}
	{
		row index / && row css "$css" && row shorten.js "$sjs"
		row stats-page "/stats/$code" && row link.js "$ljs"
		row api-link "/api/links/$code" && row api-day "/api/links/$code/stats?by=day" && row api-hour "/api/links/$code/stats?by=hour"
	} >"$tmp/weight"
	revalidate=$(curl -sS -o /dev/null -w '%{http_code} %{size_download} %{size_header}' -H 'Accept-Encoding: gzip' -H "If-None-Match: $etag_gz" "$base/")
	{
		header "the page's weight: each file plain and gzipped, with its headers" weight
		echo "# how:       curl -o /dev/null -w '%{size_download}' URL, and again with -H 'Accept-Encoding: gzip' (and %{size_header});"
		echo "#            the files are those / and /stats/CODE name; the api rows are the JSON the stats page fetches for a link with no clicks"
		echo "#"
		echo "# file path plain_bytes gzip_bytes header_bytes"
		sed 's/^/# /' "$tmp/weight"
		awk '$1 == "index" || $1 == "css" || $1 == "shorten.js" {b += $4; h += $5} END {printf "# first visit to /: 3 requests, %d bytes of bodies gzipped, %d with headers\n", b, b + h}' "$tmp/weight"
		awk '$1 == "stats-page" || $1 == "link.js" || $1 ~ /^api-/ {b += $4; h += $5} END {printf "# then a stats page (the CSS cached): 5 requests, %d bytes of bodies, %d with headers\n", b, b + h}' "$tmp/weight"
		echo "# a second visit to /: 1 request, If-None-Match: $etag_gz -> status, body and header bytes: $revalidate (the CSS and script: immutable, not asked for)"
		echo "#"
		echo "# the headers of / (gzip):"
		curl -fsS -o /dev/null -D - -H 'Accept-Encoding: gzip' "$base/" | tr -d '\r' | sed 's/^/#   /'
		echo "# the headers of $css (gzip):"
		curl -fsS -o /dev/null -D - -H 'Accept-Encoding: gzip' "$base$css" | tr -d '\r' | sed 's/^/#   /'
	} >"$out/19-weight.txt"
fi

# ---- ttfb

if want ttfb; then
	dir="$tmp/ttfb"
	mkdir -p "$dir"
	names="healthz index stats script"
	url_of() { case $1 in healthz) echo "$base/healthz" ;; index) echo "$base/" ;; stats) echo "$base/stats/$code" ;; script) echo "$base$sjs" ;; esac; }
	for i in $(seq 1 "$tries"); do
		for n in $names; do
			curl -fsS -o /dev/null -H 'Accept-Encoding: gzip' -w '%{time_connect} %{time_starttransfer}\n' "$(url_of "$n")" >>"$dir/$n"
		done
		names="${names#* } ${names%% *}"
	done
	{
		header "time to first byte: one request per new connection, $tries per URL, in turn" ttfb
		echo "# how:       curl -o /dev/null -H 'Accept-Encoding: gzip' -w '%{time_connect} %{time_starttransfer}' URL (loopback: no TLS, no network)"
		echo "#            ttfb = time_starttransfer (from curl's start: connect, request sent, first byte back); server = ttfb - time_connect"
		echo "#"
		echo "# url n ttfb_median_us ttfb_p90_us ttfb_min_us server_median_us server_p90_us"
		for n in healthz index stats script; do
			awk -v name="$n" '{t[NR] = $2 * 1e6; s[NR] = ($2 - $1) * 1e6}
				function q(a, n, f,    i, j, x) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x } return a[int((n - 1) * f) + 1] }
				END {n = NR; printf "# %s %d %.0f %.0f %.0f %.0f %.0f\n", name, n, q(t, n, 0.5), q(t, n, 0.9), q(t, n, 0), q(s, n, 0.5), q(s, n, 0.9)}' "$dir/$n"
		done
	} >"$out/19-ttfb.txt"
fi

# ---- speed

if want speed; then
	dir="$tmp/speed"
	mkdir -p "$dir"
	# run KEY FILE: one run; KEY picks the URL and the load generator.
	run() {
		local k=$1 f=$2 t0 t1
		t0=$(ticks "$pid")
		case $k in
		h) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" "$base/healthz" >"$f" 2>&1 ;;
		idx) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" "$base/" >"$f" 2>&1 ;;
		i304) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" -H "If-None-Match: $etag_gz" "$base/" >"$f" 2>&1 ;;
		css) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" "$base$css" >"$f" 2>&1 ;;
		wh) /usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency "$base/healthz" >"$f" 2>&1 ;;
		widx) /usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency -H 'Accept-Encoding: gzip' "$base/" >"$f" 2>&1 ;;
		wi304) /usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency -H 'Accept-Encoding: gzip' -H "If-None-Match: $etag_gz" "$base/" >"$f" 2>&1 ;;
		esac
		t1=$(ticks "$pid")
		if [ "${k#w}" != "$k" ]; then
			# wrk: req/s, good answers, others, app µs and wrk µs per good answer, p50 and p99 ms
			# (wrk counts only 4xx and 5xx as "Non-2xx or 3xx": a 304 is good)
			awk -v hz="$hz" -v a=$((t1 - t0)) -v g="$(awk '{print $1 + $2}' "$f.cpu")" '
				function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; return v * 1000 }
				/^Requests\/sec:/ {rps = $2} / requests in / {all = $1}
				/Non-2xx or 3xx/ {bad += $NF} /Socket errors/ {gsub(",", ""); bad += $4 + $6 + $8 + $10}
				/^ +50%/ {p50 = ms($2)} /^ +99%/ {p99 = ms($2)}
				END {ok = all - bad; n = ok > 0 ? ok : 1; printf "%.0f %d %d %.1f %.1f %.2f %.2f\n", rps, ok, bad, a * 1e6 / hz / n, g * 1e6 / n, p50, p99}' "$f" >"$f.sum"
			return
		fi
		# hey: the same; good is 200, or 304 for i304
		awk -v hz="$hz" -v a=$((t1 - t0)) -v g="$(awk '{print $1 + $2}' "$f.cpu")" -v good="$([ "$k" = i304 ] && echo 304 || echo 200)" '
			/Requests\/sec:/ {rps = $2}
			/^  \[[0-9]+\]/ {s = $1; gsub(/[][]/, "", s); if (s == good) ok += $2; else bad += $2}
			/^Error distribution:/ {e = 1} e && /^  \[[0-9]+\]/ {x = $1; gsub(/[][]/, "", x); bad += x}
			/ 50%+ in / {p50 = $3 * 1000} / 99%+ in / {p99 = $3 * 1000}
			END {n = ok ? ok : 1; printf "%.0f %d %d %.1f %.1f %.2f %.2f\n", rps, ok, bad, a * 1e6 / hz / n, g * 1e6 / n, p50, p99}' "$f" >"$f.sum"
	}
	keys="h idx i304 css wh widx wi304"
	for k in $keys; do run "$k" "$dir/warm-$k"; done
	for i in $(seq 1 "$rounds"); do
		order=$keys
		[ $((i % 2)) -eq 0 ] && order=$(echo "$keys" | tr ' ' '\n' | tac | tr '\n' ' ')
		echo "$i $order" >>"$dir/orders"
		for k in $order; do run "$k" "$dir/$i-$k"; done
		keys="${keys#* } ${keys%% *}"
	done
	{
		header "serving the page: GET / (gzip), / revalidated (304) and the CSS, against /healthz" speed
		echo "# load:      hey -z ${dur}s -c $conc, keep-alive (hey's Go client asks for gzip and unzips); i304: -H 'If-None-Match: $etag_gz';"
		echo "#            wh, widx, wi304: wrk -t2 -c$conc -d${dur}s (widx, wi304: -H 'Accept-Encoding: gzip'; wi304: and the If-None-Match), in the same rounds;"
		echo "#            one warm-up run of each first"
		echo "# order:     turned each round, reversed every other round; the orders:"
		sed 's/^/#              /' "$dir/orders"
		echo "# cpu:       µs per good answer (200; 304 for i304) of the app (/proc/PID/stat) and of the load generator (GNU time)"
		echo "# other:     answers that were not good, hey errors or wrk socket errors, all runs: $(cat "$dir"/*.sum | awk '{n += $3} END {print n + 0}')"
		echo "#"
		echo "# round healthz index i304 css  index/h i304/h css/h  app_h app_idx app_i304 app_css  hey_h hey_idx  p99_h p99_idx"
		for i in $(seq 1 "$rounds"); do
			read -r h _ _ ha hh _ h99 <"$dir/$i-h.sum"
			read -r x _ _ xa xh _ x99 <"$dir/$i-idx.sum"
			read -r n _ _ na _ _ _ <"$dir/$i-i304.sum"
			read -r c _ _ ca _ _ _ <"$dir/$i-css.sum"
			awk -v i="$i" -v h="$h" -v x="$x" -v n="$n" -v c="$c" 'BEGIN {printf "%d %d %d %d %d %.3f %.3f %.3f", i, h, x, n, c, x / h, n / h, c / h}'
			echo " $ha $xa $na $ca $hh $xh $h99 $x99"
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# with wrk: round healthz index i304 index/h i304/h  app_h app_idx app_i304  wrk_h wrk_idx  p99_h p99_idx"
		for i in $(seq 1 "$rounds"); do
			read -r h _ _ ha hh _ h99 <"$dir/$i-wh.sum"
			read -r x _ _ xa xh _ x99 <"$dir/$i-widx.sum"
			read -r n _ _ na _ _ _ <"$dir/$i-wi304.sum"
			awk -v i="$i" -v h="$h" -v x="$x" -v n="$n" 'BEGIN {printf "%d %d %d %d %.3f %.3f", i, h, x, n, x / h, n / h}'
			echo " $ha $xa $na $hh $xh $h99 $x99"
		done | medians | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do for k in h idx i304 css wh widx wi304; do
			printf '\n===== round %s, %s =====\n' "$i" "$k"; cat "$dir/$i-$k"
		done; done
	} >"$out/19-page.txt"
fi

for f in "$out"/19-*.txt; do echo "== $(basename "$f")"; grep -E '^# (round|with wrk: round|median|min-max|first|then|a second|healthz|index|stats|script) ' "$f" || true; done
outputs_note
