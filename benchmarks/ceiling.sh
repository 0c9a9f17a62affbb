#!/usr/bin/env bash
# ceiling.sh: step 12's sitting, and step 21's (-t 21 -s 20 -p best). Which
# load generator is the ceiling on this machine, what the headline ratios
# of earlier steps read with a generator that is not, and where nginx's CPU
# goes beside the app's in one run.
#
#   gens   benchmarks/bare (net/http and nothing else) loaded by hey, vegeta
#          and wrk in turn, rounds in alternating order: each generator's
#          req/s and the CPU per request of the generator and of the server.
#   best   rounds of wrk and hey, alternating, over: bare; bare with the
#          app's server timeouts (-timeouts); bare answering a redirect as
#          the app does (-timeouts -redirect); and for the commits of the
#          steps of -s and this tree: the app's /healthz and its redirect of one
#          hot link (a local-cache hit, clicks queued, metrics on). Each
#          round's ratios are taken within the round.
#   nginx  three instances of this tree behind nginx (deploy/replicas.sh),
#          one hot link, caches warm: wrk through nginx, and the CPU of
#          nginx, the instances, Postgres, Redis and wrk in that same run.
#
#   benchmarks/ceiling.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS]
#                         [-t STEP] [-s STEPS]
#
#   -q        quick: 1 round of 1 s runs at concurrency 10
#   -o DIR    where the outputs go, named NN-*.txt, NN the -t (default: a
#             temporary directory, removed at the end: give -o to keep them)
#   -t STEP   the step this tree is, which names the outputs (default 12)
#   -s STEPS  comma-separated earlier steps that best builds from their
#             commits, two digits each, not the -t step (default 08,11)
#   -p PARTS  comma-separated (default gens,best,nginx)
#   -n, -d    rounds (default 5) and seconds per run (default 5; each run
#             after a 1 s warm-up); concurrency 50, wrk with 2 threads
#
# Takes about 12 minutes with the defaults, 1 with -q. Environment:
# ADMIN_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
# Needs go, git, psql, redis-server, redis-cli, curl, hey, vegeta, wrk, nginx
# and /usr/bin/time (GNU time, Debian package time).
set -euo pipefail

conc=50 out='' parts='gens best nginx' rounds=5 dur=5 rows=10000 tree=12 steps='08 11'
while getopts qo:p:n:d:t:s: opt; do
	case $opt in
	q) rounds=1 dur=1 conc=10 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	t) tree=$OPTARG ;; s) steps=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
repo=$(git rev-parse --show-toplevel)
cd "$repo"
here=benchmarks
for tool in go git psql redis-server redis-cli curl hey vegeta wrk nginx; do
	command -v "$tool" >/dev/null || { echo "ceiling.sh: $tool not found (see benchmarks/README.md)" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "ceiling.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
. "$here/lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ceiling.XXXXXX")
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
dbs='' pids='' redis_port='' up=''
export REPLICAS_DIR="$tmp/replicas"
cleanup() {
	[ -z "$up" ] || deploy/replicas.sh down >/dev/null 2>&1 || true
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	for d in $dbs; do psql "$admin" -qc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
	[ -n "${CEILING_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/[0-9][0-9]-*' || echo ' (dirty tree)')"
header() { # header TITLE PART
	echo "# $1"
	echo "# made by:   benchmarks/ceiling.sh -n $rounds -d $dur${tree:+ -t $tree} -s $(echo $steps | tr ' ' ,) (part $2); code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version'), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), hey $(go version -m "$(command -v hey)" | awk '$1 == "mod" {print $3}'), vegeta $(go version -m "$(command -v vegeta)" | awk '$1 == "mod" {print $3}'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
	echo "# load:      concurrency $conc (wrk: 2 threads, $conc connections; vegeta: -rate 0, $conc workers), ${dur} s per run after a 1 s warm-up, all on this machine"
	echo "# cpu:       each process's user+system CPU over the measured run (/proc/PID/stat; the generator's from GNU time), in µs per response"
}

# CPU ticks: lib.sh's ticks_pids PIDS (comma- or space-separated, summed; one
# that has ended stops the script) and ticks_named NAME (every process so
# named, with children reaped: Postgres backends).
hz=$(getconf CLK_TCK)

# rps GEN FILE, n GEN FILE: throughput and responses, from the generator's own words.
rps() {
	case $1 in
	hey) awk '/Requests\/sec:/ {print $2}' "$2" ;;
	wrk) awk '/^Requests\/sec:/ {print $2}' "$2" ;;
	vegeta) awk '/^Requests/ {gsub(",", ""); print $(NF - 1)}' "$2" ;;
	esac
}
nresp() {
	case $1 in
	hey) awk '/^Status code distribution:/ {s = 1; next} /^$/ {s = 0} s && /responses/ {n += $2} END {print n + 0}' "$2" ;;
	wrk) awk '/requests in/ {print $1}' "$2" ;;
	vegeta) awk '/^Requests/ {gsub(",", ""); print $(NF - 2)}' "$2" ;;
	esac
}
# bad GEN FILE: responses that were not what was asked (errors, 4xx/5xx).
bad() {
	case $1 in
	hey) awk '/^Status code distribution:/ {s = 1; next} /^$/ {s = 0} s && /responses/ && $1 !~ /^\[(200|302)\]/ {n += $2} /^Error distribution:/ {e = 1; next} e && /^  \[/ {gsub(/[][]/, "", $1); n += $1} END {print n + 0}' "$2" ;;
	wrk) awk '/Non-2xx or 3xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$2" ;;
	vegeta) awk '/^Status Codes/ {for (i = 4; i <= NF; i++) {split($i, a, ":"); if (a[1] != 200 && a[1] != 302) n += a[2]}} END {print n + 0}' "$2" ;;
	esac
}
# measure GEN URL PIDS FILE: one measured run; prints "rps server_us gen_us bad".
measure() {
	local gen=$1 url=$2 pids=$3 f=$4 t0 t1
	t0=$(ticks_pids "$pids")
	load_once "$gen" "$url" "$f"
	t1=$(ticks_pids "$pids")
	awk -v r="$(rps "$gen" "$f")" -v n="$(nresp "$gen" "$f")" -v s=$((t1 - t0)) -v hz="$hz" -v g="$(awk '{print $1 + $2}' "$f.cpu")" -v b="$(bad "$gen" "$f")" \
		'BEGIN {printf "%.0f %.1f %.1f %d\n", r, n ? s / hz / n * 1e6 : 0, n ? g / n * 1e6 : 0, b}'
}
# load_once GEN URL FILE: one run of $dur s of GEN (hey, wrk or vegeta) at
# $conc; the raw output goes to FILE, the generator's CPU (user and system
# seconds, from GNU time) to FILE.cpu.
load_once() {
	local gen=$1 url=$2 f=$3
	case $gen in
	hey) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" -disable-redirects "$url" >"$f" 2>&1 ;;
	wrk) /usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency "$url" >"$f" 2>&1 ;;
	vegeta) echo "GET $url" | /usr/bin/time -f '%U %S' -o "$f.cpu" vegeta attack -rate 0 -max-workers "$conc" -workers "$conc" \
		-redirects -1 -duration "${dur}s" 2>/dev/null | vegeta report >"$f" 2>&1 ;;
	esac
}
warmup() { local d=$dur; dur=1; load_once "$@"; dur=$d; } # 1 s, discarded

# Medians over rounds: rows of "round v1 v2 ..." on stdin; prints one
# "median" row and a "min-max" row.
medians() {
	awk 'function med(x, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = x[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
	{ print; n++; for (c = 2; c <= NF; c++) { v[c, n] = $c; if (n == 1 || $c < lo[c]) lo[c] = $c; if (n == 1 || $c > hi[c]) hi[c] = $c }; nf = NF }
	END {
		printf "median"; for (c = 2; c <= nf; c++) { for (i = 1; i <= n; i++) x[i] = v[c, i]; printf " %s", med(x, n) }; printf "\n"
		printf "min-max"; for (c = 2; c <= nf; c++) printf " %s-%s", lo[c], hi[c]; printf "\n"
	}'
}

go build -o "$tmp/bare" ./benchmarks/bare
start_bare() { # start_bare NAME ARGS...: sets bare_url, bare_pid
	local port
	port=$(freeport)
	"$tmp/bare" -addr "127.0.0.1:$port" "${@:2}" &
	bare_pid=$!
	pids="$pids $bare_pid"
	bare_url="http://127.0.0.1:$port/"
	local i=0
	until curl -fs -o /dev/null "$bare_url"; do
		i=$((i + 1)); [ "$i" -lt 100 ] || { echo "ceiling.sh: bare ($1) did not answer" >&2; exit 1; }
		sleep 0.1
	done
}

if want gens; then
	start_bare plain
	mkdir -p "$tmp/g"
	for i in $(seq 1 "$rounds"); do
		progress "generators, round $i of $rounds"
		if [ $((i % 2)) = 1 ]; then order="hey vegeta wrk"; else order="wrk vegeta hey"; fi
		row="$i"
		for g in $order; do warmup "$g" "$bare_url" "$tmp/g/w"; echo "$g $(measure "$g" "$bare_url" "$bare_pid" "$tmp/g/$i-$g")" >"$tmp/g/$i-$g.sum"; done
		for g in hey vegeta wrk; do row="$row $(cut -d' ' -f2- "$tmp/g/$i-$g.sum")"; done
		echo "$row" >>"$tmp/g/rows"
	done
	{
		header "load generators' ceiling: benchmarks/bare (net/http, one handler answering ok) loaded by hey, vegeta and wrk" gens
		echo "# columns:   for each generator, hey then vegeta then wrk: req/s, server CPU µs per response, generator CPU µs per response, bad responses"
		echo "#"
		echo "# round  hey: req/s srv_us gen_us bad  vegeta: req/s srv_us gen_us bad  wrk: req/s srv_us gen_us bad"
		medians <"$tmp/g/rows" | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do for g in hey vegeta wrk; do
			printf '\n===== round %s, %s =====\n' "$i" "$g"; cat "$tmp/g/$i-$g"
		done; done
	} >"$out/$tree-generators.txt"
	kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true
fi

if want best || want nginx; then
	start_redis "$tmp"
	export REDIS_URL="redis://127.0.0.1:$redis_port/0"
fi

# start_app NAME BINARY: a seeded database of its own and the app on a free
# port, Redis shared (each step's own key prefix); sets app_url, app_pid, app_code.
start_app() {
	local name=$1 bin=$2 port
	db="shortener_ceiling_${name}_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
	dbs="$dbs $db"
	seeded_db "$admin" "$rows"
	port=$(freeport)
	env DATABASE_URL="$dburl" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$(freeport)" \
		REDIS_KEY_PREFIX="ceiling-$name:" CREATE_RATE=1000000 CREATE_BURST=1000000 "$bin" 2>"$tmp/app-$name.log" &
	app_pid=$!
	pids="$pids $app_pid"
	app_url="http://127.0.0.1:$port"
	app_code=$code
	wait_healthy "$app_url" "$tmp/app-$name.log"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$app_url/$app_code")" = 302 ] || { echo "ceiling.sh: $name does not redirect $app_code" >&2; exit 1; }
}

if want best; then
	mkdir -p "$tmp/b" "$tmp/src"
	start_bare plain; b0_url=$bare_url b0_pid=$bare_pid
	start_bare timeouts -timeouts; b1_url=$bare_url b1_pid=$bare_pid
	start_bare redirect -timeouts -redirect; b2_url=$bare_url b2_pid=$bare_pid
	declare -A url pid
	url[bare]=$b0_url pid[bare]=$b0_pid url[bareT]=$b1_url pid[bareT]=$b1_pid url[bareR]=$b2_url pid[bareR]=$b2_pid
	names='' built=''
	for s in $steps $tree; do
		if [ "$s" = "$tree" ]; then
			go build -o "$tmp/app$s" .
			built="$built, $s: this tree"
		else
			mkdir -p "$tmp/src/$s"
			git archive "$(git rev-parse ":/^Step $s:")" | tar -x -C "$tmp/src/$s"
			(cd "$tmp/src/$s" && go build -o "$tmp/app$s" .)
			built="$built, step $s: $(git rev-parse --short=12 ":/^Step $s:")"
		fi
		start_app "$s" "$tmp/app$s"
		url[h$s]="$app_url/healthz" pid[h$s]=$app_pid
		url[r$s]="$app_url/$app_code" pid[r$s]=$app_pid
		names="$names h$s r$s"
	done
	all="bare bareT bareR$names"
	# column N TITLE: field N of every run's summary, a row per round, with
	# the medians, for generator $g.
	column() {
		echo "# $2"
		echo "# round $all"
		for i in $(seq 1 "$rounds"); do
			row=$i; for v in $all; do row="$row $(cut -d' ' -f"$1" "$tmp/b/$i-$g-$v.sum")"; done; echo "$row"
		done | medians | sed 's/^/# /'
	}
	for i in $(seq 1 "$rounds"); do
		for g in wrk hey; do
			list=$all
			[ $((i % 2)) = 1 ] || list=$(echo "$all" | tr ' ' '\n' | tac | tr '\n' ' ')
			for v in $list; do
				warmup "$g" "${url[$v]}" "$tmp/b/w"
				echo "$(measure "$g" "${url[$v]}" "${pid[$v]}" "$tmp/b/$i-$g-$v")" >"$tmp/b/$i-$g-$v.sum"
			done
		done
	done
	# The ratios' header: each to bare; bareR (a redirect and nothing
	# else) to bareT, which it differs from only in its answer; and each
	# redirect to bareR and to its own /healthz.
	ratio_names="bareT/bare bareR/bare bareR/bareT"
	for s in $steps $tree; do ratio_names="$ratio_names h$s/bare r$s/bare r$s/bareR r$s/h$s"; done
	for g in wrk hey; do
		{
			header "the best this machine does, measured with $g: bare net/http (answering 200, and a 302 as the app does), bare with the app's timeouts, and$(for s in $steps; do printf ' step %s,' "$s"; done) and this tree's /healthz and redirect of one hot link" best
			echo "# the apps:  each step's commit built as it is (${built#, }), a database of $rows seeded links each,"
			echo "#            one Redis (a key prefix each), defaults but CREATE_RATE=1000000; all running at once, loaded one at a time"
			echo "# order:     within a round, in the order of the columns, reversed in even rounds; wrk's round and hey's alternate"
			echo "# bareT:     benchmarks/bare -timeouts: the same handler with the app's ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout"
			echo "# bareR:     benchmarks/bare -timeouts -redirect: 302 with a Location header, no body, as the app answers a redirect"
			echo "#"
			column 1 "A. req/s"
			echo "#"
			echo "# B. ratios within each round: each to bare; bareR to bareT; each redirect to bareR and to its own /healthz"
			echo "# round $ratio_names"
			for i in $(seq 1 "$rounds"); do
				row=$i
				for v in $all; do row="$row $v=$(cut -d' ' -f1 "$tmp/b/$i-$g-$v.sum")"; done
				echo "$row" | awk -v names="$ratio_names" '{
					for (f = 2; f <= NF; f++) { split($f, kv, "="); val[kv[1]] = kv[2] }
					n = split(names, r, " "); printf "%d", $1
					for (k = 1; k <= n; k++) { split(r[k], ab, "/"); printf " %.3f", val[ab[1]] / val[ab[2]] }
					printf "\n" }'
			done | medians | sed 's/^/# /'
			echo "#"
			column 2 "C. server CPU µs per response"
			echo "#"
			column 3 "D. $g's CPU µs per response"
			echo "#"
			echo "# E. bad responses (not 200/302, or errors), all rounds: $(cat "$tmp"/b/*-"$g"-*.sum | awk '{n += $4} END {print n + 0}')"
			for i in $(seq 1 "$rounds"); do for v in $all; do
				printf '\n===== round %s, %s, %s =====\n' "$i" "$v" "${url[$v]}"; cat "$tmp/b/$i-$g-$v"
			done; done
		} >"$out/$tree-best-$g.txt"
	done
	for v in $names; do kill "${pid[$v]}" 2>/dev/null || true; wait "${pid[$v]}" 2>/dev/null || true; done
	kill "$b0_pid" "$b1_pid" "$b2_pid" 2>/dev/null || true; wait "$b0_pid" "$b1_pid" "$b2_pid" 2>/dev/null || true
fi

if want nginx; then
	mkdir -p "$tmp/n"
	db="shortener_ceiling_nginx_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
	dbs="$dbs $db"
	seeded_db "$admin" "$rows"
	export DATABASE_URL="$dburl" CREATE_RATE=1000000 CREATE_BURST=1000000
	export NGINX_PORT="$(freeport)" APP_PORT_BASE="$(freeport)" METRICS_PORT_BASE="$(freeport)"
	deploy/replicas.sh up 3 >"$tmp/up.log"; up=1
	apps=$(cat "$REPLICAS_DIR"/app-*.pid | paste -sd, -)
	master=$(cat "$REPLICAS_DIR/nginx/nginx.pid")
	ngx=$(pgrep -d, -P "$master" || true)
	ngx="$master${ngx:+,$ngx}"
	nurl="http://127.0.0.1:$NGINX_PORT/$code"
	# Warm: every instance has the link in its own memory after a few
	# thousand requests spread over them.
	warmup wrk "$nurl" "$tmp/n/w"
	for i in $(seq 1 "$rounds"); do
		a0=$(ticks_pids "$apps") n0=$(ticks_pids "$ngx") p0=$(ticks_named postgres) r0=$(ticks_named redis-server)
		load_once wrk "$nurl" "$tmp/n/$i"
		a1=$(ticks_pids "$apps") n1=$(ticks_pids "$ngx") p1=$(ticks_named postgres) r1=$(ticks_named redis-server)
		awk -v i="$i" -v r="$(rps wrk "$tmp/n/$i")" -v n="$(nresp wrk "$tmp/n/$i")" -v hz="$hz" -v a=$((a1 - a0)) -v x=$((n1 - n0)) \
			-v p=$((p1 - p0)) -v rd=$((r1 - r0)) -v g="$(awk '{print $1 + $2}' "$tmp/n/$i.cpu")" -v b="$(bad wrk "$tmp/n/$i")" \
			'BEGIN {u = 1e6 / hz / n; printf "%d %.0f %.1f %.1f %.1f %.1f %.1f %.3f %d\n", i, r, x * u, a * u, p * u, rd * u, g / n * 1e6, x / (a ? a : 1), b}' >>"$tmp/n/rows"
	done
	{
		header "nginx and the app in one run: wrk through nginx to three instances (deploy/replicas.sh up 3), one hot link, caches warm" nginx
		echo "# cpu:       nginx = its master and workers; apps = the three instances summed"
		echo "#"
		echo "# round req/s nginx_us apps_us postgres_us redis_us wrk_us nginx/apps bad"
		medians <"$tmp/n/rows" | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do printf '\n===== round %s =====\n' "$i"; cat "$tmp/n/$i"; done
	} >"$out/$tree-nginx-shares.txt"
	deploy/replicas.sh down >/dev/null; up=''
fi

for f in "$out"/"$tree"-*.txt; do
	echo "== $(basename "$f")"
	grep -E '^# (round|median|min-max|[A-E]\.)' "$f" || true
done
if [ "$keep" ]; then echo "Outputs in $out" | sed "s|$repo/||"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
