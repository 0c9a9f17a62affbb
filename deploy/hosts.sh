#!/usr/bin/env bash
# Three "hosts" on this one machine, as Linux network namespaces joined by a
# bridge, each running what a real host of the shortener would: an etcd
# member, Postgres managed by Patroni, HAProxy in front of Postgres, a
# Redis and a Redis Sentinel, and the app. nginx, in the machine's own
# namespace, sends requests to the three apps. Run as root (ip netns).
#
#   deploy/hosts.sh up              build the app, make the hosts, start it all,
#                                   wait until every part answers
#   deploy/hosts.sh status          who is the Postgres primary, who the Redis
#                                   master, and which apps answer
#   deploy/hosts.sh remove hN       take host N away: cut its link to the
#                                   bridge, then kill every process in it
#   deploy/hosts.sh restore hN      link it again and start its processes: its
#                                   Postgres rejoins as a standby (pg_rewind),
#                                   its Redis as a replica
#   deploy/hosts.sh primary         print the host of the Postgres primary (h1..h3)
#   deploy/hosts.sh redis-master    print the host of the Redis master
#   deploy/hosts.sh psql [args]     psql on the primary, through h-any's HAProxy
#   deploy/hosts.sh down            stop everything, remove the namespaces,
#                                   the bridge and the folder
#
# Addresses: the bridge shbr0 is 10.77.0.1/24 in the machine's namespace;
# host N (namespace shN) is 10.77.0.1N. Nothing is sent to any address but
# these and loopback. nginx listens on 127.0.0.1:${HOSTS_PORT:-18080}.
#
# In each host: etcd on :2379/:2380; Patroni's REST API on :8008; Postgres on
# :5432; HAProxy on 127.0.0.1:5000 (the primary: Patroni's GET /primary
# answers 200 on it alone) and 127.0.0.1:5001 (a standby: GET /replica);
# Redis on :6379; Sentinel on :26379; the app on :8080, its metrics on
# 127.0.0.1:6060 inside the host.
#
# Settings: HOSTS_DIR (/tmp/shortener-hosts: logs and data), HOSTS_PORT
# (18080), PG_BIN (the folder holding postgres, pg_ctl, pg_rewind).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
dir=${HOSTS_DIR:-/tmp/shortener-hosts}
port=${HOSTS_PORT:-18080}
hosts=(h1 h2 h3)
bridge=shbr0
net=10.77.0

say() { printf 'hosts: %s\n' "$*" >&2; }
# dump_log: a log whose last lines die prints, while a wait on the process
# writing it is under way (a failure that names its cause on the spot,
# since benchmarks/hosts.sh removes the folder when it ends).
dump_log=''
die() {
	say "$*"
	if [[ -n $dump_log && -f $dump_log ]]; then
		say "last lines of $dump_log:"
		tail -n 30 "$dump_log" >&2
	fi
	exit 1
}
ip_of() { echo "$net.1${1#h}"; }  # h2 -> 10.77.0.12
ns_of() { echo "sh${1#h}"; }      # h2 -> sh2
inns() {
	local h=$1
	shift
	ip netns exec "$(ns_of "$h")" "$@"
}
check_host() { case ${1:-} in h1 | h2 | h3) ;; *) die "want a host: h1, h2 or h3" ;; esac; }

pg_bin=${PG_BIN:-}
if [[ -z $pg_bin ]]; then
	for d in /usr/lib/postgresql/*/bin; do [[ -x $d/pg_rewind ]] && pg_bin=$d; done
fi

need() {
	[[ $(id -u) == 0 ]] || die "run as root: network namespaces need it"
	local missing=()
	for c in ip etcd patroni patronictl haproxy redis-server redis-sentinel redis-cli nginx psql curl go; do
		command -v "$c" >/dev/null || missing+=("$c")
	done
	# Patroni's etcd3 client is built on python3-etcd; without it Patroni
	# never finds a leader, and says so only in its log.
	"$(head -n 1 "$(command -v patroni)" | sed 's/^#!//; s/ .*//')" -c 'import etcd' 2>/dev/null || missing+=("python3-etcd")
	[[ -n $pg_bin ]] || missing+=("postgres (set PG_BIN)")
	((${#missing[@]} == 0)) || die "missing: ${missing[*]} (apt-get install -y etcd-server patroni python3-etcd haproxy redis-sentinel nginx postgresql curl)"
}

# start NAME HOST CMD...: run CMD in the host's namespace, in the
# background, its output in NAME.log, its pid in NAME.pid.
start() {
	local name=$1 h=$2
	shift 2
	local d=$dir/$h
	# Appended: a restore keeps what was logged before the host was cut.
	setsid ip netns exec "$(ns_of "$h")" "$@" >>"$d/$name.log" 2>&1 </dev/null &
	echo $! >"$d/$name.pid"
}

# wait_for WHAT SECONDS CMD...: run CMD every 0.2 s until it succeeds.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || die "$what: not within ${secs}s"
		sleep 0.2
	done
}

net_up() {
	ip link show "$bridge" >/dev/null 2>&1 && die "$bridge exists: run deploy/hosts.sh down first"
	ip link add "$bridge" type bridge
	ip addr add "$net.1/24" dev "$bridge"
	ip link set "$bridge" up
	for h in "${hosts[@]}"; do
		local ns
		ns=$(ns_of "$h")
		ip netns add "$ns"
		ip link add "$ns" type veth peer name eth0 netns "$ns"
		ip link set "$ns" master "$bridge" up
		inns "$h" ip addr add "$(ip_of "$h")/24" dev eth0
		inns "$h" ip link set eth0 up
		inns "$h" ip link set lo up
	done
}

etcd_cluster() {
	local c="" h
	for h in "${hosts[@]}"; do c+="${c:+,}$h=http://$(ip_of "$h"):2380"; done
	echo "$c"
}

start_etcd() {
	local h=$1 state=$2 a
	a=$(ip_of "$h")
	start etcd "$h" etcd --name "$h" --data-dir "$dir/$h/etcd" \
		--listen-client-urls "http://$a:2379,http://127.0.0.1:2379" --advertise-client-urls "http://$a:2379" \
		--listen-peer-urls "http://$a:2380" --initial-advertise-peer-urls "http://$a:2380" \
		--initial-cluster "$(etcd_cluster)" --initial-cluster-token shortener --initial-cluster-state "$state" \
		--heartbeat-interval 100 --election-timeout 1000
}

write_patroni() {
	local h=$1 a
	a=$(ip_of "$h")
	cat >"$dir/$h/patroni.yml" <<EOF
scope: shortener
name: $h
log:
  level: INFO
restapi:
  listen: $a:8008
  connect_address: $a:8008
# Each Patroni asks only its own host's etcd member (use_proxies: no
# discovery of the others). Given all three, it picks one, and when that
# member's host is gone a request to it waits retry_timeout / 3 (1.33 s)
# before the next member is tried. In step 32's landing CI the primary's
# Postgres stopped while only its synchronous standby's host was removed,
# on a starved machine (reasoned: its Patroni could not renew its leader
# key within retry_timeout, 4 s; docs/32). Its own member is not lost
# with another host; if that host led etcd, a write still waits for etcd
# to elect another leader.
etcd3:
  hosts: $a:2379
  use_proxies: true
bootstrap:
  dcs:
    # The leader holds a key in etcd for ttl seconds and renews it every
    # loop_wait; when it stops (its host is gone), a standby takes over
    # once the key has expired: within ttl + loop_wait, Patroni's bound.
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    # Commit waits until a standby has the transaction (synchronous
    # replication), and Patroni promotes only that standby: a create that
    # was answered 201 survives the primary's loss.
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: "on"
        # A primary that stops (fast) waits for each walsender to have its
        # last WAL confirmed; one streaming to a removed host waits until
        # this timeout (60 s by default), and the database answers "the
        # system is shutting down" all that time.
        wal_sender_timeout: 10s
        max_connections: 100
        shared_buffers: 128MB
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host all all $net.0/24 trust
    - host replication replicator $net.0/24 trust
postgresql:
  listen: $a,127.0.0.1:5432
  connect_address: $a:5432
  data_dir: $dir/$h/pg
  bin_dir: $pg_bin
  pgpass: $dir/$h/pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: $dir/$h
EOF
}

start_patroni() {
	local h=$1
	mkdir -p "$dir/$h/pg"
	chmod 700 "$dir/$h/pg"
	chown -R postgres: "$dir/$h/pg" "$dir/$h/patroni.yml"
	touch "$dir/$h/pgpass" && chown postgres: "$dir/$h/pgpass"
	chown postgres: "$dir/$h"
	runuser -u postgres -- test -w "$dir/$h/pg" ||
		die "the user postgres cannot write $dir/$h/pg: every folder above it must be o+x (Postgres refuses to run as root)"
	start patroni "$h" runuser -u postgres -- patroni "$dir/$h/patroni.yml"
}

write_haproxy() {
	local h=$1
	{
		cat <<EOF
global
  maxconn 2000
defaults
  mode tcp
  timeout connect 1s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen primary
  bind 127.0.0.1:5000
  option httpchk GET /primary
  http-check expect status 200
  # A server that fails two checks a second apart is out, and the
  # sessions to it are closed at once (not left to time out).
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
EOF
		for o in "${hosts[@]}"; do echo "  server $o $(ip_of "$o"):5432 check port 8008"; done
		cat <<EOF
listen replicas
  bind 127.0.0.1:5001
  balance roundrobin
  option httpchk GET /replica
  http-check expect status 200
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
EOF
		for o in "${hosts[@]}"; do echo "  server $o $(ip_of "$o"):5432 check port 8008"; done
	} >"$dir/$h/haproxy.cfg"
}

start_redis() {
	local h=$1 master=${2:-}
	mkdir -p "$dir/$h/redis"
	local args=(--bind "$(ip_of "$h")" --port 6379 --protected-mode no --save "" --appendonly no --dir "$dir/$h/redis")
	[[ -n $master ]] && args+=(--replicaof "$master" 6379)
	start redis "$h" redis-server "${args[@]}"
}

start_sentinel() {
	local h=$1 master=$2
	mkdir -p "$dir/$h/sentinel"
	cat >"$dir/$h/sentinel.conf" <<EOF
port 26379
bind $(ip_of "$h")
protected-mode no
dir $dir/$h/sentinel
# Two of the three Sentinels must agree that the master is down; each
# calls it down after 2 s without an answer.
sentinel monitor shortener $master 6379 2
sentinel down-after-milliseconds shortener 2000
sentinel failover-timeout shortener 10000
sentinel parallel-syncs shortener 1
EOF
	start sentinel "$h" redis-sentinel "$dir/$h/sentinel.conf"
}

start_app() {
	local h=$1 s="" o
	for o in "${hosts[@]}"; do s+="${s:+,}$(ip_of "$o"):26379"; done
	start app "$h" env -i PATH="$PATH" \
		ADDR="$(ip_of "$h"):8080" METRICS_ADDR=127.0.0.1:6060 BASE_URL="http://127.0.0.1:$port" \
		DATABASE_URL="postgres://postgres@127.0.0.1:5000/shortener?sslmode=disable" \
		DATABASE_REPLICA_URL="postgres://postgres@127.0.0.1:5001/shortener?sslmode=disable" \
		REDIS_SENTINELS="$s" REDIS_MASTER=shortener \
		TRUSTED_PROXIES="$net.1/32" CREATE_RATE="${HOSTS_CREATE_RATE:-0}" \
		"$dir/shortener"
}

# wait_app H: the app in H answers /healthz; if not within 60 s, the
# last lines of its log say why.
wait_app() {
	dump_log=$dir/$1/app.log
	wait_for "the app in $1" 60 curl -sf -m 1 "http://$(ip_of "$1"):8080/healthz"
	dump_log=''
}

# write_nginx: the project's edge config, deploy/nginx.conf (its
# retries, timeouts and limits, explained there), with the six files it
# includes: here, the three hosts' apps as its upstreams.
write_nginx() {
	local n=$dir/nginx h
	mkdir -p "$n/temp"
	# Two changes. On one machine a dead instance's kernel answers with a
	# reset; a host that is gone answers nothing, and a request in flight
	# there waits for proxy_read_timeout (20 s). Every answer of the app is
	# bounded by DB_TIMEOUT (500 ms) and REDIS_TIMEOUT (50 ms), so 2 s is
	# ample, and a GET that times out is then tried on another host, which
	# proxy_next_upstream_timeout must allow (from 2 s to 5 s). A POST is
	# still not retried once sent: its client gets 504 and may try again.
	sed -e 's/proxy_read_timeout 20s;/proxy_read_timeout 2s;/' \
		-e 's/proxy_send_timeout 20s;/proxy_send_timeout 2s;/' \
		-e 's/proxy_next_upstream_timeout 2s;/proxy_next_upstream_timeout 5s;/' deploy/nginx.conf >"$n/nginx.conf"
	[[ $(grep -cE 'proxy_(read|send)_timeout 2s;|proxy_next_upstream_timeout 5s;' "$n/nginx.conf") == 3 ]] ||
		die "deploy/nginx.conf has changed: its timeouts are not where write_nginx expects them"
	echo "listen 127.0.0.1:$port;" >"$n/listen.conf"
	: >"$n/tls.conf"
	: >"$n/upstreams.conf"
	for h in "${hosts[@]}"; do echo "server $(ip_of "$h"):8080 max_fails=3 fail_timeout=3s;" >>"$n/upstreams.conf"; done
	printf 'keepalive 64;\nkeepalive_timeout 30s;\nkeepalive_requests 10000;\n' >"$n/upstream_keepalive.conf"
	# Only the answers of 500 and above, with the instance that gave each
	# and its X-Request-Id (which the app's log lines carry): a failure
	# experiment reads who answered its 5xx off this (benchmarks/hosts.sh,
	# since step 42). A few lines a run, not one per request.
	printf 'map $status $hosts_5xx {\n    ~^5 1;\n    default 0;\n}\naccess_log 5xx.log upstream if=$hosts_5xx;\n' >"$n/logging.conf"
	# One address (the load generator) stands for many clients here.
	echo "limit_conn per_client ${NGINX_LIMIT_CONN:-60000};" >"$n/limit_conn.conf"
}

ngx() { nginx -p "$dir/nginx/" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" "$@"; }

primary() {
	local h code
	for h in "${hosts[@]}"; do
		code=$(curl -s -o /dev/null -m 0.3 -w '%{http_code}' "http://$(ip_of "$h"):8008/primary" || true)
		[[ $code == 200 ]] && {
			echo "$h"
			return 0
		}
	done
	return 1
}

# up_host: any host whose link is up, to run a command in.
up_host() {
	local h
	for h in "${hosts[@]}"; do
		[[ $(cat "/sys/class/net/$(ns_of "$h")/operstate" 2>/dev/null) == up ]] && {
			echo "$h"
			return 0
		}
	done
	return 1
}

redis_master() {
	local h a o
	for h in "${hosts[@]}"; do
		a=$(timeout 0.5 redis-cli -h "$(ip_of "$h")" -p 26379 sentinel get-master-addr-by-name shortener 2>/dev/null | head -1) || continue
		for o in "${hosts[@]}"; do [[ $a == "$(ip_of "$o")" ]] && {
			echo "$o"
			return 0
		}; done
	done
	return 1
}

streaming_standbys() {
	local h
	h=$(primary) || return 1
	inns "$h" psql -h "$(ip_of "$h")" -U postgres -Atc \
		"select count(*) from pg_stat_replication where state = 'streaming'" 2>/dev/null
}

# wait_haproxy hN: until the host's HAProxy sends every connection on
# :5000 to the primary and every one on :5001 to a standby. At its start
# HAProxy counts each server up until its own checks say otherwise (its
# init-state option, which changes that, came in 3.1; Debian 12 has 2.6),
# so for a second or two :5000 hands some connections to a standby, and
# one 'select 1' that answers proves nothing: CI's 'create database' once
# reached a standby that way ("cannot execute CREATE DATABASE in a
# read-only transaction"). Six connections in a row (two rounds of the
# three servers) must each reach the right kind of server.
wait_haproxy() {
	wait_for "HAProxy to the primary alone in $1" 60 haproxy_sends "$1" 5000 f
	wait_for "HAProxy to standbys alone in $1" 60 haproxy_sends "$1" 5001 t
}

# haproxy_sends hN PORT IN_RECOVERY [DB]: six connections in a row through
# the host's HAProxy on PORT, to database DB (postgres), each reach a
# server whose pg_is_in_recovery() is IN_RECOVERY (f: the primary, t: a
# standby).
haproxy_sends() {
	local h=$1 port=$2 want=$3 db=${4:-postgres} i got
	for i in 1 2 3 4 5 6; do
		got=$(inns "$h" psql -h 127.0.0.1 -p "$port" -U postgres -d "$db" -Atc 'select pg_is_in_recovery()') || return 1
		[[ $got == "$want" ]] || return 1
	done
}

two_standbys() { [[ $(streaming_standbys) == 2 ]]; }

# kill_all NS: SIGKILL every process in the namespace until none is left
# (one pass could miss a process forked meanwhile, a postmaster being
# restarted, say).
kill_all() {
	local pids n=0
	while pids=$(ip netns pids "$1" 2>/dev/null) && [[ -n $pids ]]; do
		kill -9 $pids 2>/dev/null || true
		((++n < 50)) || die "processes in $1 outlive SIGKILL: $pids"
		sleep 0.1
	done
}

cmd_up() {
	need
	mkdir -p "$dir"
	chmod 755 "$dir"
	say "building the app"
	go build -o "$dir/shortener" .
	net_up
	for h in "${hosts[@]}"; do mkdir -p "$dir/$h"; done
	say "etcd"
	for h in "${hosts[@]}"; do start_etcd "$h" new; done
	for h in "${hosts[@]}"; do wait_for "etcd in $h" 60 curl -sf -m 1 "http://$(ip_of "$h"):2379/health"; done
	say "Patroni and Postgres"
	for h in "${hosts[@]}"; do
		write_patroni "$h"
		start_patroni "$h"
	done
	wait_for "a Postgres primary" 120 primary
	wait_for "two streaming standbys" 120 two_standbys
	say "HAProxy"
	for h in "${hosts[@]}"; do
		write_haproxy "$h"
		start haproxy "$h" haproxy -db -f "$dir/$h/haproxy.cfg"
	done
	# Wait until each host's HAProxy sends :5000 to the primary alone and
	# :5001 to standbys alone.
	for h in "${hosts[@]}"; do wait_haproxy "$h"; done
	inns h1 psql -h 127.0.0.1 -p 5000 -U postgres -qc 'create database shortener' >/dev/null
	# The app opens it on a standby too (DATABASE_REPLICA_URL) and stops
	# if it is not there: a standby replays the create a moment later
	# (once, in CI, too late: 'database "shortener" does not exist').
	for h in "${hosts[@]}"; do wait_for "the database on the standbys, through $h's HAProxy" 60 haproxy_sends "$h" 5001 t shortener; done
	say "Redis and Sentinel"
	start_redis h1
	start_redis h2 "$(ip_of h1)"
	start_redis h3 "$(ip_of h1)"
	for h in "${hosts[@]}"; do start_sentinel "$h" "$(ip_of h1)"; done
	for h in "${hosts[@]}"; do wait_for "Sentinel in $h" 30 redis-cli -h "$(ip_of "$h")" -p 26379 ping; done
	say "the apps"
	for h in "${hosts[@]}"; do start_app "$h"; done
	for h in "${hosts[@]}"; do wait_app "$h"; done
	write_nginx
	ngx -t -q || die "nginx -t failed on $dir/nginx/nginx.conf"
	ngx
	wait_for "nginx" 10 curl -sf -m 1 "http://127.0.0.1:$port/healthz"
	cmd_status
}

cmd_status() {
	local h
	say "Postgres (patronictl):"
	h=$(up_host) || die "no host is up"
	inns "$h" patronictl -c "$dir/$h/patroni.yml" list >&2 || true
	say "Redis master: $(redis_master || echo unknown)"
	for h in "${hosts[@]}"; do
		if curl -sf -m 1 -o /dev/null "http://$(ip_of "$h"):8080/healthz"; then say "app in $h: up"; else say "app in $h: down"; fi
	done
	say "nginx: http://127.0.0.1:$port/"
}

cmd_remove() {
	local h=$1 ns pids
	check_host "$h"
	ns=$(ns_of "$h")
	# The link first, as when a host loses power or its network: nothing
	# it held open is closed by a reset; its peers find out by timeouts.
	ip link set "$ns" down
	pids=$(ip netns pids "$ns" || true)
	kill_all "$ns"
	say "$h removed: link down, $(wc -w <<<"$pids") processes killed"
}

cmd_restore() {
	local h=$1 ns m
	check_host "$h"
	ns=$(ns_of "$h")
	ip link set "$ns" up
	say "$h: link up"
	# etcd: the member's data is still there; it rejoins the cluster.
	start_etcd "$h" existing
	wait_for "etcd in $h" 60 curl -sf -m 1 "http://$(ip_of "$h"):2379/health"
	# Patroni sees another leader and makes this Postgres its standby,
	# rewinding what it wrote after it was cut off.
	start_patroni "$h"
	start haproxy "$h" haproxy -db -f "$dir/$h/haproxy.cfg"
	wait_haproxy "$h"
	m=$(redis_master) || die "no Sentinel names a Redis master"
	start_redis "$h" "$(ip_of "$m")"
	start_sentinel "$h" "$(ip_of "$m")"
	start_app "$h"
	wait_app "$h"
	say "$h restored"
}

cmd_down() {
	[[ -f $dir/nginx/nginx.pid ]] && ngx -s stop 2>/dev/null || true
	for h in "${hosts[@]}"; do
		local ns
		ns=$(ns_of "$h")
		if ip netns list | grep -qw "$ns"; then
			kill_all "$ns"
			ip netns del "$ns"
		fi
		ip link del "$ns" 2>/dev/null || true
	done
	ip link del "$bridge" 2>/dev/null || true
	rm -rf "$dir"
	say "down"
}

case ${1:-} in
up) cmd_up ;;
status) cmd_status ;;
remove) cmd_remove "${2:-}" ;;
restore) cmd_restore "${2:-}" ;;
primary) primary ;;
redis-master) redis_master ;;
psql)
	shift
	h=$(up_host) || die "no host is up"
	inns "$h" psql -h 127.0.0.1 -p 5000 -U postgres -d shortener "$@"
	;;
down) cmd_down ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
