#!/usr/bin/env bash
# Runs a streaming replica of a PostgreSQL server on this machine.
#
#   deploy/replica.sh up       pg_basebackup from the primary, then start the copy
#                              as a hot standby on 127.0.0.1:$REPLICA_PORT
#   deploy/replica.sh lag      the primary's view of it (pg_stat_replication)
#   deploy/replica.sh status   whether it runs, and how far behind it is
#   deploy/replica.sh down     stop it and delete its data directory
#
# Settings: PRIMARY_URL (ADMIN_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres), a
# superuser or a role with REPLICATION; REPLICA_PORT (5433); REPLICA_DIR
# (.replica under the repository: data, log, socket). The app reads from it
# with DATABASE_REPLICA_URL=postgres://postgres@127.0.0.1:5433/<db>?sslmode=disable.
#
# The primary must allow replication connections from 127.0.0.1: a line such
# as "host replication postgres 127.0.0.1/32 trust" in its pg_hba.conf (up
# checks, and says which file). Run as root, the server runs as the user
# postgres (it refuses to run as root); the primary needs wal_level replica
# or logical (Postgres's default) and a free wal sender (max_wal_senders).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
primary=${PRIMARY_URL:-${ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}}
port=${REPLICA_PORT:-5433}
dir=${REPLICA_DIR:-.replica}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
data=$dir/data

die() { printf 'replica: %s\n' "$*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }
show() { case $1 in "$root"/*) printf '%s' "${1#"$root"/}" ;; *) printf '%s' "$1" ;; esac; }

# The server's programs: Debian keeps them out of PATH.
find_bin() {
	local b
	for b in "${PG_BIN:-}" "$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)")" /usr/lib/postgresql/*/bin; do
		if [ -n "$b" ] && [ -x "$b/pg_ctl" ] && [ -x "$b/pg_basebackup" ]; then
			bin=$b
			return 0
		fi
	done
	die "pg_ctl and pg_basebackup not found (Debian/Ubuntu: sudo apt-get install postgresql; or set PG_BIN)"
}

# as_pg runs a command as the user postgres when this script runs as root.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

running() { [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

cmd_up() {
	find_bin
	command -v psql >/dev/null || die "psql is missing"
	! running || die "already running from $(show "$dir"); deploy/replica.sh down first"
	psql "$primary" -XAtqc 'select 1' >/dev/null || die "the primary does not answer at $primary"
	local rules hba
	rules=$(psql "$primary" -XAtqc "select count(*) from pg_hba_file_rules where 'replication' = any(database) and error is null")
	if [ "$rules" = 0 ]; then
		hba=$(psql "$primary" -XAtqc 'show hba_file')
		die "the primary allows no replication connections: add a line like
  host replication postgres 127.0.0.1/32 trust
to $hba (as its owner), then: psql '$primary' -c 'select pg_reload_conf()'"
	fi
	rm -rf "$data"
	mkdir -p "$dir"
	if [ "$(id -u)" = 0 ]; then
		chown postgres "$dir"
		as_pg test -w "$dir" || die "the user postgres cannot write $dir: every directory above it must be searchable by others (chmod o+x)"
	fi
	local host pgport user
	host=$(psql "$primary" -XAtqc 'select coalesce(host(inet_server_addr()), $$127.0.0.1$$)')
	pgport=$(psql "$primary" -XAtqc 'show port')
	user=$(psql "$primary" -XAtqc 'select current_user')
	say "pg_basebackup from $host:$pgport into $(show "$data")"
	local t0=$SECONDS
	# -R writes standby.signal and primary_conninfo: the copy starts as a
	# standby that streams WAL from the primary. -X stream fetches the WAL
	# made during the copy, so that the copy is consistent.
	as_pg "$bin/pg_basebackup" -h "$host" -p "$pgport" -U "$user" -D "$data" -R -X stream -c fast
	say "copied in $((SECONDS - t0)) s: $(du -sh "$data" | cut -f1)"
	# Debian keeps postgresql.conf and pg_hba.conf in /etc, outside the
	# data directory pg_basebackup copies: the replica gets its own.
	cat >"$data/postgresql.conf" <<EOF
# Written by deploy/replica.sh: a hot standby of $host:$pgport.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
hot_standby = on
max_connections = 100
shared_buffers = 128MB
# Tell the primary how far it has got, often, for deploy/replica.sh lag.
wal_receiver_status_interval = 1s
hot_standby_feedback = on
EOF
	cat >"$data/pg_hba.conf" <<EOF
local all all trust
host all all 127.0.0.1/32 trust
EOF
	[ "$(id -u)" != 0 ] || chown -R postgres "$data"
	as_pg "$bin/pg_ctl" -D "$data" -l "$dir/log" -w start >/dev/null
	say "replica: on 127.0.0.1:$port, log $(show "$dir")/log"
	say "reads:   DATABASE_REPLICA_URL=postgres://$user@127.0.0.1:$port/<database>?sslmode=disable"
	say "stop:    deploy/replica.sh down"
}

cmd_lag() {
	psql "$primary" -XAc "select application_name, state, sync_state,
  pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) as bytes_behind,
  write_lag, flush_lag, replay_lag
from pg_stat_replication"
}

cmd_status() {
	find_bin
	if running; then
		say "replica: running from $(show "$data") on 127.0.0.1:$port"
		cmd_lag
	else
		say "replica: not running ($(show "$data"))"
		return 1
	fi
}

cmd_down() {
	find_bin
	if running; then
		as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
		say "replica: stopped"
	fi
	rm -rf "$dir"
	say "replica: $(show "$dir") deleted"
}

case ${1:-} in
up) cmd_up ;;
lag) cmd_lag ;;
status) cmd_status ;;
down) cmd_down ;;
*) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
