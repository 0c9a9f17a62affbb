#!/usr/bin/env bash
# metrics.sh: step 09's sitting, in one command. Starts a Redis of its own
# and a fresh Postgres database seeded with sql/seed.sql, builds this tree,
# and measures:
#
#   cost   hey (bench.sh), one hot link, three copies of the app with
#          Postgres, Redis and defaults: metrics as built ("on"), with
#          METRICS_ADDR=off (no instrumentation, "off"), and with
#          ACCESS_LOG=true (a log line per request, to a file, "access");
#          in rounds of short runs, /healthz and the three redirects in
#          alternating order, each round's ratios taken within the round
#          (09-cost.txt, with every run's raw output).
#   stall  three instances behind nginx with Prometheus scraping them each
#          second (deploy/replicas.sh, PROMETHEUS=1), a 30 s warm-up that
#          goes through the Zipf targets about once, then Zipf redirects
#          through nginx at a fixed rate (vload.sh), Redis stalled (SIGSTOP)
#          for 8 s; then the PromQL below asked of Prometheus for every second
#          of the run, and its answers saved beside vegeta's own timeline.
#
#   benchmarks/metrics.sh [-q] [-o DIR] [-p PARTS] [-n RUNS] [-d DURATION] [-r ROWS] [-R RATE]
#
#   -q        quick: 1 round of 1s runs at concurrency 10, 10,000 rows, 200/s, short
#             experiment (for checking the script, not for numbers)
#   -o DIR    where the outputs go, named 09-*.txt (default: a temporary directory)
#   -p PARTS  which parts, comma-separated (default cost,stall)
#   -n, -d    cost: rounds, and each hey run's duration (default 8, 5s; warm-up
#             1s); concurrency 50
#   -r ROWS   links seeded (default 500000)
#   -R RATE   redirects per second in the stall (default 2000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# psql, redis-server, redis-cli, curl, hey, vegeta, nginx and prometheus.
set -euo pipefail

conc=50 rows=500000 rate=2000 out='' parts='cost stall'
rounds=8 rdur=5s xdur=30s wdur=30s stop_at=8 cont_at=16
while getopts qo:p:n:d:r:R: opt; do
	case $opt in
	q) rounds=1 rdur=1s conc=10 rows=10000 rate=200 xdur=8s wdur=2s stop_at=2 cont_at=5 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) rdur=$OPTARG ;; r) rows=$OPTARG ;; R) rate=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
if want stall; then
	for tool in nginx prometheus; do
		command -v "$tool" >/dev/null || { echo "metrics.sh: $tool not found (apt-get install $tool)" >&2; exit 1; }
	done
fi
sitting metrics go psql redis-server redis-cli curl hey vegeta
outputs_dir

go build -o "$tmp/shortener" .
backends "$rows"
distinct=$((rows < 100000 ? rows : 100000))

# start NAME VAR=VALUE...: a fresh copy of the app with those settings, its
# log (and access log, when on) in a file, as a deployment would keep it.
start() {
	name=$1; shift
	port=$(freeport)
	base="http://127.0.0.1:$port"
	env ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$(freeport)" "$@" "$tmp/shortener" 2>"$tmp/$name.log" &
	pid=$!
	wait_healthy "$base" "$tmp/$name.log"
}
stop() { kill "$pid"; wait "$pid" || true; pid=''; }

if want cost; then
	# Three copies of the app at once, each with its settings; only one is
	# loaded at a time. Short runs, in alternating order, round after
	# round: on this shared machine throughput drifts by more than the 5%
	# being looked for, within minutes (step 09's first sitting, with one
	# 50 s block per variant, saw the same build differ by 22%), and drift
	# shared evenly cancels in the ratios of each round.
	start on; pid_on=$pid base_on=$base
	start off METRICS_ADDR=off; pid_off=$pid base_off=$base
	start access ACCESS_LOG=true; pid_access=$pid base_access=$base
	pid=''
	mkdir "$tmp/cost"
	i=1
	while [ "$i" -le "$rounds" ]; do
		if [ $((i % 2)) = 1 ]; then order="healthz on off access"; else order="access off on healthz"; fi
		for v in $order; do
			if [ "$v" = healthz ]; then
				sh "$here/bench.sh" -n 1 -d "$rdur" -c "$conc" -w 1s -p "$pid_on" \
					-l "metrics.sh: round $i, /healthz, defaults (metrics on)" -o "$tmp/cost/$i-healthz.txt" healthz "$base_on"
			else
				eval "p=\$pid_$v b=\$base_$v"
				sh "$here/bench.sh" -n 1 -d "$rdur" -c "$conc" -w 1s -p "$p" -k "$code" \
					-l "metrics.sh: round $i, redirect, one link, $v" -o "$tmp/cost/$i-$v.txt" redirect "$b"
			fi
		done
		i=$((i + 1))
	done
	for v in on off access; do eval "kill \$pid_$v; wait \$pid_$v || true"; done
	lines=$(grep -c 'msg=request ' "$tmp/access.log" || true)
	bytes=$(wc -c <"$tmp/access.log" | tr -d ' ')
	# val FILE: median req/s, server CPU-µs per response
	val() { awk '/^# median req\/s:/ {r = $4} /^#   \[[0-9]+\]/ {n += $3} /^#   server/ {s = $3} END {printf "%.1f %.1f", r, n ? s / n * 1e6 : 0}' "$1"; }
	{
		echo "# cost of the instrumentation: the redirect with metrics on (as built), off (METRICS_ADDR=off), and on with ACCESS_LOG=true"
		echo "# made by:   benchmarks/metrics.sh -p cost; code id $(sh "$here/codeid.sh"), commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/09-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
		echo "# method:    three copies of the app running at once (Postgres, Redis, defaults otherwise; one hot link, so every redirect is a local-cache hit),"
		echo "#            $rounds rounds; in each, one bench.sh run of $rdur at concurrency $conc after a 1 s warm-up against /healthz (of 'on'), on, off and access,"
		echo "#            in that order in odd rounds and the reverse in even ones; each round's ratios are taken within the round. The raw bench.sh outputs follow."
		echo "# app CPU:   the loaded copy's CPU-seconds over its run divided by its responses (µs per request)"
		echo "# access log (the 'access' copy, text, to a file): $lines lines, $bytes bytes, $((lines > 0 ? bytes / lines : 0)) bytes per line"
		echo "#"
		echo "# round  healthz     on    off access  on/off  access/off  on/healthz  cpu_healthz  cpu_on cpu_off cpu_access"
		i=1
		while [ "$i" -le "$rounds" ]; do
			echo "$i $(val "$tmp/cost/$i-healthz.txt") $(val "$tmp/cost/$i-on.txt") $(val "$tmp/cost/$i-off.txt") $(val "$tmp/cost/$i-access.txt")"
			i=$((i + 1))
		done | awk '{
			printf "# %5d %8.0f %6.0f %6.0f %6.0f %7.3f %11.3f %11.3f %12.1f %7.1f %7.1f %10.1f\n", $1, $2, $4, $6, $8, $4 / $6, $8 / $6, $4 / $2, $3, $5, $7, $9
			n++; for (c = 2; c <= 9; c++) col[c, n] = $c; oo[n] = $4 / $6; ao[n] = $8 / $6; oh[n] = $4 / $2
		}
		function med(a, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = a[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
		function lo(a, n,    i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
		function hi(a, n,    i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
		END {
			for (c = 2; c <= 9; c++) { for (i = 1; i <= n; i++) x[i] = col[c, i]; m[c] = med(x, n) }
			printf "# median %8.0f %6.0f %6.0f %6.0f %7.3f %11.3f %11.3f %12.1f %7.1f %7.1f %10.1f\n", m[2], m[4], m[6], m[8], med(oo, n), med(ao, n), med(oh, n), m[3], m[5], m[7], m[9]
			printf "# on/off ratio: median %.3f, min %.3f, max %.3f; access/off: median %.3f, min %.3f, max %.3f\n", med(oo, n), lo(oo, n), hi(oo, n), med(ao, n), lo(ao, n), hi(ao, n)
		}'
		echo "# the last two lines of the access log, as written:"
		# (grep finds nothing in an access log without requests, as $lines
		# allows, which must not end the script under pipefail)
		{ grep 'msg=request ' "$tmp/access.log" || true; } | tail -n 2 | sed 's/^/#   /'
		i=1
		while [ "$i" -le "$rounds" ]; do
			for v in healthz on off access; do
				printf '\n===== round %s, %s =====\n' "$i" "$v"
				cat "$tmp/cost/$i-$v.txt"
			done
			i=$((i + 1))
		done
	} >"$out/09-cost.txt"
fi

if want stall; then
	export NGINX_PORT="$(freeport)" APP_PORT_BASE="$(freeport)" METRICS_PORT_BASE="$(freeport)" PROMETHEUS_PORT="$(freeport)" PROMETHEUS=1
	deploy/replicas.sh up 3 >"$tmp/up.log"; up=1
	prom="http://127.0.0.1:$PROMETHEUS_PORT"
	# Prometheus reads its targets file and starts scraping a few seconds
	# after it is ready: wait until it has scraped all three.
	i=0
	until curl -fsS "$prom/api/v1/query" --data-urlencode 'query=count(up{job="shortener"} == 1)' | grep -q '"3"\]'; do
		i=$((i + 1)); [ "$i" -lt 150 ] || { echo "metrics.sh: Prometheus did not scrape the 3 instances within 30 s" >&2; exit 1; }
		sleep 0.2
	done
	sh "$here/targets.sh" -n "$distinct" "http://127.0.0.1:$NGINX_PORT" >"$tmp/zipf"
	# Closed loop, 50 workers: 30 s covers the 100,000 targets about once
	# here, so that the run after it meets a cache that has seen them.
	sh "$here/vload.sh" -r 0 -w 50 -d "$wdur" -t "$tmp/zipf" -o "$tmp/warm.txt"
	# (The start time goes to a file named by a variable, so that the
	# command vload.sh records holds no path of this machine's.)
	T0FILE="$tmp/t0" sh "$here/vload.sh" -r "$rate" -d "$xdur" -p "$(cat "$REPLICAS_DIR"/app-*.pid | paste -sd, -)" -t "$tmp/zipf" \
		-e '0:date +%s >"$T0FILE"' -e "$stop_at:kill -STOP $redis_pid" -e "$cont_at:kill -CONT $redis_pid" \
		-l "metrics.sh: 3 instances behind nginx, Prometheus scraping each second, Zipf redirects at $rate/s through nginx, caches warm, Redis stalled (SIGSTOP) from $stop_at s to $cont_at s" \
		-o "$out/09-redis-stall-vegeta.txt"
	sleep 4 # the last scrapes
	t0=$(cat "$tmp/t0")
	secs=${xdur%s}
	# q NAME PROMQL: one column, every second of the run.
	q() {
		curl -fsS "$prom/api/v1/query_range" --data-urlencode "query=$2" \
			--data-urlencode "start=$t0" --data-urlencode "end=$((t0 + secs + 2))" --data-urlencode "step=1" >"$tmp/q-$1.json"
		# grep finds nothing when the query has no samples (a series not
		# exported yet): that column shows "-", and the script goes on.
		{ grep -o '\[[0-9.]*,"[^"]*"\]' "$tmp/q-$1.json" || true; } | tr -d '[]"' | awk -F, -v t0="$t0" -v n="$1" \
			'{printf "%s %d %s\n", n, $1 - t0, $2}' >>"$tmp/cols"
	}
	: >"$tmp/cols"
	r='route="GET /{code}"'
	w='[3s]'
	q reqs "sum(rate(shortener_http_requests_total{$r}$w))"
	q p50ms "1000 * histogram_quantile(0.5, sum by (le) (rate(shortener_http_request_duration_seconds_bucket{$r}$w)))"
	q p99ms "1000 * histogram_quantile(0.99, sum by (le) (rate(shortener_http_request_duration_seconds_bucket{$r}$w)))"
	q err "(sum(rate(shortener_http_requests_total{status=~\"5..\"}$w)) or vector(0)) / sum(rate(shortener_http_requests_total$w))"
	q local_hit "sum(rate(shortener_cache_lookups_total{cache=\"local\",result=\"hit\"}$w)) / sum(rate(shortener_cache_lookups_total{cache=\"local\"}$w))"
	q redis_hit "sum(rate(shortener_cache_lookups_total{cache=\"redis\",result=\"hit\"}$w)) / sum(rate(shortener_cache_lookups_total{cache=\"redis\"}$w))"
	q redis_err "sum(rate(shortener_cache_lookups_total{cache=\"redis\",result=\"error\"}$w))"
	q redis_skip "sum(rate(shortener_cache_lookups_total{cache=\"redis\",result=\"skipped\"}$w))"
	q pool_timeouts "sum(rate(shortener_redis_pool_timeouts_total$w))"
	{
		echo "# Prometheus's view of the Redis stall in 09-redis-stall-vegeta.txt, second by second"
		echo "# made by: benchmarks/metrics.sh (part stall); code id $(sh "$here/codeid.sh"), commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/09-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
		echo "# $(prometheus --version 2>&1 | head -n 1); scrape every 1 s (deploy/prometheus.yml); 3 instances; Redis SIGSTOP at ${stop_at} s, SIGCONT at ${cont_at} s of the attack"
		echo "# t = seconds since the attack began (vegeta's event at 0 s wrote the start time, $t0); each value is Prometheus's answer at that instant,"
		echo "# over the 3 s before it (rate(...[3s])), so it trails the event by up to 3 s; NaN = nothing to divide by in that window"
		echo "# queries (r = $r, w = $w):"
		echo "#   reqs          sum(rate(shortener_http_requests_total{r}w))                                    redirects answered per second, all instances"
		echo "#   p50ms, p99ms  1000 * histogram_quantile(0.5 | 0.99, sum by (le) (rate(shortener_http_request_duration_seconds_bucket{r}w)))"
		echo "#   err           (sum(rate(shortener_http_requests_total{status=~\"5..\"}w)) or vector(0)) / sum(rate(shortener_http_requests_total w)): 5xx of all answers"
		echo "#   local_hit     local cache hits / local lookups: sum(rate(shortener_cache_lookups_total{cache=\"local\",result=\"hit\"}w)) / sum(rate(...{cache=\"local\"}w))"
		echo "#   redis_hit     Redis hits / lookups that reached the Redis layer (hit, miss, error, skipped), same shape"
		echo "#   redis_err     Redis lookups that failed (timed out), per second"
		echo "#   redis_skip    Redis lookups skipped because the breaker was open, per second"
		echo "#   pool_timeouts go-redis waits for a free connection that timed out, per second"
		echo "#"
		awk '{v[$2, $1] = $3; t[$2] = 1} END {
			n = split("reqs p50ms p99ms err local_hit redis_hit redis_err redis_skip pool_timeouts", c, " ")
			printf "%4s", "t"; for (i = 1; i <= n; i++) printf " %13s", c[i]; printf "\n"
			for (s = 0; s in t || s < 1; s++) {
				printf "%4d", s
				for (i = 1; i <= n; i++) { x = v[s, c[i]]; if (x == "") x = "-"; else if (x != "NaN") x = sprintf("%.4g", x); printf " %13s", x }
				printf "\n"
			}
		}' "$tmp/cols"
	} >"$out/09-redis-stall-promql.txt"
	deploy/replicas.sh down >/dev/null; up=''
fi

# The headline of each output, since without -o they go when the script ends.
for f in "$out"/09-*.txt; do
	[ -f "$f" ] || continue # no outputs: the glob matched nothing
	case $f in
	# awk 'NR <= 2', not head -n 2: the raw bench.sh outputs in 09-cost.txt
	# match too, and grep killed by SIGPIPE would end the script under
	# pipefail; and 09-redis-stall-promql.txt has no headline for grep.
	*09-cost.txt) head="$(grep -h '^# on/off ratio' "$f" | sed 's/^# *//')
$(grep -hE '^# (round|median) ' "$f" | awk 'NR <= 2' | sed 's/^# /    /')" ;;
	*) head="$({ grep -hE '^# median req/s|^#   Status Codes' "$f" || true; } | sed 's/^# *//' | tr -s ' ' | paste -sd ' ' -)" ;;
	esac
	printf '%-28s %s\n' "$(basename "$f" .txt)" "$head"
done
outputs_note
