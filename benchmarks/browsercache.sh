#!/usr/bin/env bash
# browsercache.sh: step 16's demonstration of what a redirect's status does
# to a browser's cache, and so to the clicks a shortener sees. A real
# browser (Debian's Chromium, headless) opens each short link three times,
# each time a new browser process on the same profile (its cache on disk,
# as a person's browser keeps it between visits); the app counts a click
# each time the request reaches it (CLICKS=sync, so the count is there at
# once). A 301 or a 308 is "permanent": the browser remembers it and goes
# straight to the target the next times, and the shortener never sees those
# clicks. A 302 or a 307 is asked for every time.
#
#   benchmarks/browsercache.sh [-o FILE] [-n VISITS]
#
# The links point at http://target.example:PORT/, which the browser is told
# to resolve to a small local server of the script's (--host-resolver-rules):
# the app refuses links to its own host and to loopback addresses, and
# nothing leaves the machine. Needs go, curl, python3 and chromium
# (apt-get install chromium). Takes about half a minute.
set -euo pipefail
out='' visits=3
while getopts o:n: opt; do
	case $opt in
	o) out=$OPTARG ;; n) visits=$OPTARG ;;
	*) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
case $visits in '' | *[!0-9]*) echo "browsercache.sh: -n wants a whole number" >&2; exit 2 ;; esac
case $out in '' | /*) ;; *) out="$PWD/$out" ;; esac
cd "$(git rev-parse --show-toplevel)"
for tool in go curl python3 chromium; do
	command -v "$tool" >/dev/null || { echo "browsercache.sh: $tool not found (chromium: apt-get install chromium)" >&2; exit 1; }
done
. benchmarks/lib.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/browsercache.XXXXXX")
app='' tgt=''
cleanup() {
	for p in $app $tgt; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
go build -o "$tmp/app" .
port=$(freeport) mport=$(freeport) tport=$(freeport)
mkdir -p "$tmp/target"
echo '<!doctype html><title>target</title><p>the target page</p>' >"$tmp/target/index.html"
python3 -m http.server "$tport" --bind 127.0.0.1 --directory "$tmp/target" >"$tmp/target.log" 2>&1 &
tgt=$!
env -u DATABASE_URL -u REDIS_URL ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" CLICKS=sync "$tmp/app" 2>"$tmp/app.log" &
app=$!
wait_healthy "http://127.0.0.1:$port" "$tmp/app.log"
run() {
	echo "# what a redirect's status does to a browser's cache: $visits visits to each short link, the clicks the shortener saw"
	echo "# made by:   benchmarks/browsercache.sh $*; code id $(sh benchmarks/codeid.sh), commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/16-*' || echo ' (dirty tree)'), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# software:  $(chromium --version 2>/dev/null | head -n 1), headless; $(go version | awk '{print $3}')"
	echo "# method:    the app with the memory store and CLICKS=sync; a link per status to http://target.example:$tport/ (resolved by the"
	echo "#            browser to a local python3 http.server); each visit a new chromium process, --headless --dump-dom, on one"
	echo "#            profile (--user-data-dir), so its HTTP cache is kept between visits; then GET /api/links/CODE for the clicks"
	echo "#"
	echo "# status  code     visits  saw_target  clicks  Cache-Control_on_the_redirect"
	for s in 301 302 307 308; do
		code=$(curl -fsS -X POST -d "{\"url\":\"http://target.example:$tport/\",\"redirect\":$s}" "http://127.0.0.1:$port/shorten" | sed -n 's/.*"code":"\([^"]*\)".*/\1/p')
		[ -n "$code" ] || { echo "browsercache.sh: the create failed" >&2; exit 1; }
		cc=$(curl -sI "http://127.0.0.1:$port/$code" | tr -d '\r' | sed -n 's/^[Cc]ache-[Cc]ontrol: //p')
		# (that HEAD counts no click)
		seen=0
		for v in $(seq "$visits"); do
			if timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
				--disable-component-update --disable-sync --user-data-dir="$tmp/profile" \
				--host-resolver-rules="MAP target.example 127.0.0.1" --dump-dom "http://127.0.0.1:$port/$code" 2>/dev/null | grep -q 'the target page'; then
				seen=$((seen + 1))
			fi
		done
		clicks=$(curl -fsS "http://127.0.0.1:$port/api/links/$code" | sed -n 's/.*"clicks":\([0-9]*\).*/\1/p')
		printf '  %s     %s  %6d  %10d  %6s  %s\n' "$s" "$code" "$visits" "$seen" "$clicks" "${cc:-(none)}"
	done
}
if [ -n "$out" ]; then run "$@" >"$out"; cat "$out"; else run "$@"; fi
