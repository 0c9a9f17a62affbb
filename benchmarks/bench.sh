#!/bin/sh
# bench.sh: measure one endpoint of a running shortener with hey, several
# times, and write one file: a header saying how the numbers were made, a
# summary (per-run req/s and p99, median and spread, status codes, CPU used
# by each process), then every hey output unedited.
#
#   benchmarks/bench.sh [options] healthz|redirect|create [BASE]
#
#   BASE          the service, default http://127.0.0.1:8080
#   -n RUNS       measured runs (default 5)
#   -d DURATION   length of each run, hey -z (default 10s)
#   -N REQUESTS   instead: each run sends this many requests, hey -n, and
#                 takes as long as they take (a check that the command
#                 works, on a machine of any speed or load: docs/28)
#   -c CONC       concurrency, hey -c (default 50)
#   -w WARMUP     warm-up run before measuring, discarded (default 3s; 0 = none)
#   -k CODE       redirect: the code to hit (default: create a link first)
#   -p PID        the server's process id, to record its CPU use (Linux);
#                 several instances: -p PID,PID,... (their CPU is summed)
#   -o FILE       where to write (default: stdout)
#   -l LABEL      a free-text label for the header (what is being compared)
#
# Environment: DATABASE_URL (to record Postgres version and row count),
# REDIS_URL (Redis version), HEY (the hey binary, default hey).
# POSIX sh: runs on Linux and macOS. CPU per process is read from /proc, so
# it is recorded on Linux only.
set -eu

runs=5 dur=10s conc=50 warm=3s code='' pid='' out='' label='' reqs=''
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts n:d:N:c:w:k:p:o:l:h opt; do
	case $opt in
	n) runs=$OPTARG ;; d) dur=$OPTARG ;; N) reqs=$OPTARG ;; c) conc=$OPTARG ;; w) warm=$OPTARG ;;
	k) code=$OPTARG ;; p) pid=$OPTARG ;; o) out=$OPTARG ;; l) label=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
what=$1
base=${2:-http://127.0.0.1:8080}
base=${base%/}
hey=${HEY:-hey}
# length: hey's flag for one run's length, a duration or a number of requests
if [ -n "$reqs" ]; then length="-n $reqs" lenflag="-N $reqs" dur="$reqs requests"; else length="-z $dur" lenflag="-d $dur"; fi
invocation="benchmarks/bench.sh -n $runs $lenflag -c $conc -w $warm${code:+ -k $code}${label:+ -l '$label'} $what $base"

command -v "$hey" >/dev/null 2>&1 || { echo "bench: $hey not found; go install github.com/rakyll/hey@v0.1.5" >&2; exit 1; }
command -v curl >/dev/null 2>&1 || { echo "bench: curl not found" >&2; exit 1; }
curl -fsS -m 5 "$base/healthz" >/dev/null || { echo "bench: $base/healthz does not answer" >&2; exit 1; }

body='{"url":"https://example.com/bench"}'
case $what in
healthz) target="$base/healthz"; set -- ;;
redirect)
	if [ -z "$code" ]; then
		code=$(curl -fsS -m 5 -X POST -d "$body" "$base/shorten" | sed -n 's/.*"code":"\([0-9A-Za-z]*\)".*/\1/p')
		[ -n "$code" ] || { echo "bench: could not create a link at $base/shorten" >&2; exit 1; }
	fi
	status=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' "$base/$code")
	[ "$status" = 302 ] || { echo "bench: $base/$code answers $status, not 302" >&2; exit 1; }
	target="$base/$code"; set -- ;;
create) target="$base/shorten"; set -- -m POST -T application/json -d "$body" ;;
*) usage ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# --- the machine and the software, for the header ---
repo=$(git rev-parse --show-toplevel 2>/dev/null || echo .)
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then dirty="dirty tree"; else dirty="clean tree"; fi
# code id: a hash of the program's source files as they are on disk. Docs and
# outputs added after a measurement change the commit, not this; rerun
# benchmarks/codeid.sh after git checkout ':/^Step NN:' to check a file was
# made from that step's code.
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
heyv=$(go version -m "$(command -v "$hey")" 2>/dev/null | awk '$1 == "mod" {print $3}')
pg="not used" rows="no database (memory store)" redis="not used"
if [ -n "${DATABASE_URL:-}" ]; then
	pg=$(psql "$DATABASE_URL" -Atc 'show server_version' 2>/dev/null || echo unknown)
	rows="$(psql "$DATABASE_URL" -Atc 'select count(*) from links' 2>/dev/null || echo unknown) rows in links"
fi
if [ -n "${REDIS_URL:-}" ]; then
	redis=$(redis-cli -u "$REDIS_URL" info server 2>/dev/null | sed -n 's/^redis_version:\([^[:space:]]*\).*/\1/p')
fi
nginxv="not installed"
command -v nginx >/dev/null 2>&1 && nginxv=$(nginx -v 2>&1 | sed 's/.*nginx\///')

# --- CPU accounting (Linux): clock ticks used so far ---
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
ticks_pid() { # utime+stime of the server: one process, or several (-p 1,2,3) summed
	[ -n "$pid" ] || { echo 0; return; }
	for p in $(echo "$pid" | tr ',' ' '); do
		[ -r "/proc/$p/stat" ] && cat "/proc/$p/stat"
	done 2>/dev/null | awk '{s += $14 + $15} END {print s + 0}'
}
ticks_name() { # utime+stime, plus children reaped (postmaster reaps backends), of processes named $1
	# cat, not awk on the files: a process can exit between the glob and the
	# read, and awk stops at the first file it cannot open.
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v n="($1)" '$2 == n {s += $14 + $15 + $16 + $17} END {print s + 0}'
}
ticks_children() { # CPU of this shell's finished children (hey), in 1/100 s, from times output in $1
	awk 'NR == 2 {
		split($1, u, "m"); split($2, s, "m"); sub("s", "", u[2]); sub("s", "", s[2])
		print (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 100 }' "$1"
}
# times must run in this shell, not in a $(...) subshell, to see hey's CPU.
snapshot() { echo "$(ticks_pid) $(ticks_name postgres) $(ticks_name redis-server) $(ticks_name nginx) $(ticks_children "$1")"; }

# --- warm-up, then the measured runs ---
if [ "$warm" != 0 ] && [ "$warm" != 0s ]; then
	"$hey" -z "$warm" -c "$conc" -disable-redirects "$@" "$target" >"$tmp/warmup" 2>&1
fi
times >"$tmp/times.before"
before=$(snapshot "$tmp/times.before")
start=$(date +%s)
i=1
while [ "$i" -le "$runs" ]; do
	# shellcheck disable=SC2086 # length is a flag and its value
	"$hey" $length -c "$conc" -disable-redirects "$@" "$target" >"$tmp/run$i" 2>&1
	# A run that no request finished prints no latencies: say so here,
	# not as an unset parameter in the summary.
	grep -q '^ *99%' "$tmp/run$i" || { echo "bench: run $i: no request answered (hey's output follows)" >&2; cat "$tmp/run$i" >&2; exit 1; }
	i=$((i + 1))
done
end=$(date +%s)
times >"$tmp/times.after"
after=$(snapshot "$tmp/times.after")

# --- summary ---
stat() { # median, min, max of the numbers on stdin
	sort -n | awk '{v[NR] = $1} END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%s %s %s\n", m, v[1], v[NR] }'
}
heyq="$(command -v "$hey" | sed 's/.*\///') $length -c $conc -disable-redirects"
[ "$what" = create ] && heyq="$heyq -m POST -T application/json -d '$body'"
{
	echo "# benchmark: $what${label:+ ($label)}"
	echo "# made by:   $invocation"
	echo "# hey:       $heyq $target"
	echo "# commit:    $commit ($dirty), code id $codeid"
	echo "# date:      $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# cpu:       $cpu, $cores cores"
	echo "# memory:    $mem"
	echo "# os:        $os"
	echo "# go:        $gov"
	echo "# postgres:  $pg"
	echo "# redis:     $redis"
	echo "# nginx:     $nginxv"
	echo "# hey:       ${heyv:-unknown version}"
	echo "# data:      $rows"
	echo "# warm-up:   $warm at concurrency $conc, discarded"
	echo "# runs:      $runs x $dur at concurrency $conc, load generator on the same machine"
	echo "#"
	echo "# run  req/s  p50_ms  p99_ms  responses  errors"
	i=1
	while [ "$i" -le "$runs" ]; do
		f="$tmp/run$i"
		rps=$(awk '/Requests\/sec:/ {print $2}' "$f")
		p50=$(awk '$1 == "50%%" || $1 == "50%" {printf "%.2f", $3 * 1000}' "$f")
		p99=$(awk '$1 == "99%%" || $1 == "99%" {printf "%.2f", $3 * 1000}' "$f")
		resp=$(awk '/^Status code distribution:/ {s = 1; next} /^$/ {s = 0} s && /responses/ {n += $2} END {print n + 0}' "$f")
		errs=$(awk '/^Error distribution:/ {s = 1; next} s && /^  \[/ {gsub(/[][]/, "", $1); n += $1} END {print n + 0}' "$f")
		echo "# $i  $rps  $p50  $p99  $resp  $errs"
		echo "$rps" >>"$tmp/rps"
		echo "$p99" >>"$tmp/p99"
		i=$((i + 1))
	done
	set -- $(stat <"$tmp/rps")
	awk -v m="$1" -v lo="$2" -v hi="$3" 'BEGIN {
		printf "# median req/s: %.1f  (min %.1f, max %.1f, spread +/-%.1f%% of median)\n", m, lo, hi, (hi - lo) / 2 / m * 100 }'
	set -- $(stat <"$tmp/p99")
	echo "# median p99:   $1 ms  (min $2, max $3)"
	echo "# status codes, all measured runs:"
	cat "$tmp"/run[0-9]* | awk '/^Status code distribution:/ {s = 1; next} /^$/ {s = 0} s && /responses/ {c[$1] += $2}
		END {for (k in c) printf "#   %s %d\n", k, c[k]}' | sort
	cat "$tmp"/run[0-9]* | awk '/^Error distribution:/ {s = 1; next} s && /^  \[/ {n++} END {if (n) print "#   errors: see the Error distribution in the raw outputs"}'
	if [ -r /proc/self/stat ]; then
		echo "# cpu seconds used during the measured runs ($((end - start)) s wall, $cores cores = $(((end - start) * cores)) cpu-s available):"
		echo "$before $after" | awk -v hz="$hz" -v havepid="${pid:+1}" '{
			if (havepid) printf "#   server   %.1f\n", ($6 - $1) / hz; else print "#   server   not measured (no -p PID)"
			printf "#   postgres %.1f\n#   redis    %.1f\n#   nginx    %.1f\n#   hey      %.1f\n",
				($7 - $2) / hz, ($8 - $3) / hz, ($9 - $4) / hz, ($10 - $5) / 100 }'
	else
		echo "# cpu seconds: not recorded (no /proc on this system)"
	fi
	i=1
	while [ "$i" -le "$runs" ]; do
		echo
		echo "----- hey output, run $i of $runs -----"
		cat "$tmp/run$i"
		i=$((i + 1))
	done
} >"$tmp/report"
if [ -n "$out" ]; then cp "$tmp/report" "$out"; else cat "$tmp/report"; fi
