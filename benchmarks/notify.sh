#!/usr/bin/env bash
# notify.sh: step 30's sitting. What the trigger on links (sql/schema.sql:
# links_announce, a pg_notify once per statement that adds links) costs.
#
#   creates  one instance (this tree) on a database of its own seeded with
#            LINKS links, a Redis of its own, the rate limit on and never
#            refusing (CREATE_RATE=1000000). Rounds of wrk -t2 -c50:
#            /healthz (h), creates with the trigger (on), creates with it
#            dropped (off), in an order that turns each round. Before each
#            run the trigger is created or dropped, and pg_trigger is read
#            back into the output (the off arm is checked off), with the
#            notifications the instance counted during the run.
#   copy     COPY of ROWS links (psql, FROM STDIN) into the same database,
#            with the trigger and without, alternating: seconds per COPY.
#            The trigger's transition table holds every row of the
#            statement, so a bulk load is where it costs most.
#
#   benchmarks/notify.sh [-q] [-o DIR] [-n ROUNDS] [-d SECONDS] [-l LINKS] [-r ROWS]
#
#   -q        quick: 1 round of 1 s, 2,000 links, 20,000 rows
#   -o DIR    where the output goes: 30-notify.txt (default: a temporary
#             directory, removed at the end)
#   -n, -d    rounds (default 5) and seconds per run (default 10)
#   -l LINKS  links seeded (default 100,000)
#   -r ROWS   rows per COPY (default 500,000)
#
# Environment: ADMIN_DATABASE_URL, as eval "$(deploy/services.sh up)"
# exports it (unset: the system's Postgres, as lib.sh says). About 5
# minutes with the defaults. Needs go, psql, redis-server, redis-cli,
# curl, wrk and /usr/bin/time (GNU time).
set -euo pipefail

conc=50 out='' parts='' rounds=5 dur=10 links=100000 rows=500000
args="$*"
while getopts qo:n:d:l:r: opt; do
	case $opt in
	q) rounds=1 dur=1 links=2000 rows=20000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; l) links=$OPTARG ;; r) rows=$OPTARG ;;
	*) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "l $links" "r $rows"; do
	case ${v#* } in '' | *[!0-9]* | 0) echo "notify.sh: -${v%% *} wants a whole number above 0" >&2; exit 2 ;; esac
done
. "$(dirname "$0")/lib.sh"
sitting notify go psql redis-server redis-cli curl wrk
[ -x /usr/bin/time ] || { echo "notify.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
outputs_dir

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/30-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .
go build -o "$tmp/zipf" ./benchmarks/zipf
hz=$(getconf CLK_TCK)

seeded_db "$admin" "$links"
start_redis "$tmp"
port=$(freeport) mport=$(freeport)
env DATABASE_URL="$dburl" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" REDIS_URL="redis://127.0.0.1:$redis_port/0" \
	CREATE_RATE=1000000 CREATE_BURST=1000000 "$tmp/app" 2>"$tmp/app.log" &
pid=$!
base="http://127.0.0.1:$port"
wait_healthy "$base" "$tmp/app.log"
i=0
until curl -fs "http://127.0.0.1:$mport/metrics" | grep -q '^shortener_bloom_trusted 1'; do
	i=$((i + 1)); [ "$i" -lt 300 ] || { echo "the filter was not trusted within 30 s; the log:" >&2; cat "$tmp/app.log" >&2; exit 1; }
	sleep 0.1
done

trigger() { # trigger on|off
	if [ "$1" = on ]; then
		psql "$dburl" -qc 'CREATE OR REPLACE TRIGGER links_announce AFTER INSERT ON links REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION links_announce()'
	else
		psql "$dburl" -qc 'DROP TRIGGER IF EXISTS links_announce ON links'
	fi
	psql "$dburl" -Atc "SELECT count(*) FROM pg_trigger WHERE tgname = 'links_announce'"
}
notified() { curl -fs "http://127.0.0.1:$mport/metrics" | awk '/^shortener_link_notifications_total\{kind="(codes|all)"\}/ {s += $2} END {print s + 0}'; }

# run KEY FILE: one wrk run; h = /healthz, on and off = creates.
# FILE.sum: req/s, ok, errors, app µs, pg µs, redis µs per ok response,
# p50, p99 ms, triggers present, notifications counted.
run() {
	local k=$1 f=$2 tr=- n0 n1 t0 t1 p0 p1 r0 r1 rpid
	rpid=$(redis-cli -p "$redis_port" info server | tr -d '\r' | sed -n 's/^process_id://p')
	case $k in on | off) tr=$(trigger "$k") ;; esac
	n0=$(notified) t0=$(ticks_pids "$pid") p0=$(ticks_named postgres) r0=$(ticks_pids "$rpid")
	if [ "$k" = h ]; then
		wrk -t2 -c"$conc" -d"${dur}s" --latency "$base/healthz" >"$f" 2>&1
	else
		wrk -t2 -c"$conc" -d"${dur}s" --latency -s "$here/create.lua" "$base/shorten" >"$f" 2>&1
	fi
	t1=$(ticks_pids "$pid") p1=$(ticks_named postgres) r1=$(ticks_pids "$rpid") n1=$(notified)
	awk -v hz="$hz" -v a=$((t1 - t0)) -v p=$((p1 - p0)) -v r=$((r1 - r0)) -v tr="$tr" -v nn=$((n1 - n0)) '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; return v * 1000 }
		/^Requests\/sec:/ {rps = $2} / requests in / {all = $1}
		/Non-2xx or 3xx/ {bad += $NF} /Socket errors/ {gsub(",", ""); bad += $4 + $6 + $8 + $10}
		/^ +50%/ {p50 = ms($2)} /^ +99%/ {p99 = ms($2)}
		END {ok = all - bad; n = ok > 0 ? ok : 1; printf "%.0f %d %d %.1f %.1f %.1f %.2f %.2f %s %d\n", rps, ok, bad, a * 1e6 / hz / n, p * 1e6 / hz / n, r * 1e6 / hz / n, p50, p99, tr, nn}' "$f" >"$f.sum"
}

dir="$tmp/creates"
mkdir -p "$dir"
for k in h on off; do run "$k" "$dir/warm-$k"; done
keys="h on off"
for i in $(seq 1 "$rounds"); do
	for k in $keys; do run "$k" "$dir/$i-$k"; done
	keys="${keys#* } ${keys%% *}"
done

# copy: ROWS new links per COPY, trigger on and off alternating.
"$tmp/zipf" -seed-copy "$rows" | sed 's/^/c/' >"$tmp/rows.tsv"
copy() { # copy on|off ROUND: seconds of one COPY of rows.tsv, with fresh codes
	local tr s e
	tr=$(trigger "$1")
	sed "s/^c/$1$2/" "$tmp/rows.tsv" >"$tmp/rows-now.tsv"
	s=$(date +%s.%N)
	psql "$dburl" -q -v ON_ERROR_STOP=1 -c "\\copy links (code, url) FROM '$tmp/rows-now.tsv'"
	e=$(date +%s.%N)
	echo "$tr $(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.3f", e - s}')"
}
copies=''
for i in $(seq 1 "$rounds"); do
	if [ $((i % 2)) = 1 ]; then a=$(copy on "$i") b=$(copy off "$i"); else b=$(copy off "$i") a=$(copy on "$i"); fi
	copies="$copies$i ${a#* } ${b#* } ${a%% *} ${b%% *}
"
done
trigger on >/dev/null

f="$out/30-notify.txt"
{
	echo "# what the trigger on links costs: creates with it and without, and a COPY with it and without; one sitting, interleaved rounds"
	echo "# made by:   benchmarks/notify.sh ${args:-(no flags)}: -n $rounds -d $dur -l $links -r $rows; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version') (synchronous_commit $(psql "$admin" -Atc 'show synchronous_commit')), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
	echo "# load:      wrk -t2 -c$conc -d${dur}s; creates: -s benchmarks/create.lua; one warm-up run of each first; the order turns each round (h on off, on off h, ...)"
	echo "# app:       one instance, database seeded with $links links, Redis of its own, CREATE_RATE=1000000 CREATE_BURST=1000000"
	echo "# arms:      h = /healthz; on = creates with the trigger; off = creates with it dropped (DROP TRIGGER before the run, CREATE after)"
	echo "# check:     trig = rows in pg_trigger named links_announce, read just before the run; notes = notifications the instance counted in the run"
	echo "# cpu:       µs per 2xx of the app (/proc/PID/stat), all postgres processes, the Redis"
	echo "# errors:    non-2xx and socket errors, all runs: $(cat "$dir"/*.sum | awk '{n += $3} END {print n + 0}')"
	echo "#"
	echo "# round healthz on off  on/h off/h on/off  app_on app_off  pg_on pg_off  p99_on p99_off  trig_on trig_off  notes_on notes_off"
	for i in $(seq 1 "$rounds"); do
		read -r h _ _ _ _ _ _ _ _ _ <"$dir/$i-h.sum"
		read -r a _ _ aa ap _ _ a99 atr an <"$dir/$i-on.sum"
		read -r b _ _ ba bp _ _ b99 btr bn <"$dir/$i-off.sum"
		awk -v i="$i" -v h="$h" -v a="$a" -v b="$b" 'BEGIN {printf "%d %d %d %d %.3f %.3f %.3f", i, h, a, b, a / h, b / h, a / b}'
		echo " $aa $ba $ap $bp $a99 $b99 $atr $btr $an $bn"
	done | medians | sed 's/^/# /'
	echo "#"
	echo "# copy of $rows rows (psql \\copy), seconds: round on off  on/off  trig_on trig_off"
	printf '%s' "$copies" | awk '{printf "%d %s %s %.3f %s %s\n", $1, $2, $3, $2 / $3, $4, $5}' | medians | sed 's/^/# /'
	echo "#"
	for k in h on off; do
		echo "# ---- round 1, $k: wrk's output"
		sed 's/^/# /' "$dir/1-$k"
	done
} >"$f"
cat "$f" | sed -n '1,40p'
outputs_note
