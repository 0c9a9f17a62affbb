#!/usr/bin/env bash
# outage.sh PID [BASE]: what a 2-second outage looks like in hey's summary.
# Measures /healthz 3 times as usual, then 3 times while the server (process
# PID) is frozen with SIGSTOP for 2 s, about 4 s into each 10 s run, and
# writes both outputs to DIR (default benchmarks/) as 04-outage-none.txt and
# 04-outage-2s.txt.
set -euo pipefail
pid=${1:?usage: benchmarks/outage.sh PID [BASE]}
base=${2:-http://127.0.0.1:8080}
dir=$(dirname "$0")
out=${DIR:-$dir}
sh "$dir/bench.sh" -n 3 -w 0 -p "$pid" -l "outage.sh: no outage" -o "$out/04-outage-none.txt" healthz "$base"
(
	for _ in 1 2 3; do
		sleep 4; kill -STOP "$pid"; sleep 2; kill -CONT "$pid"; sleep 4
	done
) &
freezer=$!
sh "$dir/bench.sh" -n 3 -w 0 -p "$pid" -l "outage.sh: server frozen (SIGSTOP) for 2 s about 4 s into each run" \
	-o "$out/04-outage-2s.txt" healthz "$base"
wait "$freezer"
