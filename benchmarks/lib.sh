# lib.sh: helpers the sitting scripts share (cache.sh, nginx.sh, table.sh).
# Source it: . benchmarks/lib.sh. POSIX sh.

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

# start_redis DIR: a Redis of the script's own, on a free port, keeping
# nothing on disk, capped at 256 MB and evicting the least frequently used
# keys, as docs/05 says a cache must. Sets redis_port; its log goes in DIR.
# The caller stops it with: redis-cli -p "$redis_port" shutdown nosave
start_redis() {
	command -v redis-server >/dev/null || { echo "redis-server not found" >&2; exit 1; }
	redis_port=$(freeport)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--maxmemory 256mb --maxmemory-policy allkeys-lfu --daemonize yes \
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

# seeded_db ADMIN_URL ROWS: create the database named $db (the caller picks
# the name first, so that its cleanup can drop it whatever happens), apply
# sql/schema.sql, seed ROWS links with sql/seed.sql. Sets dburl, the new
# database's URL, and code, the code of the middle seeded link.
seeded_db() {
	_root=$(git rev-parse --show-toplevel)
	psql "$1" -qc "CREATE DATABASE $db" >/dev/null
	_nq=${1%%\?*}
	dburl="${_nq%/*}/$db${1#"$_nq"}"
	psql "$dburl" -q -f "$_root/sql/schema.sql" >/dev/null
	psql "$dburl" -q -v rows="$2" -f "$_root/sql/seed.sql" >/dev/null
	code=$(psql "$dburl" -Atc "select code from links where url = 'https://example.com/seed/$(($2 / 2))'")
}
