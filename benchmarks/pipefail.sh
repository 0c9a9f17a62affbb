#!/usr/bin/env bash
# pipefail.sh: the quick start's check of a redirect's first line, as
# .ci/quickstart had it until step 43, run N times (default 2000) on a
# fixed set of headers (a 302 as the app sends it), under pipefail; it
# prints how many checks failed, with each failure's PIPESTATUS. Not a
# load: a loop of bash. Step 43 (docs/43) reads the failures as SIGPIPE
# (141) in the printf that feeds head: bash writes its stdout a line at a
# time, and head can exit after the first.
#
#   benchmarks/pipefail.sh [-o FILE] [N]
set -uo pipefail
args="$*"
out=''
while getopts o: opt; do
	case $opt in o) out=$OPTARG ;; *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
n=${1:-2000}
. "$(dirname "$0")/lib.sh" # machine_line
headers=$(printf 'HTTP/1.1 302 Found\r\nContent-Type: text/html; charset=utf-8\r\nLocation: https://go.dev/doc\r\nDate: Mon, 07 Dec 2026 00:00:00 GMT\r\nContent-Length: 42\r\n\r')
run() {
	echo "# .ci/quickstart's status-line check until step 43, run $n times under pipefail"
	echo "# made by:   benchmarks/pipefail.sh $args; date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(bash --version | head -n 1)"
	echo "# load:      $(cut -d' ' -f1-3 /proc/loadavg) (load averages over 1, 5, 15 min as it started)"
	echo "# each:      printf '%s\n' \"\$headers\" | head -n 1 | grep -q ' 302', headers a 302's (five lines); then the step-43 check, [[ \${headers%%\$'\n'*} == *' 302'* ]]"
	local bad=0 fixed=0 rcs='' i s
	for ((i = 0; i < n; i++)); do
		printf '%s\n' "$headers" | head -n 1 | grep -q ' 302'
		s=("${PIPESTATUS[@]}")
		if [ "${s[*]}" != '0 0 0' ]; then
			bad=$((bad + 1))
			rcs="$rcs ${s[*]};"
		fi
		[[ ${headers%%$'\n'*} == *' 302'* ]] || fixed=$((fixed + 1))
	done
	echo "runs: $n"
	echo "old check failed: $bad (PIPESTATUS printf head grep of each:${rcs:- none})"
	echo "step 43's check failed: $fixed"
}
if [ -n "$out" ]; then run | tee "$out"; else run; fi
