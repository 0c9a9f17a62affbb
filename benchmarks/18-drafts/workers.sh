#!/usr/bin/env bash
# workers.sh: a draft measurement for docs/18, kept with its output
# (workers.txt). Is one group-commit worker and one rate-limit worker
# (this tree) better or worse for creates than two of each (step 10's
# choice)? Two builds of this tree, the second with both constants set
# back to 2, each on a new database of its own, one Redis (the machine's,
# db 3, key prefixes apart), CREATE_RATE=1000000 CREATE_BURST=1000000;
# rounds of hey -z 8s -c 50 POST /shorten, the order turning each round.
#   bash benchmarks/18-drafts/workers.sh > benchmarks/18-drafts/workers.txt
set -euo pipefail
export PATH=$PATH:$HOME/go/bin
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
trap 'kill $pids 2>/dev/null; wait 2>/dev/null; psql -qh 127.0.0.1 -U postgres -c "drop database if exists w_one" -c "drop database if exists w_two" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
pids=''
go build -o "$tmp/one" .
mkdir "$tmp/src" && git ls-files -z | xargs -0 tar -c | tar -x -C "$tmp/src"
cp ./*.go "$tmp/src/"
sed -i 's/limiterWorkers = 1/limiterWorkers = 2/' "$tmp/src/limits.go"
sed -i 's/^const groupCommitWorkers = 1/const groupCommitWorkers = 2/' "$tmp/src/groupcommit.go"
grep -q 'limiterWorkers = 2' "$tmp/src/limits.go" && grep -q 'groupCommitWorkers = 2' "$tmp/src/groupcommit.go"
(cd "$tmp/src" && go build -o "$tmp/two" .)
port=18090
for v in one two; do
	psql -qh 127.0.0.1 -U postgres -c "drop database if exists w_$v" -c "create database w_$v" >/dev/null 2>&1
	env ADDR=127.0.0.1:$port METRICS_ADDR=127.0.0.1:$((port + 1)) DATABASE_URL="postgres://postgres@127.0.0.1:5432/w_$v?sslmode=disable" \
		REDIS_URL=redis://127.0.0.1:6379/3 REDIS_KEY_PREFIX="w$v:" CREATE_RATE=1000000 CREATE_BURST=1000000 "$tmp/$v" 2>"$tmp/$v.log" &
	pids="$pids $!"
	eval "url_$v=http://127.0.0.1:$port pid_$v=$!"
	port=$((port + 2))
done
sleep 2
echo "# workers: one group-commit worker and one rate-limit worker (this tree) against two of each; hey -z 8s -c 50 POST /shorten"
echo "# made by:   bash benchmarks/18-drafts/workers.sh; commit $(git rev-parse --short=12 HEAD) (dirty tree: step 18 in progress), date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores"
echo "# round one_rps two_rps one/two one_app_us two_app_us"
order="one two"
for i in 1 2 3 4 5; do
	for v in $order; do
		eval "u=\$url_$v p=\$pid_$v"
		t0=$(awk '{print $14 + $15}' /proc/$p/stat)
		hey -z 8s -c 50 -m POST -T application/json -d '{"url":"https://example.com/some/path?q=1"}' "$u/shorten" >"$tmp/$i-$v.txt"
		t1=$(awk '{print $14 + $15}' /proc/$p/stat)
		echo "$(awk '/Requests\/sec/ {print $2}' "$tmp/$i-$v.txt") $(awk '/\[201\]/ {print $2}' "$tmp/$i-$v.txt") $((t1 - t0))" >"$tmp/$i-$v.sum"
	done
	order="${order#* } ${order%% *}"
	read -r a an at <"$tmp/$i-one.sum"; read -r b bn bt <"$tmp/$i-two.sum"
	awk -v i=$i -v a="$a" -v b="$b" -v an="$an" -v bn="$bn" -v at="$at" -v bt="$bt" -v hz="$(getconf CLK_TCK)" \
		'BEGIN {printf "# %d %.0f %.0f %.3f %.1f %.1f\n", i, a, b, a / b, at * 1e6 / hz / an, bt * 1e6 / hz / bn}'
done
for i in 1 2 3 4 5; do for v in one two; do printf '\n===== round %s, %s =====\n' "$i" "$v"; cat "$tmp/$i-$v.txt"; done; done
