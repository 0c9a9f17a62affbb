#!/usr/bin/env bash
# changes.sh: step 16's sitting. Links that change: how long an edit or a
# delete made on one instance takes to be seen by every instance, under
# load and with Redis stopped, and whether the warm redirect still keeps up
# with /healthz now that every answer carries an expiry and a status.
#
#   warm       one instance of this tree, a fresh database and a Redis of
#              the script's own, one link: rounds of wrk on /healthz and on
#              the link (a local-cache hit, clicks queued, metrics on), in
#              alternating order; CPU per response of the app and wrk.
#   edits      three instances on one database and Redis, each loaded at a
#              fixed rate by a vegeta of its own (-R requests a second
#              each) asking for another link, for the whole part (a fixed
#              rate, not wrk flat out: on two cores a saturating load makes
#              every request wait in the run queue, the probe's too, and
#              the delay would measure the queue); meanwhile benchmarks/propagate edits a link
#              -e times through the instances in turn and polls every
#              instance every millisecond until each answers the new
#              Location, then deletes it and polls until each answers 410:
#              the delay per edit and per instance (the timeline), p50, p90,
#              p99. Target: p99 <= 100 ms.
#   redisdown  the same three instances with LOCAL_CACHE_TTL=5s; the link
#              is asked of every instance (so that each holds it in its
#              local cache), then Redis is stopped and the edits are made
#              again (-r of them, each once the last was seen everywhere,
#              at least 1 s apart): no instance hears of them, and
#              each must see the edit once its local entry's lifetime ends,
#              5 s at most after it was cached. Redis is started again at
#              the end.
#
#   benchmarks/changes.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS] [-e EDITS] [-r EDITS] [-R RATE]
#
#   -q        quick: 1 round of 1 s, 20 edits, 3 with Redis stopped
#   -o DIR    where the outputs go: 16-warm.txt, 16-edits.txt, 16-redisdown.txt
#             (default: a temporary directory, removed at the end)
#   -p PARTS  comma-separated (default warm,edits,redisdown)
#   -n, -d    rounds (default 5) and seconds per run (default 10) of warm
#   -e EDITS  edits under load (default 200, 100 ms apart)
#   -r EDITS  edits with Redis stopped (default 10, at least 1 s apart)
#   -R RATE   requests a second to each instance during the edits (default 4000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable);
# CHANGES_KEEP_TMP=1 keeps the temporary directory (app logs).
# About 4 minutes with the defaults. Needs go, git, psql, redis-server,
# redis-cli, curl, wrk, vegeta and /usr/bin/time (GNU time).
set -euo pipefail

conc=50 out='' parts='warm edits redisdown' rounds=5 dur=10 edits=200 redits=10 rate=4000
args="$*"
while getopts qo:p:n:d:e:r:R: opt; do
	case $opt in
	q) rounds=1 dur=1 edits=20 redits=3 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; e) edits=$OPTARG ;; r) redits=$OPTARG ;; R) rate=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "e $edits" "r $redits" "R $rate"; do
	case ${v#* } in '' | *[!0-9]*) echo "changes.sh: -${v%% *} wants a whole number" >&2; exit 2 ;; esac
done
for p in $parts; do case $p in warm | edits | redisdown) ;; *) echo "changes.sh: unknown part $p (warm, edits, redisdown)" >&2; exit 2 ;; esac; done
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
here=benchmarks
for tool in go git psql redis-server redis-cli curl wrk vegeta; do
	command -v "$tool" >/dev/null || { echo "changes.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "changes.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
. "$here/lib.sh"
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/changes.XXXXXX")
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
db="shortener_changes_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
pids='' redis_port='' db_made=''
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	[ -z "$db_made" ] || psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	[ -n "${CHANGES_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/16-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .
go build -o "$tmp/propagate" ./benchmarks/propagate
psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
db_made=1
nq=${admin%%\?*}
dburl="${nq%/*}/$db${admin#"$nq"}"

# CPU ticks: lib.sh's ticks_pids (a comma list, summed) and ticks_named.
hz=$(getconf CLK_TCK)
rps() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
nresp() { awk '/requests in/ {print $1}' "$1"; }
bad() { awk '/Non-2xx or 3xx/ {x += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + x}' "$1"; }
header() { # header TITLE PART
	echo "# $1"
	echo "# made by:   benchmarks/changes.sh ${args:-(no flags)} (part $2): -n $rounds -d $dur -e $edits -r $redits; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version'), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
}
# start_app NAME ENV...: an instance of this tree's app on the sitting's
# database and Redis; sets NAME_url, NAME_pid, NAME_log.
start_app() {
	local name=$1 port mport log
	shift
	port=$(freeport) mport=$(freeport)
	log="$tmp/app-$name.log"
	env DATABASE_URL="$dburl" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" \
		REDIS_URL="redis://127.0.0.1:$redis_port/0" REDIS_KEY_PREFIX="changes:" CREATE_RATE=0 "$@" "$tmp/app" 2>"$log" &
	eval "${name}_pid=$! ${name}_url=http://127.0.0.1:$port ${name}_log=$log"
	pids="$pids $!"
	wait_healthy "http://127.0.0.1:$port" "$log"
}
stop_apps() {
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	pids=''
}
# create URL BODY: POST /shorten; prints "code token".
create() {
	curl -fsS -X POST -H 'Content-Type: application/json' -d "$2" "$1/shorten" |
		sed -n 's/.*"code":"\([^"]*\)".*"token":"\([^"]*\)".*/\1 \2/p; s/.*"token":"\([^"]*\)".*"code":"\([^"]*\)".*/\2 \1/p' | head -n 1
}

start_redis "$tmp"
redis_pid=$(redis-cli -p "$redis_port" info server | tr -d '\r' | sed -n 's/^process_id://p')

# ---- warm

if want warm; then
	dir="$tmp/warm"
	mkdir -p "$dir"
	start_app w
	read -r hot _ < <(create "$w_url" '{"url":"https://example.com/warm"}')
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$w_url/$hot")" = 302 ] || { echo "changes.sh: no redirect for $hot" >&2; exit 1; }
	wrk -t2 -c"$conc" -d2s "$w_url/$hot" >/dev/null; wrk -t2 -c"$conc" -d1s "$w_url/healthz" >/dev/null
	for i in $(seq 1 "$rounds"); do
		progress "round $i of $rounds"
		if [ $((i % 2)) = 1 ]; then order="h r"; else order="r h"; fi
		for k in $order; do
			u="$w_url/healthz"; [ "$k" = r ] && u="$w_url/$hot"
			t0=$(ticks_pids "$w_pid")
			/usr/bin/time -f '%U %S' -o "$dir/$i-$k.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency "$u" >"$dir/$i-$k" 2>&1
			t1=$(ticks_pids "$w_pid")
			awk -v r="$(rps "$dir/$i-$k")" -v n="$(nresp "$dir/$i-$k")" -v hz="$hz" -v a=$((t1 - t0)) -v g="$(awk '{print $1 + $2}' "$dir/$i-$k.cpu")" -v b="$(bad "$dir/$i-$k")" \
				'BEGIN { printf "%.0f %.1f %.1f %d\n", r, n ? a * 1e6 / hz / n : 0, n ? g / n * 1e6 : 0, b }' >"$dir/$i-$k.sum"
		done
	done
	{
		header "the warm redirect beside /healthz, links that can change: one instance, one link, every answer from its local cache" warm
		echo "# load:      wrk -t2 -c$conc, ${dur} s per run after 2 s and 1 s of warm-up; rounds alternate (h r, r h); defaults but CREATE_RATE=0"
		echo "# cpu:       the app's user+system CPU over the run (/proc/PID/stat) and wrk's (GNU time), µs per response"
		echo "# bad:       non-2xx/3xx and socket errors, all runs: $(cat "$dir"/*.sum | awk '{n += $4} END {print n + 0}') (302 counts as good: wrk does not count 3xx as errors)"
		echo "#"
		echo "# round healthz redirect redirect/healthz h_app r_app h_wrk r_wrk   (target: redirect/healthz >= 0.90)"
		for i in $(seq 1 "$rounds"); do
			read -r h ha hw _ <"$dir/$i-h.sum"; read -r r ra rw _ <"$dir/$i-r.sum"
			awk -v i="$i" -v h="$h" -v r="$r" -v ha="$ha" -v ra="$ra" -v hw="$hw" -v rw="$rw" 'BEGIN {printf "%d %d %d %.3f %s %s %s %s\n", i, h, r, h ? r / h : 0, ha, ra, hw, rw}'
		done | medians | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do for k in h r; do
			printf '\n===== round %s, %s =====\n' "$i" "$([ $k = h ] && echo /healthz || echo "the redirect of /$hot")"; cat "$dir/$i-$k"
		done; done
	} >"$out/16-warm.txt"
	stop_apps
fi

# ---- edits and redisdown: three instances

three() { # three ENV...: instances a, b, c
	start_app a "$@"; start_app b "$@"; start_app c "$@"
	instances="$a_url,$b_url,$c_url"
}

if want edits; then
	dir="$tmp/edits"
	mkdir -p "$dir"
	three
	read -r hot _ < <(create "$a_url" '{"url":"https://example.com/hot"}')
	read -r code token < <(create "$a_url" '{"url":"https://example.com/propagate/0"}')
	[ -n "$token" ] || { echo "changes.sh: the create's answer has no token" >&2; exit 1; }
	span=$((edits / 10 + 15)) # the edits take edits x 100 ms; the load runs longer
	wpids='' n=0
	for u in "$a_url" "$b_url" "$c_url"; do
		n=$((n + 1))
		echo "GET $u/$hot" | vegeta attack -rate "$rate" -duration "${span}s" -redirects -1 -timeout 5s >"$dir/load$n.bin" 2>"$dir/load$n.err" &
		wpids="$wpids $!"
	done
	sleep 3 # the load under way, and every instance's caches warm
	t0=$(ticks_pids "$a_pid,$b_pid,$c_pid") p0=$(ticks_named postgres) r0=$(ticks_pids "$redis_pid") s0=$(date +%s.%N)
	PROPAGATE_TOKEN=$token "$tmp/propagate" -instances "$instances" -code "$code" -n "$edits" -every 100ms -poll 1ms -timeout 5s -delete >"$dir/probe" 2>&1 ||
		{ echo "changes.sh: propagate failed:" >&2; cat "$dir/probe" >&2; exit 1; }
	t1=$(ticks_pids "$a_pid,$b_pid,$c_pid") p1=$(ticks_named postgres) r1=$(ticks_pids "$redis_pid") s1=$(date +%s.%N)
	for p in $wpids; do wait "$p"; done
	for n in 1 2 3; do vegeta report "$dir/load$n.bin" >"$dir/load$n.txt"; done
	{
		header "an edit, then a delete, on one of three instances under load: how long until every instance answers with it" edits
		echo "# instances: three of this tree on one database and one Redis (the script's own), defaults but CREATE_RATE=0"
		echo "# load:      one vegeta attack per instance at $rate req/s (redirects not followed), asking for another link (a local-cache"
		echo "#            hit), ${span} s, started 3 s before the probe; vegeta report of each:"
		for n in 1 2 3; do grep -E '^(Requests|Latencies|Success|Status Codes)' "$dir/load$n.txt" | sed "s/^/#              $n /"; done
		echo "# cpu:       over the probe's $(awk -v a="$s0" -v b="$s1" 'BEGIN {printf "%.1f", b - a}') s: the three instances $(awk -v t=$((t1 - t0)) -v hz="$hz" -v a="$s0" -v b="$s1" 'BEGIN {printf "%.2f", t / hz / (b - a)}') cores, postgres $(awk -v t=$((p1 - p0)) -v hz="$hz" -v a="$s0" -v b="$s1" 'BEGIN {printf "%.2f", t / hz / (b - a)}'), redis $(awk -v t=$((r1 - r0)) -v hz="$hz" -v a="$s0" -v b="$s1" 'BEGIN {printf "%.2f", t / hz / (b - a)}')"
		echo "# probe:     benchmarks/propagate (its own header follows); target: every instance within 100 ms at p99"
		cat "$dir/probe"
	} >"$out/16-edits.txt"
	stop_apps
fi

if want redisdown; then
	dir="$tmp/redisdown"
	mkdir -p "$dir"
	three LOCAL_CACHE_TTL=5s
	read -r code token < <(create "$a_url" '{"url":"https://example.com/propagate/0"}')
	for u in "$a_url" "$b_url" "$c_url"; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$u/$code")" = 302 ] || { echo "changes.sh: $u does not redirect $code" >&2; exit 1; }
	done
	cached_at=$(date -u '+%H:%M:%S.%N' | cut -c1-12)
	redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	rp=$redis_port redis_port=''
	stopped_at=$(date -u '+%H:%M:%S.%N' | cut -c1-12)
	PROPAGATE_TOKEN=$token "$tmp/propagate" -instances "$instances" -code "$code" -n "$redits" -every 1s -poll 1ms -timeout 15s -delete >"$dir/probe" 2>&1 ||
		{ echo "changes.sh: propagate failed:" >&2; cat "$dir/probe" >&2; exit 1; }
	redis_port=$rp
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --logfile "$tmp/redis2.log" --dir "$tmp"
	{
		header "edits with Redis stopped: no instance hears of another's edit; each local entry's lifetime (LOCAL_CACHE_TTL=5s) bounds how stale it is" redisdown
		echo "# instances: three of this tree on one database and one Redis (the script's own), LOCAL_CACHE_TTL=5s, CREATE_RATE=0; no load"
		echo "# steps:     the link asked of every instance once (each caches it) at $cached_at UTC; Redis stopped (SHUTDOWN NOSAVE) at $stopped_at;"
		echo "#            then the probe: $redits edits at least 1 s apart, then a delete. Expected: the instance that took the edit at once, the"
		echo "#            others within 5 s of caching what they hold (a later entry, cached from Postgres after the first expired,"
		echo "#            lives 5 s again)"
		echo "#            the instances' warnings and errors (sampled), first lines:"
		cat "$a_log" "$b_log" "$c_log" | grep -E 'level=(WARN|ERROR)' | cut -c1-220 | head -n 8 | sed 's/^/#              /' || true
		echo "# probe:     benchmarks/propagate (its own header follows)"
		cat "$dir/probe"
	} >"$out/16-redisdown.txt"
	stop_apps
fi

for f in "$out"/16-*.txt; do
	[ -f "$f" ] || continue
	echo "== $(basename "$f")"
	grep -E '^# (round|median|min-max)|^(instance|inst[0-9]|all) |never converged' "$f" || true
done
if [ "$keep" ]; then echo "Outputs in $out" | sed "s|$repo/||"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
