#!/bin/sh
# vload.sh: load a running shortener with vegeta and write one file: a
# header saying how the numbers were made, a summary (vegeta's report, the
# status codes, a per-second timeline, slow requests, CPU used by each
# process, Redis hits and misses), then vegeta's raw reports. Unlike hey,
# vegeta can send a different URL each request (-t, from targets.sh) and
# can hold a fixed rate whatever the server does (open loop), and the
# timeline shows when an outage happened and how long it lasted, which a
# percentile over the whole run hides.
#
#   benchmarks/vload.sh [options] -t TARGETS | URL
#
#   -t TARGETS    vegeta targets file, http format (benchmarks/targets.sh
#                 writes one); or give one URL to hit over and over
#   -r RATE       requests per second, sent on schedule whatever the replies
#                 (open loop; vegeta syntax such as 500/1s works too);
#                 0 = as fast as WORKERS allow (closed loop, needs -w)
#                 (default 100)
#   -w WORKERS    with -r 0: requests in flight; with a rate: a cap on them
#                 (default: no cap, which keeps the loop open)
#   -d DURATION   length of the attack (default 10s)
#   -T TIMEOUT    per-request timeout; a request that hits it is an error
#                 (default 10s)
#   -e 'S:CMD'    run the shell command CMD in the background S seconds into
#                 the attack and log when it started and ended, e.g.
#                 -e '1:kill -STOP 1234' -e '2:kill -CONT 1234'; repeatable.
#                 The script waits for every CMD before it ends
#   -p PID        a server process, to record its CPU use (Linux); repeat it
#                 or separate PIDs with commas for several instances
#   -l LABEL      a free-text label for the header (what is being compared)
#   -o FILE       where to write (default: stdout)
#
# Redirects are not followed (a 302 is a success), connections are kept
# alive. Environment: DATABASE_URL (Postgres version, rows in links),
# REDIS_URL (Redis version; INFO stats keyspace hits and misses before and
# after, and the run's hit ratio), VEGETA (the binary, default vegeta;
# go install github.com/tsenart/vegeta/v12@v12.13.0).
# POSIX sh: runs on Linux and macOS. CPU per process is read from /proc, so
# it is recorded on Linux only.
set -eu

rate=100 workers='' dur=10s timeout=10s targets='' pids='' out='' label='' nev=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vload.XXXXXX")
evpids=''
cleanup() {
	# An event still waiting (after an interrupt) must not fire later, say
	# a SIGSTOP with no SIGCONT after it.
	for p in $evpids; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
usage() { sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
fail() { echo "vload: $*" >&2; exit 1; }
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
evargs=''
while getopts t:r:w:d:T:e:p:l:o:h opt; do
	case $opt in
	t) targets=$OPTARG ;; r) rate=$OPTARG ;; w) workers=$OPTARG ;; d) dur=$OPTARG ;;
	T) timeout=$OPTARG ;; l) label=$OPTARG ;; o) out=$OPTARG ;;
	p) pids="$pids $(echo "$OPTARG" | tr ',' ' ')" ;;
	e)
		sec=${OPTARG%%:*} cmd=${OPTARG#*:}
		case $sec in '' | *[!0-9.]* | *.*.* | .) echo "vload: -e wants SECONDS:COMMAND, not '$OPTARG'" >&2; exit 2 ;; esac
		[ "$cmd" != "$OPTARG" ] && [ -n "$cmd" ] || { echo "vload: -e wants SECONDS:COMMAND, not '$OPTARG'" >&2; exit 2; }
		nev=$((nev + 1))
		printf '%s\n' "$sec" >"$tmp/ev$nev.at"
		printf '%s\n' "$cmd" >"$tmp/ev$nev.cmd"
		evargs="$evargs -e $(quote "$OPTARG")" ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
url=''
if [ -n "$targets" ]; then
	[ $# -eq 0 ] || usage
	[ -r "$targets" ] || fail "cannot read targets file $targets"
	first=$(awk '$1 ~ /^[A-Z]+$/ && $2 ~ /^https?:\/\// {print $2; exit}' "$targets")
	[ -n "$first" ] || fail "no 'METHOD URL' line in $targets"
	# The output names the file without this machine's directories: the
	# path relative to the repository, or the bare name of a temporary file.
	troot=$(git rev-parse --show-toplevel 2>/dev/null || echo .)
	case $targets in
	"$troot"/*) tshow=${targets#"$troot"/} ;;
	/*) tshow="(temporary) $(basename "$targets")" ;;
	*) tshow=$targets ;;
	esac
else
	[ $# -eq 1 ] || usage
	url=$1
	case $url in http://* | https://*) ;; *) fail "URL must start with http:// or https://, not '$url'" ;; esac
	first=$url
	printf 'GET %s\n' "$url" >"$tmp/targets"
fi
for p in $pids; do
	case $p in *[!0-9]*) fail "-p wants process ids, not '$p'" ;; esac
done
case $workers in '') ;; *[!0-9]* | 0) fail "-w must be a whole number >= 1, not '$workers'" ;; esac
case $rate in
0 | 0/*)
	[ -n "$workers" ] || fail "-r 0 (as fast as possible) needs -w WORKERS"
	mode="closed loop: as fast as $workers workers go (vegeta -rate 0 -workers $workers -max-workers $workers)"
	set -- -rate 0 -workers "$workers" -max-workers "$workers" ;;
*)
	mode="open loop: $rate requests per second on schedule${workers:+, at most $workers in flight} (vegeta -rate $rate${workers:+ -max-workers $workers})"
	set -- -rate "$rate" ${workers:+-max-workers "$workers"} ;;
esac
vegeta=${VEGETA:-vegeta}
command -v "$vegeta" >/dev/null 2>&1 || fail "$vegeta not found; go install github.com/tsenart/vegeta/v12@v12.13.0"
command -v curl >/dev/null 2>&1 || fail "curl not found"
base=$(echo "$first" | sed 's|^\(https\{0,1\}://[^/]*\).*|\1|')
curl -fsS -m 5 -o /dev/null "$base/healthz" || fail "$base/healthz does not answer"
invocation="benchmarks/vload.sh${targets:+ -t $tshow} -r $rate${workers:+ -w $workers} -d $dur -T $timeout$evargs${label:+ -l $(quote "$label")}${url:+ $url}"
vegetaq="awk (${targets:+$tshow}${url:+GET $url}, comments dropped, repeated forever) | $(command -v "$vegeta" | sed 's/.*\///') attack -lazy -format http $* -duration $dur -timeout $timeout -redirects=-1 -keepalive=true"

# --- the machine and the software, for the header ---
repo=$(git rev-parse --show-toplevel 2>/dev/null || echo .)
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then dirty="dirty tree"; else dirty="clean tree"; fi
codeid=$(sh "$(dirname "$0")/codeid.sh" "$repo")
if [ -r /proc/cpuinfo ]; then
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
	mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
else
	cpu=$(sysctl -n machdep.cpu.brand_string 2>/dev/null || echo unknown)
	mem=$(sysctl -n hw.memsize 2>/dev/null | awk '{printf "%.1f GiB", $1 / 1073741824}')
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.ncpu)
os="$(uname -sr)"
[ -r /etc/os-release ] && os="$os, $(. /etc/os-release && echo "$PRETTY_NAME")"
# (no pipefail in sh: the pipeline's status is awk's, so go's failure is
# seen by the empty result)
gov=$(go version 2>/dev/null | awk '{print $3}')
[ -n "$gov" ] || gov=unknown
vegetav=$(go version -m "$(command -v "$vegeta")" 2>/dev/null | awk '$1 == "mod" {print $3}')
pg="not used" rows="no database (memory store)" redis="not used"
if [ -n "${DATABASE_URL:-}" ]; then
	pg=$(psql "$DATABASE_URL" -Atc 'show server_version' 2>/dev/null || echo unknown)
	rows="$(psql "$DATABASE_URL" -Atc 'select count(*) from links' 2>/dev/null || echo unknown) rows in links"
fi
if [ -n "${REDIS_URL:-}" ]; then
	redis=$(redis-cli -u "$REDIS_URL" info server 2>/dev/null | sed -n 's/^redis_version:\([^[:space:]]*\).*/\1/p')
	[ -n "$redis" ] || fail "REDIS_URL is set but redis-cli cannot read INFO from it"
fi
nginxv="not installed"
command -v nginx >/dev/null 2>&1 && nginxv=$(nginx -v 2>&1 | sed 's/.*nginx\///')
if [ -n "$targets" ]; then
	tinfo="$tshow: $(grep -c '^[A-Z][A-Z]* ' "$targets") targets, $(awk '$1 ~ /^[A-Z]+$/ {print $2}' "$targets" | sort -u | wc -l | tr -d ' ') distinct URLs, sent in order, from the top again at the end"
else
	tinfo="one URL: $url"
fi

# --- CPU accounting (Linux): clock ticks used so far ---
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
ticks_pid() { # utime+stime of process $1, or - if it is gone
	if [ -r "/proc/$1/stat" ]; then awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo -; else echo -; fi
}
ticks_name() { # utime+stime, plus children reaped (postmaster reaps backends), of processes named $1
	# cat, not awk on the files: a process can exit between the glob and the
	# read, and awk stops at the first file it cannot open.
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v n="($1)" '$2 == n {s += $14 + $15 + $16 + $17} END {print s + 0}'
}
snapshot() {
	for p in $pids; do printf '%s ' "$(ticks_pid "$p")"; done
	echo "$(ticks_name postgres) $(ticks_name redis-server) $(ticks_name nginx)"
}
redis_stats() { # keyspace_hits keyspace_misses
	# redis-cli first, on its own: in a pipeline (no pipefail in sh) its
	# failure would go unseen, and awk print 0 0, a hit ratio made up.
	_info=$(redis-cli -u "$REDIS_URL" info stats) || fail "redis-cli cannot read INFO stats from REDIS_URL"
	printf '%s\n' "$_info" | tr -d '\r' | awk -F: '$1 == "keyspace_hits" {h = $2} $1 == "keyspace_misses" {m = $2} END {print h + 0, m + 0}'
}
now_ns() {
	t=$(date +%s%N)
	case $t in *N) echo "${t%N}000000000" ;; *) echo "$t" ;; esac
}

# --- the attack, with the events beside it ---
[ -n "${REDIS_URL:-}" ] && redis_before=$(redis_stats)
before=$(snapshot)
launch=$(now_ns)
i=1
while [ "$i" -le "$nev" ]; do
	(
		sleep "$(cat "$tmp/ev$i.at")"
		now_ns >"$tmp/ev$i.start"
		set +e
		sh -c "$(cat "$tmp/ev$i.cmd")" >"$tmp/ev$i.out" 2>&1
		echo $? >"$tmp/ev$i.rc"
		now_ns >"$tmp/ev$i.end"
	) &
	evpids="$evpids $!"
	i=$((i + 1))
done
# vegeta -targets FILE parses the whole file before the first request (most
# of a second for 100,000 targets), which would put each -e event that much
# early. So vegeta reads its targets lazily from awk, which repeats the file
# forever and dies of SIGPIPE when vegeta exits. Comment lines are dropped:
# vegeta v12.13.0's lazy reader stops at the first target after one.
# The pair runs under its own sh so that, once both have exited and been
# reaped, that sh's children-CPU fields in /proc hold their CPU alone.
set +e
VLOAD_TARGETS=${targets:-$tmp/targets} VLOAD_OUT=$tmp/results.bin VLOAD_ERR=$tmp/attack.err VLOAD_CPU=$tmp/vegeta.cpu sh -c '
	awk "!/^#/ {l[++n] = \$0; print} END {while (n) for (i = 1; i <= n; i++) print l[i]}" "$VLOAD_TARGETS" |
		"$@" >"$VLOAD_OUT" 2>"$VLOAD_ERR"
	rc=$?
	if [ -r /proc/$$/stat ]; then awk "{print \$16 + \$17}" /proc/$$/stat >"$VLOAD_CPU"; fi
	exit $rc' vload "$vegeta" attack -lazy -format http "$@" \
	-duration "$dur" -timeout "$timeout" -redirects=-1 -keepalive=true
rc=$?
set -e
finish=$(now_ns)
after=$(snapshot)
[ -n "${REDIS_URL:-}" ] && redis_after=$(redis_stats)
[ "$rc" -eq 0 ] || { cat "$tmp/attack.err" >&2; fail "vegeta attack failed (exit $rc)"; }
for p in $evpids; do wait "$p" || true; done
evpids=''

# --- summary ---
"$vegeta" report "$tmp/results.bin" >"$tmp/report.txt"
"$vegeta" report -type='hist[0,1ms,2ms,5ms,10ms,25ms,50ms,100ms,250ms,500ms,1s,2s,5s]' "$tmp/results.bin" >"$tmp/hist.txt"
"$vegeta" report -type=json "$tmp/results.bin" >"$tmp/report.json"
# Columns of vegeta v12 csv: timestamp (ns), code, latency (ns), bytes out,
# bytes in, error, body, attack, seq, method, url, headers. Only the first
# three are read; they come before any field that can hold a comma. The
# timestamp is cut to microseconds, which awk's doubles hold exactly.
"$vegeta" encode --to csv "$tmp/results.bin" |
	awk -F, '{print substr($1, 1, length($1) - 3), $2, $3}' >"$tmp/rows"
[ -s "$tmp/rows" ] || fail "vegeta recorded no requests"
t0=$(awk 'NR == 1 || $1 < m {m = $1} END {printf "%.0f\n", m}' "$tmp/rows")
# One line per second of the attack, by when the request was sent; "done"
# counts replies by when they arrived, so a freeze shows as a hole there too.
timeline() {
	awk -v t0="$t0" '{
		s = int(($1 - t0) / 1e6); e = int(($1 - t0 + $3 / 1000) / 1e6)
		print "S", s, $3, $2; print "E", e
	}' "$tmp/rows" | LC_ALL=C sort -k1,1 -k2,2n -k3,3n | awk '
	function flush() {
		if (!n) return
		p50[cur] = v[int((n * 50 + 99) / 100)]; p99[cur] = v[int((n * 99 + 99) / 100)]; mx[cur] = v[n]
		cnt[cur] = n; n = 0
	}
	$1 == "E" {done[$2]++; if ($2 > last) last = $2; next}
	{
		if (n && $2 != cur) flush()
		cur = $2
		v[++n] = $3 / 1e6
		if ($4 >= 200 && $4 < 400) ok[$2]++; else if ($4 >= 400 && $4 < 500) c4[$2]++
		else if ($4 >= 500) c5[$2]++; else er[$2]++
		if ($2 > last) last = $2
	}
	END {
		flush()
		print "#   second  sent  2xx/3xx  4xx  5xx  errors   p50_ms   p99_ms   max_ms  done"
		for (s = 0; s <= last; s++) {
			if (s in cnt) printf "#   %6d %5d %8d %4d %4d %7d %8.2f %8.2f %8.2f %5d\n", s, cnt[s], ok[s], c4[s], c5[s], er[s], p50[s], p99[s], mx[s], done[s]
			else printf "#   %6d %5d %8d %4d %4d %7d %8s %8s %8s %5d\n", s, 0, 0, 0, 0, 0, "-", "-", "-", done[s]
		}
	}'
}
{
	echo "# load test${label:+: $label}"
	echo "# made by:   $invocation"
	echo "# attack:    $vegetaq"
	echo "# mode:      $mode"
	echo "# targets:   $tinfo"
	[ -n "$targets" ] && grep '^#' "$targets" | sed 's/^#/#            /'
	echo "# commit:    $commit ($dirty), code id $codeid"
	echo "# date:      $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# cpu:       $cpu, $cores cores"
	echo "# memory:    $mem"
	echo "# os:        $os"
	echo "# go:        $gov"
	echo "# postgres:  $pg"
	echo "# redis:     $redis"
	echo "# nginx:     $nginxv"
	echo "# vegeta:    ${vegetav:-unknown version}"
	echo "# data:      $rows"
	echo "# warm-up:   none; for a warm cache, run twice and keep the second"
	echo "# run:       $dur, load generator on the same machine"
	echo "#"
	echo "# vegeta report:"
	sed 's/^/#   /' "$tmp/report.txt"
	echo "# status codes (0 = no reply: timeout, refused, reset):"
	awk '{c[$2]++} END {for (k in c) printf "#   %s %d\n", k, c[k]}' "$tmp/rows" | sort
	awk '{n++; if ($3 > 250e6) a++; if ($3 > 1e9) b++}
		END {printf "# slow: %d of %d requests took over 250 ms, %d over 1 s\n", a, n, b}' "$tmp/rows"
	echo "# per second of the attack (from the first request sent; latencies include errors):"
	timeline
	if [ "$nev" -gt 0 ]; then
		echo "# events (seconds from the first request sent):"
		i=1
		while [ "$i" -le "$nev" ]; do
			if [ -s "$tmp/ev$i.start" ]; then
				st=$(cat "$tmp/ev$i.start") en=$(cat "$tmp/ev$i.end") erc=$(cat "$tmp/ev$i.rc")
				awk -v t0="$t0" -v s="$st" -v e="$en" -v rc="$erc" -v c="$(cat "$tmp/ev$i.cmd")" 'BEGIN {
					s = (substr(s, 1, length(s) - 3) - t0) / 1e6; e = (substr(e, 1, length(e) - 3) - t0) / 1e6
					printf "%.6f #   %+.3f to %+.3f s: %s (exit %d)\n", s, s, e, c, rc }'
			else
				echo "999999 #   did not run: $(cat "$tmp/ev$i.cmd")"
			fi
			i=$((i + 1))
		done | sort -n | sed 's/^[^ ]* //'
	fi
	if [ -r /proc/self/stat ]; then
		awk -v s="$launch" -v e="$finish" -v c="$cores" 'BEGIN {
			w = (substr(e, 1, length(e) - 6) - substr(s, 1, length(s) - 6)) / 1000
			printf "# cpu seconds used during the attack (%.1f s wall, %d cores = %.1f cpu-s available):\n", w, c, w * c }'
		if [ -z "$pids" ]; then echo "#   server   not measured (no -p PID)"; fi
		echo "$before | $after" | awk -v hz="$hz" -v pids="$pids" '{
			np = split(pids, p, " "); n = (NF - 1) / 2
			for (i = 1; i <= np; i++) {
				b = $i; a = $(i + n + 1)
				if (a == "-" || b == "-") printf "#   server   pid %s: exited or not found, not measured\n", p[i]
				else printf "#   server   pid %s: %.1f\n", p[i], (a - b) / hz
			}
			printf "#   postgres %.1f\n#   redis    %.1f\n#   nginx    %.1f\n",
				($(np + n + 2) - $(np + 1)) / hz, ($(np + n + 3) - $(np + 2)) / hz, ($(np + n + 4) - $(np + 3)) / hz }'
		if [ -s "$tmp/vegeta.cpu" ]; then
			awk -v hz="$hz" '{printf "#   vegeta   %.1f (with the awk that feeds it targets)\n", $1 / hz}' "$tmp/vegeta.cpu"
		fi
	else
		echo "# cpu seconds: not recorded (no /proc on this system)"
	fi
	if [ -n "${REDIS_URL:-}" ]; then
		echo "$redis_before $redis_after" | awk '{
			h = $3 - $1; m = $4 - $2
			printf "# redis INFO stats (whole server, every client): keyspace_hits %d -> %d, keyspace_misses %d -> %d\n", $1, $3, $2, $4
			if (h + m > 0) printf "# redis hit ratio of this run: %d hits, %d misses, %.1f%%\n", h, m, 100 * h / (h + m)
			else print "# redis hit ratio of this run: no lookups" }'
	fi
	echo
	echo "----- vegeta report -type=hist -----"
	cat "$tmp/hist.txt"
	echo
	echo "----- vegeta report -type=json -----"
	cat "$tmp/report.json"
	if [ -s "$tmp/attack.err" ]; then
		echo
		echo "----- vegeta attack stderr -----"
		cat "$tmp/attack.err"
	fi
	i=1
	while [ "$i" -le "$nev" ]; do
		if [ -s "$tmp/ev$i.out" ]; then
			echo
			echo "----- output of event $i: $(cat "$tmp/ev$i.cmd") -----"
			cat "$tmp/ev$i.out"
		fi
		i=$((i + 1))
	done
} >"$tmp/out"
if [ -n "$out" ]; then cp "$tmp/out" "$out"; else cat "$tmp/out"; fi
