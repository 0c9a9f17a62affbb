#!/usr/bin/env bash
# hosts.sh: step 20's sitting. Three hosts (deploy/hosts.sh), load through
# nginx, and one host taken away under that load; every request's outcome
# kept and printed second by second (benchmarks/timeline).
#
#   app       the host of the asynchronous standby, with the Redis master
#             moved off it: no leader of any kind is there; its app, a
#             standby, a Redis replica, a Sentinel and an etcd member go
#   standby   the host of the synchronous standby (the one a commit waits
#             for), with the Redis master moved off it
#   postgres  the host of the Postgres primary, with the Redis master
#             moved off it
#   redis     the host of the Redis master, moved first to the host of the
#             asynchronous standby
#   failover  no host: the Sentinels move the Redis master to a replica
#             (SENTINEL FAILOVER), the old master kept as a replica
#
# In each: vegeta sends redirects (GET of 500 links made beforehand, at
# RATE a second) and creates (POST /shorten, each a new URL, at CREATES a
# second) for DURATION seconds; at HARM seconds the host is removed
# (deploy/hosts.sh remove: its link cut, then its processes killed). Twice a
# second, who is the Postgres primary and the Redis master is written
# down. After the run, every link whose create was answered 201 is looked
# for in the primary Postgres then has; then the host is restored
# (deploy/hosts.sh restore) and the time that takes is written down.
#
# Since step 36, beside that load, the history checker's clients
# (benchmarks/historyclients, package linkhistory) create, edit, delete
# and read links of their own through each app directly, and their
# history is checked: 36-history-PART.txt (the verdict) and .jsonl.gz (the
# history). A history refused fails the script, after every part ran.
#
#   benchmarks/hosts.sh [-q] [-o DIR] [-p PARTS] [-d SECONDS] [-r RATE] [-c CREATES]
#
#   -q        quick (CI): 24 s runs, harm at 6 s, 100 redirects and 10
#             creates a second
#   -o DIR    where the outputs go: 20-fail-PART.txt and 36-history-PART.*
#             for each part
#             (default: a temporary directory, removed)
#   -p PARTS  comma-separated (default app,standby,postgres,redis,failover)
#   -d, -r, -c  run length (default 60 s; harm at a quarter of it),
#             redirects a second (300), creates a second (20)
#
# Run as root; it brings the hosts up (deploy/hosts.sh up) and takes them
# down at the end, however it ends. Needs what deploy/hosts.sh needs, and vegeta.
set -euo pipefail

out='' parts='app standby postgres redis failover' dur=60 rate=300 creates=20
args="$*"
while getopts qo:p:d:r:c: opt; do
	case $opt in
	q) dur=24 rate=100 creates=10 ;;
	o) out=$OPTARG ;; d) dur=${OPTARG%s} ;; r) rate=$OPTARG ;; c) creates=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "d $dur" "r $rate" "c $creates"; do
	case ${v#* } in '' | *[!0-9]* | 0) echo "hosts.sh: -${v%% *} wants a whole number above 0" >&2; exit 2 ;; esac
done
for p in $parts; do case $p in app | standby | postgres | redis | failover) ;; *) echo "hosts.sh: unknown part $p (app, standby, postgres, redis, failover)" >&2; exit 2 ;; esac; done
for t in go vegeta curl redis-cli; do command -v "$t" >/dev/null || { echo "hosts.sh: $t not found" >&2; exit 1; }; done
[ "$dur" -ge 8 ] || { echo "hosts.sh: -d wants 8 seconds or more (the harm comes at a quarter)" >&2; exit 2; }
harm=$((dur / 4))
# hbound_for PART: the staleness the history checker allows a read on an
# app that did not make the change, as docs/operations.md states it: 5 s,
# as in the suite (a retry's 4.25 s, and work), while Redis answers; in
# the redis part, where the Redis master is unreachable until the
# Sentinels promote a replica, LOCAL_CACHE_TTL (1 m, the apps' default)
# and those 5 s. On the app that made the change there is no bound.
hbound_for() { case $1 in redis) echo 65s ;; *) echo 5s ;; esac; }
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
cd "$(git rev-parse --show-toplevel)"
. benchmarks/lib.sh # progress
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hosts.XXXXXX")
chmod 755 "$tmp" # Postgres runs as the user postgres, inside it
export HOSTS_DIR="$tmp/hosts"
keep=$out
[ -n "$out" ] || out="$tmp/out"
mkdir -p "$out"
rp='' cp='' wp='' hp=''
cleanup() {
	local rc=$? kept h
	# The load and the roles loop first: they would go on for the rest
	# of their run, asking hosts that are gone.
	for p in $rp $cp $wp $hp; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "$rc" != 0 ]; then
		# A failure keeps every host's logs (deploy/hosts.sh down deletes
		# them) and says where, with the apps' last lines.
		kept=$(mktemp -d "${TMPDIR:-/tmp}/hosts-failed.XXXXXX")
		mkdir -p "$kept/hosts"
		(cd "$HOSTS_DIR" 2>/dev/null && find . -name '*.log' -exec cp --parents {} "$kept/hosts/" \;) 2>/dev/null || true
		cp "$tmp"/*.log "$kept/" 2>/dev/null || true
		for h in h1 h2 h3; do
			[ -f "$kept/hosts/$h/app.log" ] || continue
			echo "hosts.sh: last lines of $h's app log:" >&2
			tail -n 15 "$kept/hosts/$h/app.log" >&2
		done
		echo "hosts.sh: failed (status $rc); every host's logs are kept in $kept" >&2
	fi
	deploy/hosts.sh down >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

codeid=$(sh benchmarks/codeid.sh)
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/20-*' || echo ' (dirty tree)')"
go build -o "$tmp/timeline" ./benchmarks/timeline
go build -o "$tmp/historyclients" ./benchmarks/historyclients
base=http://127.0.0.1:${HOSTS_PORT:-18080}
ip_of() { echo "10.77.0.1${1#h}"; }

progress "three hosts up (deploy/hosts.sh up), then 500 links"
deploy/hosts.sh up 2>"$tmp/up.log" || { cat "$tmp/up.log" >&2; exit 1; }

# 500 links to redirect to; then a few seconds of redirects, so that each
# app has them in its caches, as a running service would. A 503 (with
# Retry-After: 1) is the service not accepting a create now: it could not
# save it within DB_TIMEOUT (500 ms here), or it is at its limit of
# requests in flight. A client sends it again after that, and so does
# this, up to 5 tries (a second link for the same URL is no harm here). In step 30's first landing CI one seeding
# create, sent as CI's pool began, was answered 503 and the script
# stopped there (docs/30). How many were sent again goes into every
# output's header; any other answer stops the script.
: >"$tmp/redirects.txt"
seed_503=0 refused=''
for i in $(seq 500); do
	code=''
	for try in 1 2 3 4 5; do
		resp=$(curl -sS -w '\n%{http_code}' -H 'Content-Type: application/json' -d "{\"url\":\"https://example.com/seed/$i\"}" "$base/shorten")
		case ${resp##*$'\n'} in
		201)
			code=$(printf '%s\n' "$resp" | sed -n 's/.*"code":"\([^"]*\)".*/\1/p')
			break
			;;
		503)
			seed_503=$((seed_503 + 1))
			echo "hosts.sh: seeding: create $i, try $try: 503 $(printf '%s\n' "$resp" | head -n 1); again in 1 s" >&2
			sleep 1
			;;
		*)
			echo "hosts.sh: seeding: create $i answered ${resp##*$'\n'}: $(printf '%s\n' "$resp" | head -n 1)" >&2
			exit 1
			;;
		esac
	done
	[ -n "$code" ] || { echo "hosts.sh: seeding: no code for create $i after 5 tries" >&2; exit 1; }
	echo "GET $base/$code" >>"$tmp/redirects.txt"
done
vegeta attack -rate="$rate/s" -duration=5s -redirects=-1 -targets="$tmp/redirects.txt" >/dev/null

# creates_targets N: N creates, each of its own URL, as vegeta JSON targets.
creates_targets() {
	local run=$1 n=$2 i
	for i in $(seq "$n"); do
		printf '{"method":"POST","url":"%s/shorten","header":{"Content-Type":["application/json"]},"body":"%s"}\n' \
			"$base" "$(printf '{"url":"https://example.com/%s/%d"}' "$run" "$i" | base64 -w0)"
	done
}

roles() { echo "primary=$(deploy/hosts.sh primary 2>/dev/null || echo none) sync_standby=$(sync_standby || echo none) redis_master=$(deploy/hosts.sh redis-master 2>/dev/null || echo none)"; }

# sync_standby: the host of the synchronous standby (Patroni's GET /sync).
sync_standby() {
	local h
	for h in h1 h2 h3; do
		[ "$(curl -s -o /dev/null -m 0.3 -w '%{http_code}' "http://$(ip_of "$h"):8008/sync")" = 200 ] && { echo "$h"; return 0; }
	done
	return 1
}

# move_redis_to H: make H's Redis the master. The Sentinels choose among
# the replicas by priority; the others are given priority 0 (never) for
# the one failover, then 100 again.
move_redis_to() {
	local to=$1 m h end
	m=$(deploy/hosts.sh redis-master)
	[ "$m" = "$to" ] && return 0
	for h in h1 h2 h3; do
		[ "$h" = "$to" ] || [ "$h" = "$m" ] || redis-cli -h "$(ip_of "$h")" config set replica-priority 0 >/dev/null
	done
	# A Sentinel learns a replica's priority from its INFO, every 10 s:
	# wait until the one asked to fail over has seen every 0.
	end=$((SECONDS + 60))
	until [ "$(redis-cli -h "$(ip_of "$to")" -p 26379 sentinel replicas shortener |
		awk '$0 == "ip" { getline; ip = $0 } $0 == "slave-priority" { getline; if ($0 == 0) n++ } END { print n + 0 }')" -ge 1 ] ||
		[ "$m" = "$to" ]; do
		((SECONDS < end)) || { echo "hosts.sh: the Sentinel did not see the replica priorities change" >&2; exit 1; }
		sleep 0.5
	done
	# Asked until the Sentinel says OK: just after a restore it may not
	# yet count the restored replica as one it could promote
	# (-NOGOODSLAVE: reasoned). Its answer was thrown away until step
	# 36, one of whose draft runs stopped here: no failover began, and
	# the master "did not move" for 60 s.
	end=$((SECONDS + 60))
	until [ "$(redis-cli -h "$(ip_of "$to")" -p 26379 sentinel failover shortener 2>&1)" = OK ]; do
		((SECONDS < end)) || { echo "hosts.sh: the Sentinel refused SENTINEL FAILOVER for 60 s: $(redis-cli -h "$(ip_of "$to")" -p 26379 sentinel failover shortener 2>&1)" >&2; exit 1; }
		sleep 0.5
	done
	end=$((SECONDS + 60))
	until [ "$(deploy/hosts.sh redis-master)" = "$to" ]; do
		((SECONDS < end)) || { echo "hosts.sh: the Redis master did not move to $to" >&2; exit 1; }
		sleep 0.5
	done
	for h in h1 h2 h3; do redis-cli -h "$(ip_of "$h")" config set replica-priority 100 >/dev/null; done
	echo "(moved the Redis master from $m to $to first)" >&2
}

# victim PART: the host to remove, after moving the Redis master so that
# one thing fails at a time. The hosts hold three roles: the Postgres
# primary (p), its synchronous standby (s), and the other, asynchronous
# standby (a); the Redis master goes where the part wants it.
#   app       a, with the Redis master moved off it: nothing leads there
#   standby   s, with the Redis master moved off it
#   postgres  p, with the Redis master moved off it
#   redis     the Redis master, moved to a
#   failover  none: the Redis master moves, no host goes
victim() {
	local p s a h
	p=$(deploy/hosts.sh primary) s=$(sync_standby) a=''
	for h in h1 h2 h3; do [ "$h" = "$p" ] || [ "$h" = "$s" ] || a=$h; done
	# Each role on its own host, or the part would remove the wrong one.
	if [ -z "$p" ] || [ -z "$s" ] || [ -z "$a" ] || [ "$p" = "$s" ]; then
		echo "hosts.sh: roles not settled: primary '$p', synchronous standby '$s', other '$a'" >&2
		exit 1
	fi
	case $1 in
	app) move_redis_to "$p"; echo "$a" ;;
	standby) move_redis_to "$a"; echo "$s" ;;
	postgres) move_redis_to "$a"; echo "$p" ;;
	redis) move_redis_to "$a"; echo "$a" ;;
	failover) echo none ;;
	esac
}

# cpu: "pid name ticks" for every process of the hosts (by namespace),
# nginx and the load generators ($rp $cp): user + system time, with what
# each has reaped of its children (a postmaster's finished backends).
cpu() {
	local files=() p ns ng
	for ns in sh1 sh2 sh3; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do files+=("/proc/$p/stat"); done
	done
	ng=$(cat "$HOSTS_DIR/nginx/nginx.pid")
	for p in "$ng" $(pgrep -P "$ng") $rp $cp; do files+=("/proc/$p/stat"); done
	# Field 2 is the name in parentheses (none here has a space in it).
	# A process can end between the listing and the read; cat then fails,
	# and under pipefail the whole script stopped without a word (step
	# 22's CI rehearsal, docs/22): what is gone is simply not counted.
	{ cat "${files[@]}" 2>/dev/null || true; } | awk '{ gsub(/[()]/, "", $2); print $1, $2, $14 + $15 + $16 + $17 }'
}

# cpu_table BEFORE AFTER SECONDS REQUESTS: CPU by process name between two
# cpu snapshots (a process new in AFTER counts whole).
cpu_table() {
	awk -v hz="$(getconf CLK_TCK)" -v secs="$3" -v n="$4" '
		NR == FNR { t0[$1] = $3; next }
		$3 != "" { used[$2] += $3 - ($1 in t0 ? t0[$1] : 0) }
		END {
			printf "%-16s %10s %10s %14s\n", "process", "cpu_s", "cores", (n > 0 ? "us_per_req" : "")
			for (k in used) if (n > 0) printf "%-16s %10.2f %10.3f %14.1f\n", k, used[k] / hz, used[k] / hz / secs, used[k] / hz / n * 1e6
			else printf "%-16s %10.2f %10.3f\n", k, used[k] / hz, used[k] / hz / secs
		}' "$1" "$2" | { IFS= read -r h; echo "$h"; sort -k2,2nr; }
}

# What the three hosts cost with no load at all: etcd's heartbeats,
# Patroni's loop, the checks of HAProxy and the Sentinels, the apps' own
# timers.
idle=$((dur / 3))
rp='' cp=''
sleep 2
cpu >"$tmp/idle0"
sleep "$idle"
cpu >"$tmp/idle1"
{
	echo "# Step 20: the three hosts with no load, for $idle s"
	echo "# made by:   benchmarks/hosts.sh ${args:-(no flags)}: -d $dur; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
	echo "# hosts:     deploy/hosts.sh, after 500 creates ($seed_503 answers 503, each sent again) and 5 s of redirects, then 2 s of rest"
	echo
	cpu_table "$tmp/idle0" "$tmp/idle1" "$idle" 0
} >"$out/20-idle.txt"

# log_sizes: each app's log and nginx's log of 5xx answers, with its size
# now; logs_since FILE: what each has logged since (a host's log is
# appended to across its removal and restore). Since step 42, so that a
# failed redirect in CI's log says who answered it and why: step 41's
# rehearsals saw 503s and had nothing else to go on.
log_sizes() {
	local f
	for f in "$HOSTS_DIR"/h1/app.log "$HOSTS_DIR"/h2/app.log "$HOSTS_DIR"/h3/app.log "$HOSTS_DIR"/nginx/5xx.log; do
		echo "$f $(stat -c %s "$f" 2>/dev/null || echo 0)"
	done
}
logs_since() {
	local f size n lines m sel
	echo "## 5xx answers as nginx logged them during the load, and the apps' warnings and errors (since step 42)"
	while read -r f size; do
		n=${f#"$HOSTS_DIR"/}
		if [ ! -f "$f" ]; then
			echo "${n%%/*}: no log ($f is missing)"
			continue
		fi
		lines=$( { tail -c +$((size + 1)) "$f" 2>/dev/null || true; } | { grep -E "$([ "$n" = nginx/5xx.log ] && echo . || echo 'level=(WARN|ERROR)')" || true; })
		if [ "$n" = nginx/5xx.log ]; then
			# The redirects first: they are what CI's check reads.
			for m in GET POST; do
				sel=$(printf '%s\n' "$lines" | { grep -F "\"$m " || true; })
				echo "nginx, its $m answers of 500 and above ($(printf '%s' "$sel" | grep -c . || true), the first 15: client, request, status, request id, instances asked, their statuses and times):"
				if [ -n "$sel" ]; then printf '%s\n' "$sel" | sed -n '1,15s/^/  /p'; else echo "  none"; fi
			done
			continue
		fi
		echo "${n%%/*}, its WARN and ERROR lines ($(printf '%s' "$lines" | grep -c . || true), the first 15):"
		if [ -n "$lines" ]; then printf '%s\n' "$lines" | sed -n '1,15s/^/  /p'; else echo "  none"; fi
	done <"$1"
}

# metrics_snap: "host series value" for the series that say where a
# request's time went: the pools' waits for a connection (go_sql_wait_*,
# by pool), the replica's reads and the lookups by result, the local
# cache, and the answers of 500 and above by route; from each app's
# /metrics (127.0.0.1:6060 in its namespace). metrics_diff A B: what each
# rose by between two snapshots, for the series that moved; a host whose
# app did not answer (removed) is named so.
metrics_snap() {
	local h
	for h in h1 h2 h3; do
		ip netns exec "s$h" curl -sf -m 2 http://127.0.0.1:6060/metrics 2>/dev/null |
			grep -E '^(go_sql_wait_(count_total|duration_seconds_total)|shortener_replica_reads_total|shortener_db_lookups_total|shortener_cache_lookups_total\{cache="local"|shortener_http_requests_total\{.*status="5)' |
			sed "s/^/$h /" || echo "$h gone"
	done
}
metrics_diff() {
	echo "each app's counters over the load, those that rose (since step 42; a host removed has none after):"
	awk 'NR == FNR { a[$1 " " $2] = $3; next }
		$2 == "gone" { print "  " $1 ": its app did not answer"; next }
		{ d = $3 - ($1 " " $2 in a ? a[$1 " " $2] : 0); if (d != 0) printf "  %s %s +%g\n", $1, $2, d }' "$1" "$2"
}

since() { awk -v a="$1" -v b="$t0" 'BEGIN { printf "%.2f", a - b }'; }

for part in $parts; do
	f="$out/20-fail-$part.txt"
	v=$(victim "$part")
	progress "part $part: $dur s of load, the harm at second $harm"
	# Let every app find its connections again after a move, then warm.
	sleep 3
	vegeta attack -rate="$rate/s" -duration=3s -redirects=-1 -targets="$tmp/redirects.txt" >/dev/null
	before=$(roles)
	creates_targets "$part" $((creates * dur)) >"$tmp/creates.json"
	log_sizes >"$tmp/logs0"
	metrics_snap >"$tmp/metrics0"
	t0=$(date +%s.%N)
	vegeta attack -rate="$rate/s" -duration="${dur}s" -timeout=10s -redirects=-1 -targets="$tmp/redirects.txt" >"$tmp/red.bin" &
	rp=$!
	vegeta attack -rate="$creates/s" -duration="${dur}s" -timeout=10s -format=json -targets="$tmp/creates.json" >"$tmp/cre.bin" &
	cp=$!
	(
		while kill -0 "$rp" 2>/dev/null; do
			printf '%6.1f %s\n' "$(since "$(date +%s.%N)")" "$(roles)"
			sleep 0.5
		done
	) >"$tmp/roles.txt" &
	wp=$!
	hbound=$(hbound_for "$part")
	# The history checker's clients, on links of their own, each request
	# to one app directly (reads to any, a link's changes to its own).
	"$tmp/historyclients" -targets "http://$(ip_of h1):8080,http://$(ip_of h2):8080,http://$(ip_of h3):8080" \
		-d "${dur}s" -harm "${harm}s" -tag "hist$part" -bound "$hbound" -o "$out/36-history-$part" >"$tmp/history.log" 2>&1 &
	hp=$!
	# CPU in the steady part, from the second second to the harm.
	sleep 1
	cpu >"$tmp/cpu0"
	c0=$(date +%s.%N)
	sleep $((harm - 1))
	cpu >"$tmp/cpu1"
	mark=$(date +%s.%N)
	if [ "$part" = failover ]; then
		m=$(deploy/hosts.sh redis-master)
		# Just after the last part's restore, the Sentinel may not yet
		# count a replica it could promote (-NOGOODSLAVE), or still be in
		# that part's failover (-INPROG): asked again for up to 30 s.
		tries=0
		until redis-cli -h "$(ip_of h1)" -p 26379 sentinel failover shortener >"$tmp/failover.log" 2>&1 &&
			[ "$(cat "$tmp/failover.log")" = OK ]; do
			tries=$((tries + 1))
			[ "$tries" -lt 60 ] || { cat "$tmp/failover.log" >&2; echo "hosts.sh: the Sentinel refused SENTINEL FAILOVER for 30 s" >&2; exit 1; }
			sleep 0.5
		done
		echo "SENTINEL FAILOVER asked of h1's Sentinel ($((tries + 1)) asks, $(since "$(date +%s.%N)") s); the master was $m" >>"$tmp/remove.log"
	else
		deploy/hosts.sh remove "$v" 2>>"$tmp/remove.log" || { cat "$tmp/remove.log" >&2; exit 1; }
	fi
	# Each waited for on its own: wait with several pids returns only the
	# last one's status.
	wait "$rp" || { echo "hosts.sh: vegeta (redirects) failed" >&2; exit 1; }
	wait "$cp" || { echo "hosts.sh: vegeta (creates) failed" >&2; exit 1; }
	ended=$SECONDS
	wait "$wp"
	hrc=0
	wait "$hp" || hrc=$?
	rp='' cp='' wp='' hp=''
	logs_since "$tmp/logs0" >"$tmp/logs.txt"
	metrics_snap >"$tmp/metrics1"
	metrics_diff "$tmp/metrics0" "$tmp/metrics1" >>"$tmp/logs.txt"
	case $hrc in
	0) ;;
	1) refused+="$part " ;;
	*) cat "$tmp/history.log" >&2; echo "hosts.sh: the history's clients failed (status $hrc)" >&2; exit 1 ;;
	esac
	vegeta encode --to json <"$tmp/red.bin" | "$tmp/timeline" -ok 302 -t0 "$t0" -mark "$mark" >"$tmp/red.txt"
	vegeta encode --to json <"$tmp/cre.bin" | "$tmp/timeline" -ok 201 -t0 "$t0" -mark "$mark" -codes "$tmp/acked.txt" >"$tmp/cre.txt"
	acked=$(grep -c . "$tmp/acked.txt" || true)
	# The count needs a primary, and just after the harm there can be
	# none for a while: a standby being promoted, or (step 32's landing
	# CI) a primary whose Patroni lost etcd and stopped it. Ask again for
	# up to 60 s, and write down how long after the load's end it came.
	ws=$SECONDS refusal=''
	until lost=$(deploy/hosts.sh psql -Atq -v ON_ERROR_STOP=1 \
		-c 'create temp table acked (code text)' \
		-c "\\copy acked from '$tmp/acked.txt'" \
		-c 'select count(*) from acked a where not exists (select 1 from links l where l.code = a.code)' 2>"$tmp/count.err"); do
		((SECONDS - ws < 60)) || { cat "$tmp/count.err" >&2; echo "hosts.sh: no primary answered the count within 60 s of the load's end" >&2; exit 1; }
		# What the first refusal said goes into the output, not away.
		[ -n "$refusal" ] || refusal=$(head -n 1 "$tmp/count.err")
		sleep 1
	done
	waited=$((SECONDS - ended))
	rs=$SECONDS
	if [ "$part" = failover ]; then
		# Nothing to restore; the master must have moved.
		end=$((SECONDS + 60))
		until m2=$(deploy/hosts.sh redis-master 2>/dev/null) && [ -n "$m2" ] && [ "$m2" != "$m" ]; do
			((SECONDS < end)) || { echo "hosts.sh: the Redis master did not move from $m" >&2; exit 1; }
			sleep 0.5
		done
	else
		deploy/hosts.sh restore "$v" 2>>"$tmp/restore.log" || { cat "$tmp/restore.log" >&2; exit 1; }
	fi
	restored=$((SECONDS - rs))
	{
		if [ "$part" = failover ]; then
			echo "# Step 36: $part: the Redis master moved by SENTINEL FAILOVER from second $(since "$mark") of $dur, no host removed, under load through nginx"
		else
			echo "# Step 20: $part: the host $v removed at second $(since "$mark") of $dur, under load through nginx"
		fi
		echo "# made by:   benchmarks/hosts.sh ${args:-(no flags)} (part $part): -d $dur -r $rate -c $creates; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
		echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
		echo "# software:  $(go version | awk '{print $3}'), $(patroni --version), etcd $(etcd --version | sed -n 's/^etcd Version: //p'), $(haproxy -v | head -n 1 | cut -d' ' -f1-3), $(redis-server --version | cut -d' ' -f1-3), $(nginx -v 2>&1 | cut -d' ' -f3), vegeta $(go version -m "$(command -v vegeta)" 2>/dev/null | awk '$1 == "mod" {print $3}')"
		echo "# hosts:     deploy/hosts.sh: three network namespaces on one bridge, each with etcd, Patroni + Postgres, HAProxy, Redis + Sentinel and the app; nginx in front"
		echo "# load:      vegeta, $rate redirects/s over 500 links (made by 500 creates, $seed_503 answers 503 sent again; warmed 5 s), and $creates creates/s, each a new URL, for $dur s, timeout 10 s"
		echo "#            and beside it (since step 36) the history checker's clients, straight to the apps: $(sed -n 's/^history: \([0-9]*\) operations.*/\1/p' "$tmp/history.log") operations (36-history-$part.txt), not counted below in requests or us_per_req"
		echo
		echo "before: $before"
		if [ "$part" = failover ]; then
			echo "removed: no host; at $(since "$mark") s: $(tail -n 1 "$tmp/remove.log")"
		else
			echo "removed: $v at $(since "$mark") s: $(tail -n 1 "$tmp/remove.log")"
		fi
		echo "acknowledged creates (201): $acked; of them missing from the primary afterwards: $lost"
		echo "counted: $waited s after the load ended (its results read, then a primary asked)${refusal:+; first refused: $refusal}"
		if [ "$part" = failover ]; then
			echo "restore: nothing to restore (the master is $m2, was $m; checked $restored s after the count); after: $(roles)"
		else
			echo "restore of $v (deploy/hosts.sh restore, until its app answers): $restored s; after: $(roles)"
		fi
		echo
		win=$(awk -v a="$mark" -v b="$c0" 'BEGIN { printf "%.2f", a - b }')
		echo "## CPU before the harm: ${win} s from second 1, $rate redirects + $creates creates a second ($(awk -v w="$win" -v r=$((rate + creates)) 'BEGIN { printf "%.0f", w * r }') requests); us_per_req = cpu / requests"
		cpu_table "$tmp/cpu0" "$tmp/cpu1" "$win" "$(awk -v w="$win" -v r=$((rate + creates)) 'BEGIN { printf "%.0f", w * r }')"
		echo
		echo "## who leads, twice a second (seconds since the load began)"
		cat "$tmp/roles.txt"
		echo
		echo "## redirects (302 = ok)"
		cat "$tmp/red.txt"
		echo
		echo "## creates (201 = ok)"
		cat "$tmp/cre.txt"
		echo
		cat "$tmp/logs.txt"
	} >"$f"
	grep -E '^(removed|acknowledged|counted|restore)' "$f"
	{
		echo "# Step 36: $part: the history checker's clients (benchmarks/historyclients) beside step 20's load, the harm at second $(since "$mark") of $dur: $(tail -n 1 "$tmp/remove.log")"
		echo "# made by:   benchmarks/hosts.sh ${args:-(no flags)} (part $part): -d $dur, bound $hbound; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
		echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
		echo "# history:   36-history-$part.jsonl.gz beside this (check it again: go run ./benchmarks/historyclients -check FILE -bound $hbound -harm ${harm}s); the clients began at second $(since "$(sed -n 's/^history: .*(unix \([0-9.]*\))$/\1/p' "$tmp/history.log")")"
		echo "# roles:     before: $before; after: $(roles)"
		echo
		cat "$tmp/history.log"
	} >"$out/36-history-$part.txt.new"
	mv "$out/36-history-$part.txt.new" "$out/36-history-$part.txt"
	echo "$part history: $(grep -E '^verdict' "$tmp/history.log") ($(grep -E '^the least bound' "$tmp/history.log"))"
	echo "$part redirects: $(grep -E '^(total|failures)' "$tmp/red.txt" | tr '\n' ' ')"
	echo "$part creates:   $(grep -E '^(total|failures)' "$tmp/cre.txt" | tr '\n' ' ')"
	: >"$tmp/remove.log"
	progress "part $part: done; waiting for the restored standby to stream"
	# Let the restored host's standby and replica catch up before the next.
	end=$((SECONDS + 120))
	until [ "$(deploy/hosts.sh psql -Atqc "select count(*) from pg_stat_replication where state = 'streaming'" 2>/dev/null)" = 2 ] && sync_standby >/dev/null; do
		((SECONDS < end)) || { echo "hosts.sh: the restored standby did not stream within 120 s" >&2; exit 1; }
		sleep 0.5
	done
done
if [ -n "$refused" ]; then
	echo "hosts.sh: the history checker refused the history of: $refused(36-history-PART.txt)" >&2
	if [ -z "$keep" ]; then
		kept=$(mktemp -d "${TMPDIR:-/tmp}/hosts-history.XXXXXX")
		cp "$out"/36-history-* "$kept/" && echo "hosts.sh: the histories are kept in $kept" >&2
	fi
	exit 1
fi
if [ "$keep" ]; then echo "Outputs in ${out#"$PWD"/}"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
