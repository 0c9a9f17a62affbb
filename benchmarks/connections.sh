#!/usr/bin/env bash
# connections.sh: step 13's sitting. What a client that opens a new
# connection for every click costs, with and without TLS, direct and
# through nginx, and what helps: HTTP/2, session resumption, an ECDSA
# certificate rather than RSA, nginx's keep-alive to the instances.
#
#   benchmarks/connections.sh [-q] [-w] [-o DIR] [-n ROUNDS] [-d SECONDS]
#
#   -q        quick: 1 round of 1 s runs at concurrency 10
#   -w        instead of the variants below, the check with wrk (2 threads,
#             "Connection: close", so a connection per request): the app
#             plain and with TLS, nginx plain and with TLS; output
#             13-connections-wrk.txt
#   -o DIR    where the output goes, 13-connections.txt (default: a
#             temporary directory, removed at the end: give -o to keep it)
#   -n, -d    rounds (default 3) and seconds per run (default 5; each run
#             after a 1 s warm-up, discarded); concurrency 50
#
# It starts, all at once and loaded one at a time: the app twice, plain and
# with TLS_CERT_FILE (ECDSA P-256), and three nginx deployments of one
# instance each (deploy/replicas.sh up 1): ECDSA, RSA-2048, and ECDSA with
# NGINX_UPSTREAM_KEEPALIVE=0. The certificates are made here with openssl.
# Every variant is measured for /healthz and for the redirect of one hot
# link, in rounds that go through the variants in order, reversed in even
# rounds. Load: hey (-disable-keepalive for a connection per request, -h2
# for HTTP/2), and benchmarks/newconn where the TLS session must be resumed
# (hey keeps no session cache). CPU of the app, nginx and the generator,
# user and system apart, per response.
#
# Takes about 12 minutes with the defaults, 1 with -q. Environment:
# ADMIN_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
# Needs go, git, psql, redis-server, redis-cli, curl, hey, nginx, openssl
# and /usr/bin/time (GNU time, Debian package time).
set -euo pipefail

conc=50 out='' rounds=3 dur=5 rows=10000 parts='' wrk=''
while getopts qwo:n:d: opt; do
	case $opt in
	q) rounds=1 dur=1 conc=10 ;;
	w) wrk=1 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;;
	*) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
sitting connections go git psql redis-server redis-cli curl hey nginx openssl ${wrk:+wrk}
[ -x /usr/bin/time ] || { echo "connections.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
outputs_dir
deployments=''
trap 'for d in $deployments; do REPLICAS_DIR=$d deploy/replicas.sh down >/dev/null 2>&1 || true; done; stop_sitting' EXIT

hz=$(getconf CLK_TCK)
# cpu PIDS: user and system ticks of the processes (comma- or space-separated), summed.
cpu() {
	for p in $(echo "$1" | tr ',' ' '); do cat "/proc/$p/stat" || exit 1; done | awk '{u += $14; s += $15} END {print u + 0, s + 0}'
}

# --- certificates: an ECDSA P-256 and an RSA-2048 one, for 127.0.0.1 ---
for kind in ecdsa rsa; do
	case $kind in
	ecdsa) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
	rsa) newkey=(-newkey rsa:2048) ;;
	esac
	openssl req -x509 "${newkey[@]}" -nodes -days 2 -subj /CN=127.0.0.1 \
		-addext subjectAltName=IP:127.0.0.1 -keyout "$tmp/$kind.key" -out "$tmp/$kind.crt" 2>/dev/null
done

backends "$rows"
go build -o "$tmp/app" .
go build -o "$tmp/newconn" ./benchmarks/newconn

# --- the app on its own: plain, and with TLS ---
start_app() { # start_app NAME ENV...: sets app_pid, app_port
	app_port=$(freeport)
	env ADDR="127.0.0.1:$app_port" METRICS_ADDR="127.0.0.1:$(freeport)" REDIS_KEY_PREFIX="conn-$1:" "${@:2}" \
		"$tmp/app" 2>"$tmp/app-$1.log" &
	app_pid=$!
	pids="$pids $app_pid"
}
start_app plain
d_pid=$app_pid d_url="http://127.0.0.1:$app_port"
wait_healthy "$d_url" "$tmp/app-plain.log"
start_app tls TLS_CERT_FILE="$tmp/ecdsa.crt" TLS_KEY_FILE="$tmp/ecdsa.key"
dT_pid=$app_pid dT_url="https://127.0.0.1:$app_port"
i=0
until curl -kfs -o /dev/null "$dT_url/healthz"; do
	i=$((i + 1)); [ "$i" -lt 100 ] || { echo "connections.sh: the TLS app does not answer" >&2; cat "$tmp/app-tls.log" >&2; exit 1; }
	sleep 0.1
done

# --- three nginx deployments of one instance each ---
declare -A ngx_pids app_pids plain_url tls_url
deploy() { # deploy NAME CERT KEEPALIVE
	local dir="$tmp/r-$1" port tport
	port=$(freeport) tport=$(freeport)
	REPLICAS_DIR=$dir NGINX_PORT=$port NGINX_TLS_PORT=$tport APP_PORT_BASE=$(freeport) METRICS_PORT_BASE=$(freeport) \
		NGINX_TLS_CERT="$tmp/$2.crt" NGINX_TLS_KEY="$tmp/$2.key" NGINX_UPSTREAM_KEEPALIVE=$3 \
		REDIS_KEY_PREFIX="conn-$1:" deploy/replicas.sh up 1 >"$tmp/up-$1.log" 2>&1 || { cat "$tmp/up-$1.log" >&2; exit 1; }
	deployments="$deployments $dir"
	local master
	master=$(cat "$dir/nginx/nginx.pid")
	ngx_pids[$1]="$master,$(pgrep -d, -P "$master")"
	app_pids[$1]=$(cat "$dir"/app-*.pid | paste -sd, -)
	plain_url[$1]="http://127.0.0.1:$port"
	tls_url[$1]="https://127.0.0.1:$tport"
}
deploy ecdsa ecdsa 32
deploy rsa rsa 32
deploy noka ecdsa 0

# --- the variants: NAME GENERATOR BASE APP_PIDS NGINX_PIDS ---
# GENERATOR: ka (hey, connections kept), new (hey -disable-keepalive),
# new-h2 (hey -h2 -disable-keepalive), nc (newconn, no session cache),
# nc-x25519 (newconn -x25519: X25519 offered alone), nc-resume (newconn -resume).
variants="
d-ka       ka        $d_url                 $d_pid              -
d-new      new       $d_url                 $d_pid              -
dT-ka      ka        $dT_url                $dT_pid             -
dT-new     new       $dT_url                $dT_pid             -
dT-new-h2  new-h2    $dT_url                $dT_pid             -
dT-nc      nc        $dT_url                $dT_pid             -
dT-x25519  nc-x25519 $dT_url                $dT_pid             -
dT-resume  nc-resume $dT_url                $dT_pid             -
n-ka       ka        ${plain_url[ecdsa]}    ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
n-new      new       ${plain_url[ecdsa]}    ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nT-ka      ka        ${tls_url[ecdsa]}      ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nT-new     new       ${tls_url[ecdsa]}      ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nT-new-h2  new-h2    ${tls_url[ecdsa]}      ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nT-nc      nc        ${tls_url[ecdsa]}      ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nT-resume  nc-resume ${tls_url[ecdsa]}      ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nR-new     new       ${tls_url[rsa]}        ${app_pids[rsa]}    ${ngx_pids[rsa]}
x-ka       ka        ${plain_url[noka]}     ${app_pids[noka]}   ${ngx_pids[noka]}
x-new      new       ${plain_url[noka]}     ${app_pids[noka]}   ${ngx_pids[noka]}
xT-new     new       ${tls_url[noka]}       ${app_pids[noka]}   ${ngx_pids[noka]}
"
if [ "$wrk" ]; then
	variants="
d-wrk      wrk       $d_url                 $d_pid              -
dT-wrk     wrk       $dT_url                $dT_pid             -
n-wrk      wrk       ${plain_url[ecdsa]}    ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
nT-wrk     wrk       ${tls_url[ecdsa]}      ${app_pids[ecdsa]}  ${ngx_pids[ecdsa]}
"
fi
names=$(echo "$variants" | awk 'NF {print $1}')
field() { echo "$variants" | awk -v n="$1" -v f="$2" '$1 == n {print $f}'; }

# Every app and every nginx answers the redirect before anything is measured,
# and holds the link in its memory.
for v in $names; do
	base=$(field "$v" 3)
	status=$(curl -ks -o /dev/null -w '%{http_code}' "$base/$code")
	[ "$status" = 302 ] || { echo "connections.sh: $v: $base/$code answers $status, not 302" >&2; exit 1; }
done

# load GEN URL FILE [SECONDS]: one run; raw output to FILE, the
# generator's user and system seconds (GNU time) to FILE.cpu.
load() {
	local gen=$1 url=$2 f=$3 d=${4:-$dur}
	case $gen in
	ka) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${d}s" -c "$conc" -disable-redirects "$url" >"$f" 2>&1 ;;
	new) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${d}s" -c "$conc" -disable-redirects -disable-keepalive "$url" >"$f" 2>&1 ;;
	new-h2) /usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${d}s" -c "$conc" -disable-redirects -disable-keepalive -h2 "$url" >"$f" 2>&1 ;;
	nc) /usr/bin/time -f '%U %S' -o "$f.cpu" "$tmp/newconn" -d "${d}s" -c "$conc" "$url" >"$f" 2>&1 ;;
	wrk) /usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${d}s" -H 'Connection: close' "$url" >"$f" 2>&1 ;;
	nc-x25519) /usr/bin/time -f '%U %S' -o "$f.cpu" "$tmp/newconn" -d "${d}s" -c "$conc" -x25519 "$url" >"$f" 2>&1 ;;
	nc-resume) /usr/bin/time -f '%U %S' -o "$f.cpu" "$tmp/newconn" -d "${d}s" -c "$conc" -resume "$url" >"$f" 2>&1 ;;
	esac
}
# responses FILE, bad FILE: from hey's (and newconn's) words.
# wrk: "N requests in", "Non-2xx or 3xx responses: N" (a 200 where a 302
# was wanted is not caught there, but the redirect was checked before),
# "Socket errors: connect N, read N, write N, timeout N".
responses() { awk '/^Status code distribution:/ {s = 1; next} /^$/ {s = 0} s && /responses/ {n += $2} / requests in / {n += $1} END {print n + 0}' "$1"; }
bad() { awk -v want="$2" '/^Status code distribution:/ {s = 1; next} /^$/ {s = 0} s && /responses/ && $1 != "[" want "]" {n += $2} /^Error distribution:/ {e = 1; next} e && /^  \[/ {gsub(/[][]/, "", $1); n += $1}
	/Non-2xx or 3xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$1"; }

# measure VARIANT ENDPOINT FILE: prints "req/s app_user app_sys nginx_user
# nginx_sys gen_user gen_sys bad", CPU in µs per response.
measure() {
	local v=$1 ep=$2 f=$3 gen url apps ngx want a0 a1 n0 n1
	gen=$(field "$v" 2) apps=$(field "$v" 4) ngx=$(field "$v" 5)
	case $ep in healthz) url="$(field "$v" 3)/healthz" want=200 ;; *) url="$(field "$v" 3)/$code" want=302 ;; esac
	[ "$ngx" != - ] || ngx=''
	load "$gen" "$url" "$f.warm" 1
	a0=$(cpu "$apps") n0=$(cpu "$ngx")
	load "$gen" "$url" "$f"
	a1=$(cpu "$apps") n1=$(cpu "$ngx")
	awk -v r="$(awk '/Requests\/sec:/ {print $2}' "$f")" -v n="$(responses "$f")" -v hz="$hz" \
		-v a="$a0 $a1" -v x="$n0 $n1" -v g="$(cat "$f.cpu")" -v b="$(bad "$f" "$want")" 'BEGIN {
		split(a, A, " "); split(x, X, " "); split(g, G, " "); u = n ? 1e6 / hz / n : 0
		printf "%.0f %.1f %.1f %.1f %.1f %.1f %.1f %d\n", r, (A[3] - A[1]) * u, (A[4] - A[2]) * u, (X[3] - X[1]) * u, (X[4] - X[2]) * u,
			n ? G[1] / n * 1e6 : 0, n ? G[2] / n * 1e6 : 0, b }'
}

mkdir -p "$tmp/m"
for i in $(seq 1 "$rounds"); do
	progress "round $i of $rounds"
	list=$names
	[ $((i % 2)) = 1 ] || list=$(echo "$names" | tac)
	for v in $list; do
		for ep in healthz redirect; do
			measure "$v" "$ep" "$tmp/m/$i-$v-$ep" >"$tmp/m/$i-$v-$ep.sum"
		done
	done
done

# Medians over rounds: rows of "round v1 v2 ..." on stdin; prints one
# "median" row and a "min-max" row (as benchmarks/ceiling.sh).
medians() {
	awk 'function med(x, n,    i, j, t, b) { for (i = 1; i <= n; i++) b[i] = x[i]; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
	{ n++; for (c = 2; c <= NF; c++) { v[c, n] = $c; if (n == 1 || $c < lo[c]) lo[c] = $c; if (n == 1 || $c > hi[c]) hi[c] = $c }; nf = NF }
	END {
		printf "median"; for (c = 2; c <= nf; c++) { for (i = 1; i <= n; i++) x[i] = v[c, i]; printf " %s", med(x, n) }; printf "\n"
		printf "min-max"; for (c = 2; c <= nf; c++) printf " %s-%s", lo[c], hi[c]; printf "\n"
	}'
}
# row VARIANT ENDPOINT: the medians of every column of its runs, and the
# min-max of req/s.
row() {
	for i in $(seq 1 "$rounds"); do echo "$i $(cat "$tmp/m/$i-$1-$2.sum")"; done | medians >"$tmp/med"
	awk -v v="$1" 'NR == 1 {$1 = ""; m = $0} NR == 2 {split($2, r, "-"); printf "%-10s %s  (req/s %s-%s)\n", v, m, r[1], r[2]}' "$tmp/med"
}

commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/13-*' || echo ' (dirty tree)')"
{
	echo "# connections: a new connection per request, with and without TLS, direct and through nginx"
	echo "# made by:   benchmarks/connections.sh${wrk:+ -w} -n $rounds -d $dur; code id $(sh "$here/codeid.sh"), commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version'), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), $(openssl version | cut -d' ' -f1-2), hey $(go version -m "$(command -v hey)" | awk '$1 == "mod" {print $3}')"
	echo "# data:      $rows seeded links; one hot link ($code), in every instance's memory before the first run"
	echo "# load:      concurrency $conc, ${dur} s per run after a 1 s warm-up, all on this machine; rounds go through the variants in order, reversed in even rounds"
	echo "# apps:      d = the app alone, plain HTTP; dT = the app alone with TLS_CERT_FILE (ECDSA P-256, Go's crypto/tls)"
	echo "#            n/nT = nginx (one worker) in front of one instance, plain / TLS (ECDSA P-256), upstream keepalive 32"
	echo "#            nR = the same with an RSA-2048 certificate; x/xT = ECDSA, NGINX_UPSTREAM_KEEPALIVE=0 (a connection to the instance per request)"
	echo "# load kind: -ka = hey, connections kept; -new = hey -disable-keepalive (a connection and, with TLS, a full handshake per request);"
	echo "#            -new-h2 = the same with hey -h2; -nc = benchmarks/newconn, a connection per request, no session cache (hey's twin);"
	echo "#            -resume = benchmarks/newconn -resume: a connection per request, the TLS session resumed;"
	echo "#            -x25519 = benchmarks/newconn -x25519, no session cache; -wrk = wrk -t2 -H 'Connection: close' (a connection per request)"
	echo "# TLS:       TLS 1.3; key exchange as both sides' defaults choose it: Go with Go (hey, newconn to the app) X25519MLKEM768, to nginx"
	echo "#            (OpenSSL 3.0) X25519; -x25519 = benchmarks/newconn offering X25519 alone. The generators do not verify the certificate"
	echo "# cpu:       user and system CPU of each process over the measured run (/proc/PID/stat; the generator's from GNU time), µs per response;"
	echo "#            loopback packets are processed by the kernel on whichever process's time sends them, so system time is shared out roughly"
	echo "#"
	for ep in healthz redirect; do
		echo "# $ep: medians over $rounds rounds"
		echo "# variant    req/s app_user app_sys nginx_user nginx_sys gen_user gen_sys bad"
		for v in $names; do row "$v" "$ep"; done | sed 's/^/# /'
		echo "#"
	done
	echo "# redirect / healthz within each round: median (min-max)"
	for v in $names; do
		for i in $(seq 1 "$rounds"); do
			echo "$i $(awk '{print $1}' "$tmp/m/$i-$v-redirect.sum") $(awk '{print $1}' "$tmp/m/$i-$v-healthz.sum")"
		done | awk '{print $1, ($3 > 0 ? $2 / $3 : 0)}' | medians | awk -v v="$v" 'NR == 1 {m = $2} NR == 2 {printf "# %-10s %.3f (%s)\n", v, m, $2}'
	done
	echo "#"
	echo "# TLS handshakes resumed, and key exchanges (benchmarks/newconn), all measured runs:"
	for v in $names; do
		case $(field "$v" 2) in nc*) ;; *) continue ;; esac
		cat "$tmp"/m/[0-9]*-"$v"-healthz "$tmp"/m/[0-9]*-"$v"-redirect | awk -v v="$v" '/TLS handshakes resumed/ {split($0, a, "resumed: "); split(a[2], b, " "); r += b[1]; t += b[3]}
			/Key exchange/ {sub(/^ *Key exchange /, ""); sub(/:\t/, " "); split($0, k, " "); g[k[1] " " k[2] " " k[3]] += k[4]}
			END {printf "#   %-10s %d of %d resumed;", v, r, t; for (x in g) printf " %s: %d", x, g[x]; printf "\n"}'
	done
	for i in $(seq 1 "$rounds"); do for v in $names; do for ep in healthz redirect; do
		printf '\n===== round %s, %s, %s: %s =====\n' "$i" "$v" "$ep" "$(cat "$tmp/m/$i-$v-$ep.sum")"
		cat "$tmp/m/$i-$v-$ep"
	done; done; done
} >"$out/13-connections${wrk:+-wrk}.txt"
grep -E '^# ' "$out/13-connections${wrk:+-wrk}.txt" | sed -n '/^# healthz: medians/,$p'
outputs_note
