#!/usr/bin/env bash
# Runs, as the current user, a private Postgres and Redis for the shortener,
# and on request nginx and Prometheus, all in a folder of the clone that git
# ignores (.services/), on ports that do not clash with the system's own.
#
#   deploy/services.sh up [--nginx] [--prometheus]
#                              start what is not running yet, then print the
#                              export lines: eval "$(deploy/services.sh up)"
#   deploy/services.sh env     print the export lines again
#   deploy/services.sh status  what runs, and on which port
#   deploy/services.sh down    stop everything it started (data is kept),
#                              and print unset lines: eval "$(deploy/services.sh down)"
#   deploy/services.sh clean   down, then delete the folder and its data
#
# Messages go to stderr, so stdout holds only the lines to eval.
#
# Postgres (25432): initdb with trust authentication, listening on 127.0.0.1
# only, its socket inside the folder; the user postgres, a database
# shortener. Redis (27379): no persistence. With --nginx (or NGINX=1): nginx
# on 28080 with deploy/nginx.conf, in front of the app at 127.0.0.1:8080.
# With --prometheus (or PROMETHEUS=1): Prometheus on 29090 with
# deploy/prometheus.yml, scraping the app's metrics at 127.0.0.1:6060.
#
# Run as root, Postgres (which refuses to run as root) runs as the user
# postgres (PG_USER), which owns its data folder and must be able to reach
# the clone (o+x on every parent folder).
#
# Settings: SERVICES_DIR (.services), PG_PORT (25432), REDIS_PORT (27379),
# NGINX_PORT (28080), APP_PORT (8080: where nginx sends requests),
# PROMETHEUS_PORT (29090), METRICS_TARGET (127.0.0.1:6060: what Prometheus
# scrapes), PG_BIN (the folder holding initdb and pg_ctl, when not found),
# PG_USER (postgres: who runs Postgres when this runs as root). Later
# commands read the ports that up recorded; pass the same SERVICES_DIR.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

dir=${SERVICES_DIR:-.services}
dir=${dir%/}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
pg_data=$dir/postgres
redis_dir=$dir/redis
ngx_dir=$dir/nginx
prom_dir=$dir/prometheus
pg_user=${PG_USER:-postgres}

say() { printf '%s\n' "$*" >&2; }
# die also prints "false" on stdout, which is what eval reads: so that
# eval "$(deploy/services.sh up)" fails as the script did, instead of
# going on with whatever was set before.
die() {
	printf 'services: %s\n' "$*" >&2
	echo false
	exit 1
}
show() { case $1 in "$root"/*) printf '%s' "${1#"$root"/}" ;; *) printf '%s' "$1" ;; esac; }

usage() {
	# The comment at the top of this file.
	awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0" >&2
	exit 2
}

whole_number() {
	case $2 in
	'' | *[!0-9]*) die "$1=$2: want a port number" ;;
	esac
}

# missing NAME DEBIAN BREW: the binary is not installed; say what installs it.
missing() {
	die "$1 not found. Install it with:
  Debian/Ubuntu: sudo apt-get install $2
  macOS:         brew install $3
(the system's service need not run: this script starts its own in $(show "$dir"))"
}

# find_pg sets pg_bin to a folder holding initdb and pg_ctl: PG_BIN, PATH,
# then where Debian and Homebrew put them (Debian keeps them out of PATH).
# The newest version wins. A symlink is followed to its folder, where the
# postgres binary that pg_ctl starts lives too.
find_pg() {
	local b cand=()
	[ -z "${PG_BIN:-}" ] || cand+=("$PG_BIN")
	if b=$(command -v initdb 2>/dev/null); then
		cand+=("$(dirname "$(readlink -f "$b" 2>/dev/null || printf '%s' "$b")")")
	fi
	while IFS= read -r b; do cand+=("$b"); done < <(
		ls -d /usr/lib/postgresql/*/bin /opt/homebrew/opt/postgresql@*/bin \
			/usr/local/opt/postgresql@*/bin 2>/dev/null | sort -t/ -k4,4 -V -r || true
	)
	for b in "${cand[@]}"; do
		if [ -x "$b/initdb" ] && [ -x "$b/pg_ctl" ]; then
			pg_bin=$b
			return 0
		fi
	done
	missing "PostgreSQL (initdb, pg_ctl)" postgresql postgresql@15
}

find_redis() {
	local b
	for b in "$(command -v redis-server 2>/dev/null || true)" /usr/bin/redis-server \
		/opt/homebrew/bin/redis-server /usr/local/bin/redis-server; do
		if [ -n "$b" ] && [ -x "$b" ]; then
			redis_bin=$b
			return 0
		fi
	done
	missing redis-server redis-server redis
}

find_nginx() {
	local b
	for b in "$(command -v nginx 2>/dev/null || true)" /usr/sbin/nginx /usr/local/sbin/nginx \
		/opt/homebrew/bin/nginx /usr/local/bin/nginx; do
		if [ -n "$b" ] && [ -x "$b" ]; then
			nginx_bin=$b
			return 0
		fi
	done
	missing nginx nginx nginx
}

find_prometheus() {
	local b
	for b in "$(command -v prometheus 2>/dev/null || true)" /usr/bin/prometheus \
		/opt/homebrew/bin/prometheus /usr/local/bin/prometheus; do
		if [ -n "$b" ] && [ -x "$b" ]; then
			prom_bin=$b
			return 0
		fi
	done
	missing prometheus prometheus prometheus
}

# as_pg runs a command as the user that runs Postgres: the current user, or
# PG_USER when this runs as root.
as_pg() {
	if [ "$(id -u)" != 0 ]; then
		"$@"
	elif command -v runuser >/dev/null; then
		runuser -u "$pg_user" -- "$@"
	else
		su "$pg_user" -s /bin/sh -c "$(printf '%q ' "$@")"
	fi
}

# listening PORT: true if something accepts connections on 127.0.0.1:PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# port_free PORT NAME VAR: fail clearly when the port is taken.
port_free() {
	if listening "$1"; then
		die "$2: something already listens on 127.0.0.1:$1 (not started from $(show "$dir")); choose another port: $3=<port> deploy/services.sh up"
	fi
}

# alive PID NAME: PID runs and is NAME, not a zombie nor a recycled pid.
alive() {
	local out
	[ -n "$1" ] || return 1
	out=$(ps -p "$1" -o stat= -o comm= 2>/dev/null) || return 1
	case $out in
	Z*) return 1 ;;
	*"$2"*) return 0 ;;
	*) return 1 ;;
	esac
}

read_pid() { [ ! -f "$1" ] || head -n 1 "$1"; }

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds, at most SECONDS.
wait_for() {
	local what=$1 secs=$2 deadline
	shift 2
	deadline=$((SECONDS + secs))
	until "$@"; do
		[ "$SECONDS" -lt "$deadline" ] || {
			say "services: $what did not come up within ${secs}s"
			return 1
		}
		sleep 0.1
	done
}

# load_ports reads the ports that up recorded, else the settings. The
# defaults are below 32768, outside the ports the kernel gives outgoing
# connections (Linux 32768-60999, macOS 49152-65535): a client connection
# that used the port and sits in TIME_WAIT would stop the server binding it
# for a minute, though nothing listens there.
load_ports() {
	pg_port=${PG_PORT:-25432} redis_port=${REDIS_PORT:-27379}
	nginx_port=${NGINX_PORT:-28080} prom_port=${PROMETHEUS_PORT:-29090}
	if [ -f "$dir/ports" ]; then
		read -r pg_port redis_port nginx_port prom_port <"$dir/ports"
	fi
}

pg_pid() {
	local pid
	pid=$(read_pid "$pg_data/postmaster.pid" 2>/dev/null || true)
	if alive "$pid" postgres; then printf '%s' "$pid"; fi
}
redis_pid() {
	local pid
	pid=$(read_pid "$redis_dir/redis.pid")
	if alive "$pid" redis; then printf '%s' "$pid"; fi
}
nginx_pid() {
	local pid
	pid=$(read_pid "$ngx_dir/nginx.pid")
	if alive "$pid" nginx; then printf '%s' "$pid"; fi
}
prom_pid() {
	local pid
	pid=$(read_pid "$prom_dir/prometheus.pid")
	if alive "$pid" prometheus; then printf '%s' "$pid"; fi
}

up_postgres() {
	if [ -n "$(pg_pid)" ]; then
		say "postgres: already running (pid $(pg_pid)) on 127.0.0.1:$pg_port"
		return 0
	fi
	find_pg
	port_free "$pg_port" postgres PG_PORT
	if [ ! -f "$pg_data/PG_VERSION" ]; then
		mkdir -p "$pg_data"
		chmod 700 "$pg_data"
		if [ "$(id -u)" = 0 ]; then
			id "$pg_user" >/dev/null 2>&1 ||
				die "running as root, and there is no user $pg_user to run Postgres (it refuses to run as root); create one, or set PG_USER"
			chown "$pg_user" "$pg_data"
			as_pg test -w "$pg_data" ||
				die "the user $pg_user cannot write $(show "$pg_data"): every parent folder of the clone must be reachable by it (chmod o+x)"
		fi
		say "postgres: initdb in $(show "$pg_data") ($pg_bin)"
		as_pg "$pg_bin/initdb" -D "$pg_data" -U postgres --auth=trust -E UTF8 --locale=C \
			>"$dir/initdb.log" 2>&1 || {
			cat "$dir/initdb.log" >&2
			rm -rf "$pg_data"
			die "initdb failed"
		}
		# A socket path longer than about 100 bytes is refused at start:
		# then TCP only, which is all the app and the tests use.
		local sockets=$pg_data
		[ "${#sockets}" -le 80 ] || sockets=
		# Only this machine may connect: trust needs nothing else to guard it.
		cat >>"$pg_data/postgresql.conf" <<-EOF

			# Written by deploy/services.sh.
			listen_addresses = '127.0.0.1'
			port = $pg_port
			unix_socket_directories = '$sockets'
		EOF
	fi
	# The port in the config may be an older one: -o overrides it.
	as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_data/log" -w -t 30 \
		-o "-p $pg_port -c listen_addresses=127.0.0.1" start >/dev/null || {
		tail -n 20 "$pg_data/log" >&2 || true
		die "postgres did not start; its log: $(show "$pg_data")/log"
	}
	local out
	if ! out=$(as_pg "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres shortener 2>&1); then
		case $out in
		*"already exists"*) ;;
		*) die "create database shortener: $out" ;;
		esac
	fi
	say "postgres: pid $(pg_pid) on 127.0.0.1:$pg_port, data and log in $(show "$pg_data")"
}

up_redis() {
	if [ -n "$(redis_pid)" ]; then
		say "redis: already running (pid $(redis_pid)) on 127.0.0.1:$redis_port"
		return 0
	fi
	find_redis
	port_free "$redis_port" redis REDIS_PORT
	mkdir -p "$redis_dir"
	# No persistence: a cache that starts empty is what the app expects.
	"$redis_bin" --daemonize yes --bind 127.0.0.1 --port "$redis_port" \
		--save '' --appendonly no --dir "$redis_dir" \
		--pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log" ||
		die "redis-server did not start; its log: $(show "$redis_dir")/redis.log"
	wait_for redis 15 listening "$redis_port" || {
		tail -n 20 "$redis_dir/redis.log" >&2 || true
		die "redis did not start; its log: $(show "$redis_dir")/redis.log"
	}
	wait_for "redis's pid file" 5 test -s "$redis_dir/redis.pid" || die "redis wrote no pid file"
	say "redis: pid $(redis_pid) on 127.0.0.1:$redis_port, log $(show "$redis_dir")/redis.log"
}

up_nginx() {
	local app=${APP_PORT:-8080}
	whole_number APP_PORT "$app"
	if [ -n "$(nginx_pid)" ]; then
		say "nginx: already running (pid $(nginx_pid)) on 127.0.0.1:$nginx_port"
		return 0
	fi
	find_nginx
	port_free "$nginx_port" nginx NGINX_PORT
	mkdir -p "$ngx_dir/temp"
	cp deploy/nginx.conf "$ngx_dir/nginx.conf"
	printf 'listen 127.0.0.1:%s;\n' "$nginx_port" >"$ngx_dir/listen.conf"
	printf 'server 127.0.0.1:%s max_fails=3 fail_timeout=3s;\n' "$app" >"$ngx_dir/upstreams.conf"
	printf 'access_log off;\n' >"$ngx_dir/logging.conf"
	# The other files nginx.conf includes, as deploy/replicas.sh writes
	# them by default: connections per client, upstream keep-alive, no TLS.
	printf 'limit_conn per_client 100;\n' >"$ngx_dir/limit_conn.conf"
	printf 'keepalive 32;\nkeepalive_timeout 30s;\nkeepalive_requests 10000;\n' >"$ngx_dir/upstream_keepalive.conf"
	: >"$ngx_dir/tls.conf"
	"$nginx_bin" -p "$ngx_dir/" -c "$ngx_dir/nginx.conf" -e "$ngx_dir/error.log" || {
		tail -n 20 "$ngx_dir/error.log" >&2 || true
		die "nginx did not start; its log: $(show "$ngx_dir")/error.log"
	}
	# nginx forks into the background before it writes its pid file.
	wait_for nginx 10 test -n "$(nginx_pid)" || die "nginx wrote no pid file"
	wait_for nginx 10 listening "$nginx_port" || die "nginx does not listen on 127.0.0.1:$nginx_port"
	say "nginx: pid $(nginx_pid) on 127.0.0.1:$nginx_port, in front of the app at 127.0.0.1:$app (ADDR=127.0.0.1:$app)"
}

up_prometheus() {
	local target=${METRICS_TARGET:-127.0.0.1:6060} pid
	if [ -n "$(prom_pid)" ]; then
		say "prometheus: already running (pid $(prom_pid)) on 127.0.0.1:$prom_port"
		return 0
	fi
	find_prometheus
	port_free "$prom_port" prometheus PROMETHEUS_PORT
	mkdir -p "$prom_dir"
	cp deploy/prometheus.yml "$prom_dir/prometheus.yml"
	cp deploy/alerts.yml "$prom_dir/alerts.yml"
	printf '[{"labels": {"deployment": "services"}, "targets": ["%s"]}]\n' "$target" >"$prom_dir/targets.json"
	# nohup: closing the terminal that ran up must not stop it.
	nohup "$prom_bin" --config.file="$prom_dir/prometheus.yml" --storage.tsdb.path="$prom_dir/data" \
		--storage.tsdb.retention.time=2h --web.listen-address="127.0.0.1:$prom_port" \
		</dev/null >>"$prom_dir/prometheus.log" 2>&1 &
	pid=$!
	printf '%s\n' "$pid" >"$prom_dir/prometheus.pid"
	ready() { alive "$pid" prometheus && (exec 3<>"/dev/tcp/127.0.0.1/$prom_port") 2>/dev/null; }
	wait_for prometheus 30 ready || {
		tail -n 20 "$prom_dir/prometheus.log" >&2 || true
		die "prometheus did not start; its log: $(show "$prom_dir")/prometheus.log"
	}
	say "prometheus: pid $pid on 127.0.0.1:$prom_port, scraping $target, log $(show "$prom_dir")/prometheus.log"
}

print_env() {
	[ -f "$dir/ports" ] || die "nothing was started from $(show "$dir"); run: deploy/services.sh up"
	load_ports
	local admin="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
	printf "export DATABASE_URL='postgres://postgres@127.0.0.1:%s/shortener?sslmode=disable'\n" "$pg_port"
	printf "export REDIS_URL='redis://127.0.0.1:%s/0'\n" "$redis_port"
	printf "export TEST_DATABASE_URL='%s'\n" "$admin"
	printf "export TEST_REDIS_URL='redis://127.0.0.1:%s/0'\n" "$redis_port"
	# What benchmarks/*.sh make and drop their databases with.
	printf "export ADMIN_DATABASE_URL='%s'\n" "$admin"
}

# stop PID NAME SIGNAL: signal, then wait up to 15 s; SIGKILL past that.
stop() {
	local pid=$1 name=$2 deadline=$((SECONDS + 15))
	[ -n "$pid" ] || return 0
	kill -s "$3" "$pid" 2>/dev/null || true
	while alive "$pid" "$name"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			say "services: $name (pid $pid) still runs 15s after SIG$3; sending SIGKILL"
			kill -s KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	say "$name: stopped (pid $pid)"
}

cmd_up() {
	local want_nginx=${NGINX:-} want_prom=${PROMETHEUS:-} a
	for a in "$@"; do
		case $a in
		--nginx) want_nginx=1 ;;
		--prometheus) want_prom=1 ;;
		*) usage ;;
		esac
	done
	load_ports
	[ -f "$dir/ports" ] || {
		whole_number PG_PORT "$pg_port"
		whole_number REDIS_PORT "$redis_port"
		whole_number NGINX_PORT "$nginx_port"
		whole_number PROMETHEUS_PORT "$prom_port"
	}
	mkdir -p "$dir"
	if [ "$(id -u)" = 0 ]; then
		# The user that runs Postgres must reach its data folder inside.
		chmod o+x "$dir"
	fi
	printf '%s %s %s %s\n' "$pg_port" "$redis_port" "$nginx_port" "$prom_port" >"$dir/ports"
	# A failed up that left nothing running forgets the ports, so that the
	# next up takes the settings again.
	trap 'forget_ports' EXIT
	up_postgres
	up_redis
	[ "$want_nginx" != 1 ] || up_nginx
	[ "$want_prom" != 1 ] || up_prometheus
	trap - EXIT
	say "stop:  deploy/services.sh down"
	print_env
}

forget_ports() {
	if [ -z "$(pg_pid)$(redis_pid)$(nginx_pid)$(prom_pid)" ]; then
		rm -f "$dir/ports"
	fi
}

cmd_down() {
	local pid
	load_ports
	pid=$(prom_pid)
	[ -z "$pid" ] || stop "$pid" prometheus TERM
	# SIGQUIT: nginx finishes the requests in flight, then exits.
	pid=$(nginx_pid)
	[ -z "$pid" ] || stop "$pid" nginx QUIT
	pid=$(redis_pid)
	[ -z "$pid" ] || stop "$pid" redis TERM
	pid=$(pg_pid)
	if [ -n "$pid" ]; then
		# Fast shutdown: open connections are closed, not waited for.
		stop "$pid" postgres INT
	fi
	rm -f "$dir/ports"
	[ -n "${cleaning:-}" ] || say "down: stopped; nothing from $(show "$dir") runs, its data is still there (deploy/services.sh clean deletes it)"
	printf 'unset DATABASE_URL REDIS_URL TEST_DATABASE_URL TEST_REDIS_URL ADMIN_DATABASE_URL\n'
}

cmd_status() {
	local pid ok=0
	load_ports
	pid=$(pg_pid)
	if [ -n "$pid" ]; then say "postgres: pid $pid on 127.0.0.1:$pg_port"; else say "postgres: not running"; ok=1; fi
	pid=$(redis_pid)
	if [ -n "$pid" ]; then say "redis: pid $pid on 127.0.0.1:$redis_port"; else say "redis: not running"; ok=1; fi
	pid=$(nginx_pid)
	if [ -n "$pid" ]; then say "nginx: pid $pid on 127.0.0.1:$nginx_port"; else say "nginx: not running (up --nginx starts it)"; fi
	pid=$(prom_pid)
	if [ -n "$pid" ]; then say "prometheus: pid $pid on 127.0.0.1:$prom_port"; else say "prometheus: not running (up --prometheus starts it)"; fi
	return "$ok"
}

cmd_clean() {
	cleaning=1 cmd_down >/dev/null
	rm -rf "$dir"
	say "clean: deleted $(show "$dir")"
	printf 'unset DATABASE_URL REDIS_URL TEST_DATABASE_URL TEST_REDIS_URL ADMIN_DATABASE_URL\n'
}

cmd=${1:-}
[ $# -eq 0 ] || shift
case $cmd in
up) cmd_up "$@" ;;
env) print_env ;;
status) cmd_status ;;
down) cmd_down ;;
clean) cmd_clean ;;
*) usage ;;
esac
