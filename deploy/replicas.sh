#!/usr/bin/env bash
# Runs several copies of the shortener behind nginx, on one machine.
#
#   deploy/replicas.sh up N      build once, start N instances on 127.0.0.1:8081..,
#                                wait for each /healthz, then nginx on 127.0.0.1:8080
#                                (and [::1]:8080 where the machine has IPv6)
#   deploy/replicas.sh status    what runs, and whether each instance answers
#   deploy/replicas.sh restart   rolling restart: one instance at a time
#   deploy/replicas.sh kill I    kill -9 instance I (to watch nginx route around it)
#   deploy/replicas.sh down      stop everything this script started
#   deploy/replicas.sh check [N] nginx -t on deploy/nginx.conf, starting nothing
#
# The instances get the caller's environment (DATABASE_URL, REDIS_URL, ...),
# plus, unless already set: BASE_URL=http://127.0.0.1:$NGINX_PORT (with TLS
# on, https://127.0.0.1:$NGINX_TLS_PORT),
# TRUSTED_PROXIES=127.0.0.1/32,::1/128, and with DATABASE_URL a pool size that
# lets N instances fit in Postgres's max_connections. restart reuses the
# environment that up saw; to change a setting, run down, then up.
#
# With PROMETHEUS=1, up also starts Prometheus (deploy/prometheus.yml) on
# 127.0.0.1:$PROMETHEUS_PORT, scraping every instance's /metrics each second.
#
# Settings: NGINX_PORT (8080), APP_PORT_BASE (8081: instance i listens on
# base+i-1), METRICS_PORT_BASE (6061: instance i's METRICS_ADDR is
# 127.0.0.1:base+i-1; METRICS_ADDR=off turns metrics off), PROMETHEUS_PORT
# (9090), REPLICAS_DIR (.replicas under the repository: binary, pid files,
# logs, nginx's config and logs), NGINX_ACCESS_LOG=1 (access log on),
# NGINX_LIMIT_CONN (100: requests in progress per client address; a load
# generator is one address for many clients, so benchmarks raise it),
# NGINX_IPV6 (0 or 1: nginx also listens on [::1]:$NGINX_PORT; by default
# when the machine has ::1),
# NGINX_TLS_CERT and NGINX_TLS_KEY (PEM files: nginx also ends TLS, HTTP/2
# and HTTP/1.1, on NGINX_TLS_PORT, 8443), NGINX_TLS_RESUME (1: session
# cache and tickets; 0: a full handshake every time),
# NGINX_UPSTREAM_KEEPALIVE (32: idle connections nginx keeps to the
# instances; 0: a new connection per request),
# DB_RESERVE_CONNS (20: Postgres connections left for everything else).
# Later commands read the ports from REPLICAS_DIR; pass the same REPLICAS_DIR.
set -euo pipefail

caller=$(pwd) # relative paths in settings are from here
cd "$(dirname "$0")/.."
root=$(pwd)

state=${REPLICAS_DIR:-.replicas}
state=${state%/}
case $state in
/*) abs_state=$state ;;
*) abs_state=$root/$state ;;
esac
ngx_dir=$abs_state/nginx
prom_dir=$abs_state/prometheus

# An instance that fails max_fails times within fail_timeout is left out
# for fail_timeout (deploy/nginx.conf explains the choice). restart waits a
# little longer than fail_timeout after each instance, so that nginx has put
# it back before the next one stops.
max_fails=3
fail_timeout=3

health_wait=${HEALTH_WAIT:-15} # seconds for an instance's /healthz to answer
# Seconds between SIGTERM and SIGKILL. Longer than the app's whole shutdown
# (shutdownTimeout in main.go, 15 s), so that a slow stop ends on the app's
# own deadline, with its clicks drained or counted lost, not on a SIGKILL.
stop_wait=${STOP_WAIT:-20}

say() { printf '%s\n' "$*"; }
warn() { printf 'replicas: %s\n' "$*" >&2; }
die() {
	warn "$*"
	exit 1
}

# show prints a path relative to the repository when it is inside it.
show() {
	case $1 in
	"$root"/*) printf '%s' "${1#"$root"/}" ;;
	*) printf '%s' "$1" ;;
	esac
}

usage() {
	sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

whole_number() {
	case $2 in
	'' | *[!0-9]*) die "$1=$2: want a whole number" ;;
	esac
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

read_pid() {
	if [ -f "$1" ]; then
		cat "$1"
	fi
}

app_pidfile() { printf '%s/app-%s.pid' "$abs_state" "$1"; }
app_log() { printf '%s/app-%s.log' "$abs_state" "$1"; }
app_port() { printf '%s' $((app_base + $1 - 1)); }
metrics_port() { printf '%s' $((metrics_base + $1 - 1)); }

# load_state reads the replica count and ports that up recorded.
load_state() {
	[ -f "$abs_state/replicas" ] || die "nothing started from $(show "$abs_state") (no $(show "$abs_state")/replicas); run: deploy/replicas.sh up N"
	read -r count nginx_port app_base metrics_base prom_port <"$abs_state/replicas"
	# (State written before metrics existed has three fields.)
	[ -n "$metrics_base" ] || die "$(show "$abs_state")/replicas is from an older version of this script; run deploy/replicas.sh down, then up"
}

find_nginx() {
	local p
	for p in "$(command -v nginx 2>/dev/null || true)" /usr/sbin/nginx /usr/local/sbin/nginx /opt/homebrew/bin/nginx /usr/local/bin/nginx; do
		if [ -n "$p" ] && [ -x "$p" ]; then
			nginx_bin=$p
			return 0
		fi
	done
	warn "nginx is not installed. Install it with:"
	warn "  Debian/Ubuntu: sudo apt-get install nginx"
	warn "  macOS:         brew install nginx"
	warn "(this script runs its own nginx from $(show "$ngx_dir"); the system's nginx need not run)"
	exit 1
}

# ngx runs nginx with every path inside the state directory; -e sets the
# error log before the config is read, so even a config error stays there.
ngx() {
	"$nginx_bin" -p "$ngx_dir/" -c "$ngx_dir/nginx.conf" -e "$ngx_dir/error.log" "$@"
}

# write_nginx_conf N PORT BASE: deploy/nginx.conf as is, and the six small
# files it includes.
write_nginx_conf() {
	local n=$1 port=$2 base=$3 i
	mkdir -p "$ngx_dir/temp"
	cp deploy/nginx.conf "$ngx_dir/nginx.conf"
	{
		printf 'listen 127.0.0.1:%s;\n' "$port"
		if ipv6_loopback; then
			printf 'listen [::1]:%s;\n' "$port"
		fi
	} >"$ngx_dir/listen.conf"
	: >"$ngx_dir/upstreams.conf"
	for i in $(seq 1 "$n"); do
		printf 'server 127.0.0.1:%s max_fails=%s fail_timeout=%ss;\n' \
			$((base + i - 1)) "$max_fails" "$fail_timeout" >>"$ngx_dir/upstreams.conf"
	done
	whole_number NGINX_LIMIT_CONN "${NGINX_LIMIT_CONN:-100}"
	printf 'limit_conn per_client %s;\n' "${NGINX_LIMIT_CONN:-100}" >"$ngx_dir/limit_conn.conf"
	if [ "${NGINX_ACCESS_LOG:-}" = 1 ]; then
		say 'access_log access.log upstream buffer=64k flush=1s;' >"$ngx_dir/logging.conf"
	else
		say 'access_log off;' >"$ngx_dir/logging.conf"
	fi
	local ka=${NGINX_UPSTREAM_KEEPALIVE:-32}
	whole_number NGINX_UPSTREAM_KEEPALIVE "$ka"
	if [ "$ka" = 0 ]; then
		say '# NGINX_UPSTREAM_KEEPALIVE=0: a new connection to an instance for every request' >"$ngx_dir/upstream_keepalive.conf"
	else
		printf 'keepalive %s;\nkeepalive_timeout 30s;\nkeepalive_requests 10000;\n' "$ka" >"$ngx_dir/upstream_keepalive.conf"
	fi
	: >"$ngx_dir/tls.conf"
	if tls_on; then
		local tport=${NGINX_TLS_PORT:-8443}
		{
			printf 'listen 127.0.0.1:%s ssl http2;\n' "$tport"
			if ipv6_loopback; then
				printf 'listen [::1]:%s ssl http2;\n' "$tport"
			fi
		} >>"$ngx_dir/listen.conf"
		{
			printf 'ssl_certificate %s;\nssl_certificate_key %s;\n' "$(abs_path "$NGINX_TLS_CERT")" "$(abs_path "$NGINX_TLS_KEY")"
			say 'ssl_protocols TLSv1.2 TLSv1.3;'
			case ${NGINX_TLS_RESUME:-1} in
			1)
				say '# A returning client resumes its session (one round trip, no signature):'
				say '# by a ticket it holds, or by an id kept in this cache, shared by the workers.'
				say 'ssl_session_cache shared:tls:10m;'
				say 'ssl_session_timeout 1h;'
				say 'ssl_session_tickets on;'
				;;
			0)
				say '# NGINX_TLS_RESUME=0: every connection pays a full handshake.'
				say 'ssl_session_cache off;'
				say 'ssl_session_tickets off;'
				;;
			*) die "NGINX_TLS_RESUME=${NGINX_TLS_RESUME}: want 1 or 0" ;;
			esac
		} >"$ngx_dir/tls.conf"
	fi
}

# tls_on: NGINX_TLS_CERT and NGINX_TLS_KEY are set (both, or it dies),
# and readable.
tls_on() {
	[ -n "${NGINX_TLS_CERT:-}${NGINX_TLS_KEY:-}" ] || return 1
	[ -n "${NGINX_TLS_CERT:-}" ] && [ -n "${NGINX_TLS_KEY:-}" ] || die "set NGINX_TLS_CERT and NGINX_TLS_KEY together, or neither"
	[ -r "$(abs_path "$NGINX_TLS_CERT")" ] || die "NGINX_TLS_CERT=$NGINX_TLS_CERT: cannot read it"
	[ -r "$(abs_path "$NGINX_TLS_KEY")" ] || die "NGINX_TLS_KEY=$NGINX_TLS_KEY: cannot read it"
	whole_number NGINX_TLS_PORT "${NGINX_TLS_PORT:-8443}"
}

# abs_path FILE: FILE from /, a relative one taken from where this script
# was called (nginx would read it from its prefix, the state directory).
abs_path() {
	case $1 in
	/*) say "$1" ;;
	*) say "$caller/$1" ;;
	esac
}

# ipv6_loopback: true if ::1 is configured, so that nginx can listen on it
# beside 127.0.0.1 (a container may have IPv6 off; nginx would then fail to
# bind). NGINX_IPV6=0 or 1 decides instead.
ipv6_loopback() {
	case ${NGINX_IPV6:-} in
	0) return 1 ;;
	1) return 0 ;;
	esac
	if [ -r /proc/net/if_inet6 ]; then
		grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6
	else
		ifconfig lo0 2>/dev/null | grep -q 'inet6 ::1 '
	fi
}

# nginx_where PORT: the addresses listen.conf names, for the messages.
nginx_where() {
	if grep -q '::1' "$ngx_dir/listen.conf" 2>/dev/null; then
		printf '127.0.0.1:%s and [::1]:%s' "$1" "$1"
	else
		printf '127.0.0.1:%s' "$1"
	fi
}

nginx_pid() {
	local pid
	pid=$(read_pid "$ngx_dir/nginx.pid")
	if alive "$pid" nginx; then
		printf '%s' "$pid"
	fi
}

# port_free PORT LABEL [HOST]: true if nothing listens on HOST:PORT
# (127.0.0.1 by default; [::1] for IPv6). curl exits 7 when it cannot
# connect; anything else means the port is taken.
port_free() {
	local rc=0 host=${3:-127.0.0.1}
	curl -g -s -o /dev/null --max-time 1 "http://$host:$1/" || rc=$?
	[ "$rc" = 7 ] && return 0
	warn "$2: something already listens on $host:$1:"
	ss -ltnp 2>/dev/null | grep ":$1 " >&2 || true
	return 1
}

# start_instance I: runs instance I with the environment saved by up, its
# output appended to its log.
start_instance() {
	local i=$1 port log pid
	local -a envv=()
	port=$(app_port "$i")
	log=$(app_log "$i")
	port_free "$port" "instance $i" || return 1
	while IFS= read -r -d '' kv; do
		envv+=("$kv")
	done <"$abs_state/env"
	printf '=== %s: starting on 127.0.0.1:%s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$port" >>"$log"
	# Each instance its own metrics port, unless the saved environment
	# turns metrics off.
	case " ${envv[*]} " in
	*" METRICS_ADDR=off "*) ;;
	*)
		port_free "$(metrics_port "$i")" "instance $i's metrics" || return 1
		envv+=("METRICS_ADDR=127.0.0.1:$(metrics_port "$i")")
		;;
	esac
	# nohup: closing the terminal that ran up must not stop the instances.
	env -i "${envv[@]}" ADDR="127.0.0.1:$port" nohup "$abs_state/shortener" </dev/null >>"$log" 2>&1 &
	pid=$!
	printf '%s\n' "$pid" >"$(app_pidfile "$i")"
}

# wait_healthy I: until instance I answers /healthz, at most health_wait
# seconds; 1 if it exits or does not answer in time.
wait_healthy() {
	local i=$1 pid port deadline
	pid=$(read_pid "$(app_pidfile "$i")")
	port=$(app_port "$i")
	deadline=$((SECONDS + health_wait))
	while [ "$SECONDS" -lt "$deadline" ]; do
		if ! alive "$pid" shortener; then
			warn "instance $i (pid $pid) exited before answering /healthz; its log, $(show "$(app_log "$i")"):"
			tail -n 30 "$(app_log "$i")" >&2
			return 1
		fi
		if curl -fs -o /dev/null --max-time 1 "http://127.0.0.1:$port/healthz"; then
			return 0
		fi
		sleep 0.1
	done
	warn "instance $i (pid $pid) did not answer http://127.0.0.1:$port/healthz within ${health_wait}s; its log, $(show "$(app_log "$i")"):"
	tail -n 30 "$(app_log "$i")" >&2
	return 1
}

# stop_pid PID NAME SIGNAL LABEL: signal, then wait up to stop_wait seconds;
# SIGKILL if it is still there.
stop_pid() {
	local pid=$1 name=$2 sig=$3 label=$4 deadline
	alive "$pid" "$name" || return 0
	kill -s "$sig" "$pid" 2>/dev/null || true
	deadline=$((SECONDS + stop_wait))
	while alive "$pid" "$name"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			warn "$label (pid $pid) still runs ${stop_wait}s after SIG$sig; sending SIGKILL"
			kill -s KILL "$pid" 2>/dev/null || true
			sleep 0.2
			break
		fi
		sleep 0.1
	done
}

stop_instance() {
	local i=$1 pid
	pid=$(read_pid "$(app_pidfile "$i")")
	stop_pid "$pid" shortener TERM "instance $i"
	rm -f "$(app_pidfile "$i")"
}

stop_nginx() {
	local pid
	pid=$(nginx_pid)
	if [ -n "$pid" ]; then
		# SIGQUIT: finish the requests in flight, then exit.
		stop_pid "$pid" nginx QUIT nginx
		say "stopped nginx (pid $pid)"
	fi
	rm -f "$ngx_dir/nginx.pid"
}

prometheus_pid() {
	local pid
	pid=$(read_pid "$prom_dir/prometheus.pid")
	if alive "$pid" prometheus; then
		printf '%s' "$pid"
	fi
}

# start_prometheus N PORT: deploy/prometheus.yml, with a targets.json
# beside it naming the N instances' metrics addresses.
start_prometheus() {
	local n=$1 port=$2 i sep='' pid
	mkdir -p "$prom_dir"
	cp deploy/prometheus.yml "$prom_dir/prometheus.yml"
	cp deploy/alerts.yml "$prom_dir/alerts.yml"
	{
		printf '[{"labels": {"deployment": "replicas"}, "targets": ['
		for i in $(seq 1 "$n"); do
			printf '%s"127.0.0.1:%s"' "$sep" "$(metrics_port "$i")"
			sep=', '
		done
		printf ']}]\n'
	} >"$prom_dir/targets.json"
	nohup prometheus --config.file="$prom_dir/prometheus.yml" --storage.tsdb.path="$prom_dir/data" \
		--storage.tsdb.retention.time=2h --web.listen-address="127.0.0.1:$port" \
		</dev/null >>"$prom_dir/prometheus.log" 2>&1 &
	pid=$!
	printf '%s\n' "$pid" >"$prom_dir/prometheus.pid"
	local deadline=$((SECONDS + 15))
	until curl -fs -o /dev/null --max-time 1 "http://127.0.0.1:$port/-/ready"; do
		if ! alive "$pid" prometheus || [ "$SECONDS" -ge "$deadline" ]; then
			warn "prometheus did not become ready on 127.0.0.1:$port; $(show "$prom_dir")/prometheus.log:"
			tail -n 20 "$prom_dir/prometheus.log" >&2 || true
			return 1
		fi
		sleep 0.2
	done
}

# stop_all N: nginx first, so that no request is sent to an instance that is
# going away, then the instances, then Prometheus.
stop_all() {
	local n=$1 i pid
	stop_nginx
	for i in $(seq 1 "$n"); do
		pid=$(read_pid "$(app_pidfile "$i")")
		if alive "$pid" shortener; then
			stop_instance "$i"
			say "stopped instance $i (pid $pid)"
		fi
		rm -f "$(app_pidfile "$i")"
	done
	pid=$(prometheus_pid)
	if [ -n "$pid" ]; then
		stop_pid "$pid" prometheus TERM prometheus
		say "stopped prometheus (pid $pid)"
	fi
	rm -f "$prom_dir/prometheus.pid"
}

# running_anything: true if any pid file in the state directory names a
# live process of ours.
running_anything() {
	local f pid
	for f in "$abs_state"/app-*.pid; do
		[ -f "$f" ] || continue
		pid=$(read_pid "$f")
		alive "$pid" shortener && return 0
	done
	[ -n "$(nginx_pid)" ] || [ -n "$(prometheus_pid)" ]
}

# size_pool N: with DATABASE_URL, sets DB_MAX_OPEN_CONNS and DB_MAX_IDLE_CONNS
# so that N instances' pools fit in Postgres's max_connections, or refuses
# the caller's values if they do not fit. Pools are per process, and each
# instance has three: the request pool (DB_MAX_OPEN_CONNS), the background
# pool (2, step 40) and the lookups' pool (LOOKUP_WORKERS, 2 by default,
# with LOOKUP_BATCH above 1, step 42). Until step 42 only the first was
# counted.
size_pool() {
	local n=$1 maxc reserve budget per open side workers
	[ -n "${DATABASE_URL:-}" ] || return 0
	workers=${LOOKUP_WORKERS:-2}
	whole_number LOOKUP_WORKERS "$workers"
	[ "${LOOKUP_BATCH:-32}" != 1 ] || workers=0
	side=$((2 + workers))
	command -v psql >/dev/null ||
		die "DATABASE_URL is set but psql is missing, so the pools cannot be sized (Debian/Ubuntu: sudo apt-get install postgresql-client; macOS: brew install libpq)"
	maxc=$(psql "$DATABASE_URL" -XAtqc 'SHOW max_connections') ||
		die "cannot read max_connections from DATABASE_URL (is Postgres up?)"
	reserve=${DB_RESERVE_CONNS:-20}
	whole_number DB_RESERVE_CONNS "$reserve"
	budget=$((maxc - reserve))
	if [ -n "${DB_MAX_OPEN_CONNS:-}" ]; then
		open=$DB_MAX_OPEN_CONNS
		whole_number DB_MAX_OPEN_CONNS "$open"
		if [ "$open" -eq 0 ]; then
			die "DB_MAX_OPEN_CONNS=0 means no limit per instance, which cannot fit max_connections=$maxc; set a number, or unset it to have it computed"
		fi
		if [ $((n * (open + side))) -gt "$budget" ]; then
			die "postgres: $n instances × (DB_MAX_OPEN_CONNS $open + $side side connections) = $((n * (open + side))) > max_connections $maxc − reserve $reserve = $budget; lower DB_MAX_OPEN_CONNS or the number of instances"
		fi
		say "postgres: $n instances × (DB_MAX_OPEN_CONNS $open (yours) + $side side connections) = $((n * (open + side))) ≤ max_connections $maxc − reserve $reserve = $budget"
	else
		per=$((budget / n - side))
		open=$((per < 8 ? per : 8))
		if [ "$open" -lt 1 ]; then
			die "postgres: max_connections $maxc − reserve $reserve = $budget leaves no request-pool connection for each of $n instances beside their $side side connections; run fewer instances or raise max_connections"
		fi
		say "postgres: max_connections $maxc − reserve $reserve = $budget; floor($budget / $n) − $side side connections = $per; min(8, $per) = $open connections per instance; $n × ($open + $side) = $((n * (open + side)))"
	fi
	export DB_MAX_OPEN_CONNS=$open
	export DB_MAX_IDLE_CONNS=${DB_MAX_IDLE_CONNS:-$open}
}

find_go() {
	if command -v go >/dev/null; then
		go_bin=go
	elif [ -x /usr/local/go/bin/go ]; then
		go_bin=/usr/local/go/bin/go
	else
		die "go is not in PATH; install Go from https://go.dev/dl/"
	fi
}

# fail_up undoes a failed up: stops what it started and forgets the state.
fail_up() {
	warn "stopping what was started"
	stop_all "$count"
	rm -f "$abs_state/replicas" "$abs_state/env"
	exit 1
}

cmd_up() {
	local n=${1:-} i pid
	[ -n "$n" ] || usage
	whole_number N "$n"
	[ "$n" -ge 1 ] || die "N=$n: want 1 or more instances"
	local port=${NGINX_PORT:-8080} base=${APP_PORT_BASE:-8081}
	local mbase=${METRICS_PORT_BASE:-6061} pport=${PROMETHEUS_PORT:-9090}
	whole_number NGINX_PORT "$port"
	whole_number APP_PORT_BASE "$base"
	whole_number METRICS_PORT_BASE "$mbase"
	whole_number PROMETHEUS_PORT "$pport"
	if [ "$port" -ge "$base" ] && [ "$port" -lt $((base + n)) ]; then
		die "NGINX_PORT=$port falls among the instances' ports $base-$((base + n - 1))"
	fi
	if [ "$mbase" -lt $((base + n)) ] && [ "$base" -lt $((mbase + n)) ]; then
		die "METRICS_PORT_BASE=$mbase: the metrics ports $mbase-$((mbase + n - 1)) overlap the instances' $base-$((base + n - 1))"
	fi
	# Every port this starts, against every other: nginx, the instances,
	# their metrics, Prometheus.
	ranges_overlap() { [ "$1" -lt $(($3 + $4)) ] && [ "$3" -lt $(($1 + $2)) ]; }
	if ranges_overlap "$port" 1 "$mbase" "$n" || ranges_overlap "$pport" 1 "$mbase" "$n" ||
		ranges_overlap "$pport" 1 "$base" "$n" || [ "$pport" = "$port" ]; then
		die "NGINX_PORT=$port, APP_PORT_BASE=$base, METRICS_PORT_BASE=$mbase and PROMETHEUS_PORT=$pport overlap for $n instances"
	fi
	if [ "${PROMETHEUS:-}" = 1 ]; then
		[ "${METRICS_ADDR:-}" != off ] || die "PROMETHEUS=1 with METRICS_ADDR=off: there would be nothing to scrape"
		command -v prometheus >/dev/null ||
			die "PROMETHEUS=1 but prometheus is not installed (Debian/Ubuntu: sudo apt-get install prometheus; the system's service need not run)"
	fi
	command -v curl >/dev/null || die "curl is missing (Debian/Ubuntu: sudo apt-get install curl)"
	find_nginx
	find_go
	mkdir -p "$abs_state"
	if running_anything; then
		die "already up from $(show "$abs_state") (see: deploy/replicas.sh status); run deploy/replicas.sh down first${REPLICAS_DIR:+ (with the same REPLICAS_DIR)}"
	fi
	rm -f "$abs_state"/app-*.pid "$ngx_dir/nginx.pid"
	port_free "$port" nginx || die "choose another NGINX_PORT"
	if ipv6_loopback; then
		port_free "$port" nginx '[::1]' || die "choose another NGINX_PORT, or set NGINX_IPV6=0"
	fi
	if tls_on; then
		port_free "${NGINX_TLS_PORT:-8443}" nginx || die "choose another NGINX_TLS_PORT"
	fi
	if [ "${PROMETHEUS:-}" = 1 ]; then
		port_free "$pport" prometheus || die "choose another PROMETHEUS_PORT"
	fi

	size_pool "$n"
	# With TLS on, the public face is https: a create over either port gets
	# an https short_url (step 24; before it, http://...:8080 always).
	if tls_on; then
		export BASE_URL=${BASE_URL:-https://127.0.0.1:${NGINX_TLS_PORT:-8443}}
	else
		export BASE_URL=${BASE_URL:-http://127.0.0.1:$port}
	fi
	export TRUSTED_PROXIES=${TRUSTED_PROXIES:-127.0.0.1/32,::1/128}
	# Without Redis, no instance hears of another's creates: a Bloom filter
	# or a negative cache would answer 404 for links made elsewhere.
	if [ -n "${DATABASE_URL:-}" ] && [ -z "${REDIS_URL:-}" ] && [ "$n" -gt 1 ]; then
		if [ "${BLOOM:-off}" != off ] || [ "${NEG_CACHE_SIZE:-0}" != 0 ]; then
			die "BLOOM=${BLOOM:-} NEG_CACHE_SIZE=${NEG_CACHE_SIZE:-} with $n instances and no REDIS_URL: an instance would answer 404 for links created on another; set REDIS_URL, or leave both unset (turned off)"
		fi
		export BLOOM=off NEG_CACHE_SIZE=0
		say "no REDIS_URL: BLOOM=off NEG_CACHE_SIZE=0 (the instances could not hear of each other's creates)"
	fi

	say "building $(show "$abs_state")/shortener"
	"$go_bin" build -o "$abs_state/shortener" . || die "go build failed"
	write_nginx_conf "$n" "$port" "$base"
	ngx -t -q || die "nginx -t failed on $(show "$ngx_dir")/nginx.conf; see above and $(show "$ngx_dir")/error.log"

	# The environment every instance gets, now and at each restart. It may
	# hold DATABASE_URL's password, so only its owner may read it.
	(
		umask 077
		for name in $(compgen -e); do
			printf '%s=%s\0' "$name" "${!name}"
		done >"$abs_state/env"
	)
	printf '%s %s %s %s %s\n' "$n" "$port" "$base" "$mbase" "$pport" >"$abs_state/replicas"
	count=$n nginx_port=$port app_base=$base metrics_base=$mbase prom_port=$pport

	# From here on, a failure or ^C stops whatever was started.
	trap 'fail_up' INT TERM
	for i in $(seq 1 "$n"); do
		if ! start_instance "$i" || ! wait_healthy "$i"; then
			fail_up
		fi
		say "instance $i: pid $(read_pid "$(app_pidfile "$i")") on 127.0.0.1:$(app_port "$i")$(metrics_note "$i"), log $(show "$(app_log "$i")")"
	done
	if [ "${PROMETHEUS:-}" = 1 ]; then
		start_prometheus "$n" "$pport" || fail_up
		say "prometheus: pid $(prometheus_pid) on 127.0.0.1:$pport, scraping $n instances each second, log $(show "$prom_dir")/prometheus.log"
	fi
	if ! ngx; then
		warn "nginx did not start; $(show "$ngx_dir")/error.log:"
		tail -n 20 "$ngx_dir/error.log" >&2 || true
		fail_up
	fi
	# nginx forks into the background before it writes its pid file.
	local deadline=$((SECONDS + 5))
	until [ -n "$(nginx_pid)" ] && curl -fs -o /dev/null --max-time 1 "http://127.0.0.1:$port/healthz"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			warn "nginx does not answer http://127.0.0.1:$port/healthz; $(show "$ngx_dir")/error.log:"
			tail -n 20 "$ngx_dir/error.log" >&2 || true
			fail_up
		fi
		sleep 0.1
	done
	trap - INT TERM
	say "nginx: pid $(nginx_pid) on $(nginx_where "$port") in front of $n instances, config $(show "$ngx_dir")/nginx.conf, error log $(show "$ngx_dir")/error.log"
	if tls_on; then
		say "nginx: https (HTTP/2 and HTTP/1.1) on 127.0.0.1:${NGINX_TLS_PORT:-8443}, certificate $NGINX_TLS_CERT"
	fi
	say "env:  BASE_URL=$BASE_URL TRUSTED_PROXIES=$TRUSTED_PROXIES${DATABASE_URL:+ DB_MAX_OPEN_CONNS=$DB_MAX_OPEN_CONNS DB_MAX_IDLE_CONNS=$DB_MAX_IDLE_CONNS}"
	say "try:  curl -i -X POST http://127.0.0.1:$port/shorten -d '{\"url\":\"https://go.dev\"}'"
	if [ -n "${REPLICAS_DIR:-}" ]; then
		say "stop: REPLICAS_DIR=$REPLICAS_DIR deploy/replicas.sh down"
	else
		say "stop: deploy/replicas.sh down"
	fi
}

# metrics_note I: where instance I's metrics listen, for the messages.
metrics_note() {
	if [ "${METRICS_ADDR:-}" != off ]; then
		printf ', metrics 127.0.0.1:%s' "$(metrics_port "$1")"
	fi
}

cmd_down() {
	if [ ! -f "$abs_state/replicas" ]; then
		say "nothing to stop in $(show "$abs_state")"
		return 0
	fi
	load_state
	stop_all "$count"
	rm -f "$abs_state/replicas" "$abs_state/env"
	say "down: nothing from $(show "$abs_state") runs"
}

cmd_status() {
	local i pid ok=0 health
	load_state
	for i in $(seq 1 "$count"); do
		pid=$(read_pid "$(app_pidfile "$i")")
		if alive "$pid" shortener; then
			health=failing
			if curl -fs -o /dev/null --max-time 1 "http://127.0.0.1:$(app_port "$i")/healthz"; then
				health=ok
			else
				ok=1
			fi
			say "instance $i: pid $pid on 127.0.0.1:$(app_port "$i"), /healthz $health, log $(show "$(app_log "$i")")"
		else
			say "instance $i: not running (127.0.0.1:$(app_port "$i")), log $(show "$(app_log "$i")")"
			ok=1
		fi
	done
	pid=$(nginx_pid)
	if [ -n "$pid" ]; then
		say "nginx: pid $pid on $(nginx_where "$nginx_port"), error log $(show "$ngx_dir")/error.log"
	else
		say "nginx: not running (127.0.0.1:$nginx_port)"
		ok=1
	fi
	pid=$(prometheus_pid)
	if [ -n "$pid" ]; then
		say "prometheus: pid $pid on 127.0.0.1:$prom_port"
	fi
	return "$ok"
}

cmd_restart() {
	local i pid
	load_state
	[ -f "$abs_state/env" ] || die "$(show "$abs_state")/env is missing; run deploy/replicas.sh down, then up"
	for i in $(seq 1 "$count"); do
		pid=$(read_pid "$(app_pidfile "$i")")
		if alive "$pid" shortener; then
			say "instance $i: SIGTERM to pid $pid, waiting for it to exit"
			stop_instance "$i"
		else
			say "instance $i: not running; starting it"
		fi
		# A failed instance stops the restart but not the others: the
		# service keeps running on them while the log is read.
		start_instance "$i" || die "restart stopped at instance $i"
		wait_healthy "$i" || die "restart stopped at instance $i; the others still run"
		say "instance $i: pid $(read_pid "$(app_pidfile "$i")") on 127.0.0.1:$(app_port "$i") answers /healthz"
		if [ "$i" -lt "$count" ]; then
			# nginx marked the instance failed while it was down; past
			# fail_timeout it sends it a request again. Stopping the next
			# one before then would leave fewer instances than it seems.
			say "waiting $((fail_timeout + 1))s for nginx to send it traffic again (fail_timeout=${fail_timeout}s)"
			sleep $((fail_timeout + 1))
		fi
	done
	say "restart: all $count instances restarted"
}

cmd_kill() {
	local i=${1:-} pid
	[ -n "$i" ] || usage
	load_state
	whole_number I "$i"
	{ [ "$i" -ge 1 ] && [ "$i" -le "$count" ]; } || die "instance $i: want 1 to $count"
	pid=$(read_pid "$(app_pidfile "$i")")
	alive "$pid" shortener || die "instance $i is not running"
	kill -s KILL "$pid"
	say "instance $i: pid $pid killed with SIGKILL; nginx now routes around 127.0.0.1:$(app_port "$i")"
	say "bring it back with: deploy/replicas.sh restart"
}

cmd_check() {
	local n=${1:-3}
	whole_number N "$n"
	[ "$n" -ge 1 ] || die "N=$n: want 1 or more instances"
	find_nginx
	if [ -f "$abs_state/replicas" ] && running_anything; then
		die "replicas are up from $(show "$abs_state"); check would overwrite their nginx config; use REPLICAS_DIR=<another dir>"
	fi
	write_nginx_conf "$n" "${NGINX_PORT:-8080}" "${APP_PORT_BASE:-8081}"
	ngx -t
}

case ${1:-} in
up) cmd_up "${2:-}" ;;
down) cmd_down ;;
status) cmd_status ;;
restart) cmd_restart ;;
kill) cmd_kill "${2:-}" ;;
check) cmd_check "${2:-3}" ;;
*) usage ;;
esac
