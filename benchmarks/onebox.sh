#!/usr/bin/env bash
# onebox.sh: step 11's sitting, in one command: what one 2-core machine
# does at best, and where its CPU goes. Starts a Redis of its own and a
# fresh Postgres database seeded with sql/seed.sql, builds this tree and
# benchmarks/bare (net/http and nothing else), and measures:
#
#   best    hey, in rounds of short runs in alternating order (as step
#           09's cost): bare net/http, the app's /healthz, and the app's
#           redirect of one hot link (a local-cache hit, clicks queued),
#           each round's ratios taken within the round.
#   shares  where the CPU goes, by process, at full load: the redirect
#           (one hot link) and creates, each straight to one instance
#           (hey), and Zipf redirects through nginx to three instances
#           (vegeta, closed loop).
#
#   benchmarks/onebox.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d DURATION]
#
#   -q        quick: 1 round of 1s runs at concurrency 10, 10,000 rows
#   -o DIR    where the outputs go, named 11-*.txt (default: a temporary directory)
#   -p PARTS  which parts, comma-separated (default best,shares)
#   -n, -d    best: rounds, and each hey run's duration (default 8, 5s;
#             warm-up 1s); shares: hey runs of 3 times that; concurrency 50
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). Needs go,
# psql, redis-server, redis-cli, curl, hey, vegeta and nginx.
set -euo pipefail

conc=50 rows=500000 out='' parts='best shares' rounds=8 rdur=5 xdur=15s
while getopts qo:p:n:d: opt; do
	case $opt in
	q) rounds=1 rdur=1 conc=10 rows=10000 xdur=2s ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) rdur=${OPTARG%s} ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
sitting onebox go psql redis-server redis-cli curl hey vegeta nginx
outputs_dir

go build -o "$tmp/shortener" .
go build -o "$tmp/bare" ./benchmarks/bare
backends "$rows"
codeid=$(sh "$here/codeid.sh")
stamp() { echo "# made by:   benchmarks/onebox.sh ($1); code id $codeid, commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/11-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"; }

# The app, defaults but a create limit that never refuses (hey is one
# client), and bare net/http.
port=$(freeport)
env ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$(freeport)" CREATE_RATE=1000000 CREATE_BURST=1000000 \
	"$tmp/shortener" 2>"$tmp/app.log" &
app=$!
pids="$pids $app"
base="http://127.0.0.1:$port"
wait_healthy "$base" "$tmp/app.log"
bport=$(freeport)
"$tmp/bare" -addr "127.0.0.1:$bport" &
bare=$!
pids="$pids $bare"
i=0
until curl -fs -o /dev/null "http://127.0.0.1:$bport/"; do
	i=$((i + 1)); [ "$i" -lt 100 ] || { echo "onebox.sh: bare did not answer" >&2; exit 1; }
	sleep 0.1
done

if want best; then
	mkdir "$tmp/b"
	i=1
	while [ "$i" -le "$rounds" ]; do
		if [ $((i % 2)) = 1 ]; then order="bare healthz redirect"; else order="redirect healthz bare"; fi
		for v in $order; do
			case $v in
			bare) sh "$here/bench.sh" -n 1 -d "${rdur}s" -c "$conc" -w 1s -p "$bare" \
				-l "onebox.sh: round $i, bare net/http (benchmarks/bare)" -o "$tmp/b/$i-bare.txt" healthz "http://127.0.0.1:$bport" ;;
			healthz) sh "$here/bench.sh" -n 1 -d "${rdur}s" -c "$conc" -w 1s -p "$app" \
				-l "onebox.sh: round $i, the app's /healthz" -o "$tmp/b/$i-healthz.txt" healthz "$base" ;;
			redirect) sh "$here/bench.sh" -n 1 -d "${rdur}s" -c "$conc" -w 1s -p "$app" -k "$code" \
				-l "onebox.sh: round $i, the app's redirect, one hot link" -o "$tmp/b/$i-redirect.txt" redirect "$base" ;;
			esac
		done
		i=$((i + 1))
	done
	# val FILE: median req/s, server CPU-us per response, hey CPU-us per response
	val() { awk '/^# median req\/s:/ {r = $4} /^#   \[[0-9]+\]/ {n += $3} /^#   server/ {s = $3} /^#   hey/ {h = $3} END {printf "%.1f %.1f %.1f", r, n ? s / n * 1e6 : 0, n ? h / n * 1e6 : 0}' "$1"; }
	{
		echo "# the best this machine does: bare net/http, the app's /healthz, the app's redirect (one hot link: a local-cache hit)"
		stamp "part best"
		echo "# method:    the app (Postgres, Redis, defaults, CREATE_RATE=1000000) and benchmarks/bare running at once; $rounds rounds; in each, one"
		echo "#            bench.sh run of ${rdur}s at concurrency $conc after a 1 s warm-up for each, in alternating order; ratios within each round"
		echo "# server CPU: the loaded process's CPU-seconds over its run / its responses (µs per request); hey's likewise"
		echo "#"
		echo "# round    bare  healthz redirect  healthz/bare  redirect/bare  redirect/healthz  cpu_bare cpu_healthz cpu_redirect  hey_bare hey_healthz hey_redirect"
		i=1
		while [ "$i" -le "$rounds" ]; do
			echo "$i $(val "$tmp/b/$i-bare.txt") $(val "$tmp/b/$i-healthz.txt") $(val "$tmp/b/$i-redirect.txt")"
			i=$((i + 1))
		done | awk '
		function med(x, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = x[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
		{
			printf "# %5d %7.0f %8.0f %8.0f %13.3f %14.3f %17.3f %9.1f %11.1f %12.1f %9.1f %11.1f %12.1f\n", $1, $2, $5, $8, $5 / $2, $8 / $2, $8 / $5, $3, $6, $9, $4, $7, $10
			n++; for (c = 2; c <= 10; c++) v[c, n] = $c; a[n] = $5 / $2; b[n] = $8 / $2; d[n] = $8 / $5
		}
		END {
			for (c = 2; c <= 10; c++) { for (i = 1; i <= n; i++) x[i] = v[c, i]; m[c] = med(x, n) }
			printf "# median %7.0f %8.0f %8.0f %13.3f %14.3f %17.3f %9.1f %11.1f %12.1f %9.1f %11.1f %12.1f\n", m[2], m[5], m[8], med(a, n), med(b, n), med(d, n), m[3], m[6], m[9], m[4], m[7], m[10]
		}'
		i=1
		while [ "$i" -le "$rounds" ]; do
			for v in bare healthz redirect; do
				printf '\n===== round %s, %s =====\n' "$i" "$v"
				cat "$tmp/b/$i-$v.txt"
			done
			i=$((i + 1))
		done
	} >"$out/11-best.txt"
fi

if want shares; then
	long=$((rdur * 3))s
	sh "$here/bench.sh" -n 1 -d "$long" -c "$conc" -w 1s -p "$app" -k "$code" \
		-l "onebox.sh: CPU shares, the redirect of one hot link, straight to one instance" -o "$out/11-shares-redirect.txt" redirect "$base"
	sh "$here/bench.sh" -n 1 -d "$long" -c "$conc" -w 1s -p "$app" \
		-l "onebox.sh: CPU shares, creates, straight to one instance (CREATE_RATE=1000000)" -o "$out/11-shares-create.txt" create "$base"
	for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	pids=''
	export NGINX_PORT="$(freeport)" APP_PORT_BASE="$(freeport)" METRICS_PORT_BASE="$(freeport)"
	deploy/replicas.sh up 3 >"$tmp/up.log"; up=1
	redis-cli -p "$redis_port" flushall >/dev/null
	mem0=$(redis-cli -p "$redis_port" info memory | tr -d '\r' | sed -n 's/^used_memory://p')
	sh "$here/targets.sh" -n "$((rows < 100000 ? rows : 100000))" "http://127.0.0.1:$NGINX_PORT" >"$tmp/zipf"
	sh "$here/vload.sh" -r 0 -w 50 -d 10s -t "$tmp/zipf" -o "$tmp/warm.txt"
	sh "$here/vload.sh" -r 0 -w "$conc" -d "$long" -p "$(cat "$REPLICAS_DIR"/app-*.pid | paste -sd, -)" -t "$tmp/zipf" \
		-l "onebox.sh: CPU shares, Zipf redirects through nginx to 3 instances, closed loop, $conc workers, caches warm" \
		-o "$out/11-shares-nginx.txt"
	# What a cached link costs Redis: memory over the keys the warm caches
	# filled (cache keys only: nothing else writes to this Redis here).
	mem1=$(redis-cli -p "$redis_port" info memory | tr -d '\r' | sed -n 's/^used_memory://p')
	keys=$(redis-cli -p "$redis_port" dbsize)
	{
		echo "# Redis memory per cached link, after the Zipf runs through nginx filled the cache"
		stamp "part shares"
		echo "# used_memory before (after FLUSHALL): $mem0 bytes; after: $mem1 bytes; keys: $keys"
		echo "# bytes per key: $(( (mem1 - mem0) / (keys > 0 ? keys : 1) )) (key: link: and a 7-character code; value: a seeded URL, https://example.com/seed/N, 26 to 31 bytes; a TTL on each; $(redis-server --version | cut -d' ' -f3))"
	} >"$out/11-redis-memory.txt"
	deploy/replicas.sh down >/dev/null; up=''
fi

for f in "$out"/11-*.txt; do
	[ -f "$f" ] || continue # no outputs: the glob matched nothing
	case $f in
	# awk 'NR <= 2', not head -n 2: the raw bench.sh outputs in 11-best.txt
	# match too, and grep killed by SIGPIPE would end the script under
	# pipefail; and 11-redis-memory.txt has no headline for grep.
	*11-best.txt) head="ratios within each round, and their medians (as docs/11 quotes them):
$(grep -hE '^# (round|median) ' "$f" | awk 'NR <= 2' | sed 's/^# /    /')" ;;
	*) head="$({ grep -hE '^# median req/s|^#   Requests' "$f" || true; } | sed 's/^# *//' | tr -s ' ' | paste -sd ' ' -)" ;;
	esac
	printf '%-24s %s\n' "$(basename "$f" .txt)" "$head"
done
outputs_note
