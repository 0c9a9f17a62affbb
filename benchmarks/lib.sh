# lib.sh: what the sitting scripts share (cache.sh, nginx.sh, clicks.sh,
# limits.sh, metrics.sh, writes.sh, onebox.sh, profile.sh; table.sh and
# pair.sh start a step with step_tree, seeded_db and step_app, and use
# start_redis; pair.sh medians and the /proc readers; ticks_pids and
# ticks_named: ceiling.sh, changes.sh, creates.sh, longtail.sh, misses.sh
# (suitecpu.sh ticks_named); machine_line: those five, connections.sh,
# page.sh and dbcost.sh).
# POSIX sh. A script sources it from its own folder, before it
# changes directory, then calls sitting:
#   . "$(dirname "$0")/lib.sh"
#   sitting cache go psql redis-server redis-cli curl hey vegeta

# Every load generator here is one address standing for many clients, and
# deploy/nginx.conf allows one address 100 requests in progress: a sitting
# that goes through nginx raises that (deploy/replicas.sh reads it).
NGINX_LIMIT_CONN=${NGINX_LIMIT_CONN:-60000} # nginx takes less than 65,536
export NGINX_LIMIT_CONN

# sitting NAME TOOL...: the set-up every sitting shares. The caller has set
# out (its -o, or '') and parts (its -p) first. It checks that each TOOL is
# on the PATH; makes a relative out absolute (the script moves to the
# repository next); sets admin (ADMIN_DATABASE_URL, or the local Postgres),
# repo, and here=benchmarks, relative: the commands recorded in the outputs
# name paths from the repository; makes tmp; picks db, a database name of
# the sitting's own; points REPLICAS_DIR into tmp; and stops what the
# sitting started when it exits, however it exits (stop_sitting).
sitting() {
	_name=$1
	shift
	for _tool in "$@"; do
		command -v "$_tool" >/dev/null || { echo "$_name.sh: $_tool not found (see benchmarks/README.md)" >&2; exit 1; }
	done
	case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
	# deploy/services.sh up (or env) exports ADMIN_DATABASE_URL; the system's
	# Postgres only when it is unset.
	admin=${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
	if command -v psql >/dev/null && ! psql "$admin" -XAtqc 'select 1' >/dev/null 2>&1; then
		_how='as set'
		[ -n "${ADMIN_DATABASE_URL:-}" ] || _how='unset, so the port of a system Postgres'
		echo "$_name.sh: no Postgres answers at ADMIN_DATABASE_URL ($_how: $admin). Run eval \"\$(deploy/services.sh up)\", which sets it, or set it" >&2
		exit 1
	fi
	repo=$(git rev-parse --show-toplevel)
	cd "$repo"
	here=benchmarks
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$_name.XXXXXX")
	db="shortener_${_name}_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
	pid='' pids='' redis_port='' redis_pid='' up='' replica='' dbs='' stop_signal=TERM
	export REPLICAS_DIR="$tmp/replicas"
	trap stop_sitting EXIT
	trap 'exit 130' INT TERM
}

# outputs_dir: where a sitting writes its NN-*.txt: the -o DIR given (keep
# is set), or a folder in tmp that goes at the end.
outputs_dir() {
	keep=$out
	[ -n "$out" ] || out="$tmp/out"
	mkdir -p "$out"
}

# outputs_note: the last line of a sitting's summary.
outputs_note() {
	if [ "$keep" ]; then echo "Outputs in $out" | sed "s|$repo/||"; else echo "Outputs not kept (give -o DIR to keep them)"; fi
}

# stop_sitting: on exit, whatever happened: deploy/replicas.sh's instances
# and nginx ($up set), deploy/replica.sh's replica ($replica set), the
# processes in $pid and $pids (with $stop_signal, then waited for), the
# sitting's Redis ($redis_port), its databases ($db, $dbs), and tmp.
stop_sitting() {
	[ -z "$up" ] || deploy/replicas.sh down >/dev/null 2>&1 || true
	[ -z "$replica" ] || deploy/replica.sh down >/dev/null 2>&1 || true
	for _p in $pid $pids; do
		kill "-$stop_signal" "$_p" 2>/dev/null || true
		wait "$_p" 2>/dev/null || true
	done
	# A run cut short between SIGSTOP and SIGCONT must not leave Redis frozen.
	[ -z "$redis_pid" ] || kill -CONT "$redis_pid" 2>/dev/null || true
	[ -z "$redis_port" ] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	for _db in $dbs $db; do
		psql "$admin" -qc "DROP DATABASE IF EXISTS $_db WITH (FORCE)" >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}

# want PART: whether -p asked for PART.
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# reqs FILE: the requests a second an output measured: bench.sh's median,
# or vload.sh's throughput.
reqs() {
	awk '/^# median req\/s:/ { r = $4 } /^#   Requests / { r = $NF } END { print r + 0 }' "$1"
}

# headline FILE [BASE]: FILE's name and headline figures, since without -o
# the outputs go when the sitting ends; with BASE, the ratio of FILE's
# requests a second to BASE's, the ratio the docs' tables quote.
headline() {
	[ -f "$1" ] || return 0 # a glob that matched nothing: no outputs
	# a file may hold no such line: grep's "nothing found" must not end a
	# script run with pipefail
	_line=$({ grep -hE '^# (median req/s|slow|redis hit ratio)|^#   (Requests|Status Codes)' "$1" || true; } | sed 's/^# *//' | tr -s ' ' | paste -sd ' ' -)
	if [ -n "${2:-}" ] && [ -f "$2" ] && [ "$1" != "$2" ]; then
		_line="ratio to $(basename "$2" .txt): $(awk -v a="$(reqs "$1")" -v b="$(reqs "$2")" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else printf "-" }')  $_line"
	fi
	printf '%-28s %s\n' "$(basename "$1" .txt)" "$_line"
}

# freeport: a TCP port on 127.0.0.1 that nothing listens on now. It is
# drawn from 20000-31999, below the ports the kernel hands out to outgoing
# connections (32768 and up on Linux, 49152 and up on macOS): a port some
# client is connected from refuses a connect, so it looks free, but cannot
# be bound.
freeport() {
	while :; do
		_p=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 12000))
		_rc=0
		curl -s -o /dev/null -m 1 "http://127.0.0.1:$_p/" 2>/dev/null || _rc=$?
		[ "$_rc" -ne 7 ] || { echo "$_p"; return; } # 7: could not connect, so it is free
	done
}

# start_redis DIR [MAXMEMORY]: a Redis of the script's own, on a free
# port, keeping nothing on disk, capped at MAXMEMORY (default 256mb) and
# evicting the least frequently used keys, as docs/05 says a cache must. Sets redis_port; its log goes in DIR.
# The caller stops it with: redis-cli -p "$redis_port" shutdown nosave
start_redis() {
	command -v redis-server >/dev/null || { echo "redis-server not found" >&2; exit 1; }
	redis_port=$(freeport)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--maxmemory "${2:-256mb}" --maxmemory-policy allkeys-lfu --daemonize yes \
		--logfile "$1/redis.log" --dir "$1"
	_i=0
	until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do
		_i=$((_i + 1)); [ "$_i" -lt 50 ] || { echo "redis did not start" >&2; cat "$1/redis.log" >&2; exit 1; }
		sleep 0.1
	done
}

# wait_healthy BASE LOG: wait up to 10 s for BASE/healthz; on failure, show
# LOG (the server's) and exit.
wait_healthy() {
	_i=0
	until curl -fs -o /dev/null "$1/healthz"; do
		_i=$((_i + 1))
		[ "$_i" -lt 100 ] || { echo "$1/healthz does not answer; the server's log:" >&2; cat "$2" >&2; exit 1; }
		sleep 0.1
	done
}

# backends ROWS: what most sittings measure against: a database of their
# own seeded with ROWS links (seeded_db; DATABASE_URL exported) and a Redis
# of their own (start_redis; REDIS_URL exported, and redis_pid, for the
# experiments that stall it with SIGSTOP).
backends() {
	seeded_db "$admin" "$1"
	export DATABASE_URL="$dburl"
	start_redis "$tmp"
	export REDIS_URL="redis://127.0.0.1:$redis_port/0"
	redis_pid=$(redis-cli -p "$redis_port" info server | tr -d '\r' | sed -n 's/^process_id://p')
}

# seeded_db ADMIN_URL ROWS [TREE]: create the database named $db (the
# caller picks the name first, so that its cleanup can drop it whatever
# happens), apply TREE's sql/schema.sql and seed ROWS links with its
# sql/seed.sql (TREE: a step's worktree; by default this checkout). Sets
# dburl, the new database's URL, and code, the code of the middle seeded
# link. An SQL error stops the script (psql -f alone would go on and exit 0).
seeded_db() {
	_root=${3:-$(git rev-parse --show-toplevel)}
	psql "$1" -qc "CREATE DATABASE $db" >/dev/null
	_nq=${1%%\?*}
	dburl="${_nq%/*}/$db${1#"$_nq"}"
	PGOPTIONS='-c client_min_messages=warning' psql "$dburl" -q -v ON_ERROR_STOP=1 -f "$_root/sql/schema.sql" >/dev/null
	psql "$dburl" -q -v ON_ERROR_STOP=1 -v rows="$2" -f "$_root/sql/seed.sql" >/dev/null
	code=$(psql "$dburl" -Atc "select code from links where url = 'https://example.com/seed/$(($2 / 2))'")
}

# The start of a step, as table.sh and pair.sh measure one: its commit
# built in a worktree of its own, a database seeded by its own sql/ files
# (seeded_db ... TREE), then the app started with:
#
# step_tree HASH TREE BIN: check out HASH into the new worktree TREE (the
# caller records TREE for its cleanup first) and build it to BIN.
step_tree() {
	git worktree add --detach "$2" "$1" >/dev/null 2>&1 || { echo "git worktree add of $1 failed" >&2; exit 1; }
	(cd "$2" && go build -o "$3" .) || { echo "the commit $1 does not build" >&2; exit 1; }
}
# step_app BIN LOG [VAR=VALUE ...]: start BIN with DATABASE_URL=$dburl and
# REDIS_URL=$redisurl (either may be empty), listening on ports the kernel
# picks (ADDR and METRICS_ADDR 127.0.0.1:0), creates never refused
# (CREATE_RATE and CREATE_BURST 1000000: the limit's cost, a Redis call,
# stays in every create; steps before 08 ignore both), and the VAR=VALUE
# words added; its standard error to LOG. Sets app_pid at once (for the
# caller's cleanup), then app_port, read from the log (the line that is not
# "metrics listening"), once /healthz answers there; stops the script,
# showing LOG, if the app exits or has not answered within 30 s.
step_app() {
	_bin=$1 _log=$2
	shift 2
	env ADDR=127.0.0.1:0 METRICS_ADDR=127.0.0.1:0 DATABASE_URL="$dburl" REDIS_URL="$redisurl" \
		CREATE_RATE=1000000 CREATE_BURST=1000000 "$@" "$_bin" 2>"$_log" &
	app_pid=$!
	app_port='' _i=0
	until [ -n "$app_port" ] && curl -fs -o /dev/null "http://127.0.0.1:$app_port/healthz"; do
		_i=$((_i + 1))
		[ "$_i" -lt 300 ] || { echo "$_bin did not answer /healthz; its log:" >&2; cat "$_log" >&2; exit 1; }
		kill -0 "$app_pid" 2>/dev/null || { echo "$_bin exited; its log:" >&2; cat "$_log" >&2; exit 1; }
		sleep 0.1
		# awk, not grep | sed: grep finds nothing in a log still empty, and
		# under pipefail that would end the script.
		app_port=$(awk '!/metrics listening/ && match($0, /addr"?[=:]"?127\.0\.0\.1:[0-9]+/) { a = substr($0, RSTART, RLENGTH); sub(/.*:/, "", a); print a; exit }' "$_log")
	done
}

# medians: copies a table of rounds (a round number, then numbers) from
# standard input, then adds a line "median" and a line "min-max" for each
# column but the first. (Some sittings keep their own, with other columns.)
medians() {
	awk 'function med(x, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = x[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
	{ print; n++; for (c = 2; c <= NF; c++) { v[c, n] = $c + 0; if (n == 1 || $c + 0 < lo[c]) lo[c] = $c + 0; if (n == 1 || $c + 0 > hi[c]) hi[c] = $c + 0 }; nf = NF }
	END {
		printf "median"; for (c = 2; c <= nf; c++) { for (i = 1; i <= n; i++) x[i] = v[c, i]; printf " %s", med(x, n) }; printf "\n"
		printf "min-max"; for (c = 2; c <= nf; c++) printf " %s-%s", lo[c], hi[c]; printf "\n"
	}'
}

# ticks_named NAME: the CPU ticks (user + system, with the children each
# has reaped: a postmaster holds its ended backends') of every process so
# named. A process can end between the glob and the read: cat then fails,
# which must not end a script run with pipefail; what has ended is simply
# not counted. (Older sitting scripts keep copies of their own; pair.sh, step
# 22, uses this one.)
ticks_named() {
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v n="($1)" '$2 == n {s += $14 + $15 + $16 + $17} END {print s + 0}'
}
# ticks_of PID: user + system ticks of one process, 0 if it has ended.
ticks_of() {
	{ cat "/proc/$1/stat" 2>/dev/null || true; } | awk '{s += $14 + $15} END {print s + 0}'
}
# ticks_pids PID[,PID...]: user + system ticks of the processes listed,
# summed. Unlike ticks_of, a process that has ended is an error: the
# function exits (the script too, when it called this in $(...) under set
# -e): a sum that silently lost a process would read as less CPU.
ticks_pids() {
	_files=''
	for _p in $(echo "$1" | tr ',' ' '); do
		[ -r "/proc/$_p/stat" ] || { echo "process $_p has ended: its CPU cannot be read" >&2; exit 1; }
		_files="$_files /proc/$_p/stat"
	done
	[ -n "$_files" ] || { echo "ticks_pids: no process given" >&2; exit 1; }
	# shellcheck disable=SC2086 # the paths hold no spaces
	awk '{s += $14 + $15} END {print s + 0}' $_files
}
# machine_line: the CPU model, cores, memory and kernel, for an output's
# "# machine:" line.
machine_line() {
	echo "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
}
# progress MESSAGE: one line on the standard error, "script: MESSAGE
# (HH:MM:SS UTC)", so that a sitting of minutes shows where it is (issue
# 23, step 46). The standard error: never in an output file.
progress() {
	printf '%s: %s (%s UTC)\n' "${0##*/}" "$*" "$(date -u +%H:%M:%S)" >&2
}
