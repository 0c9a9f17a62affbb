#!/usr/bin/env bash
# creates.sh: step 18's sitting. Creates at scale, and bulk import.
#
#   speed   three instances, each on a database of its own seeded with
#           LINKS links, one Redis of the script's own (a key prefix
#           each), the rate limit on and counting every create
#           (CREATE_RATE=1000000 CREATE_BURST=1000000: never refused, so
#           that its cost is in every create): step 17's app (built from
#           its commit), and this tree's with CODES=sequence and with
#           CODES=random. Rounds of hey -z DURATION -c 50 POST /shorten,
#           and /healthz of this tree's instance, in an order that turns
#           each round. CPU per 201 of the app, all postgres processes,
#           the Redis and hey; after the rounds, the links each database
#           holds against the 201s hey counted (hey does not count the
#           answers in flight when it stops: links >= 201s is what must
#           hold). Target: creates >= 0.45 of /healthz. The same with
#           wrk (benchmarks/create.lua) for /healthz, step 17 and sequence,
#           in the same rounds.
#   import  a file of ROWS URLs: `shortener import` of it into a new
#           database, against Postgres's own COPY (psql \copy) of the same
#           rows (code, url, token_hash, read back from the first) into
#           another new database, the same schema; rounds alternate.
#           Rows a second, and the CPU of the importer and of Postgres.
#
#   benchmarks/creates.sh [-q] [-o DIR] [-p PARTS] [-n ROUNDS] [-d SECONDS] [-l LINKS] [-r ROWS]
#
#   -q        quick: 1 round of 1 s, 2,000 links, 20,000 rows
#   -o DIR    where the outputs go: 18-creates.txt, 18-import.txt
#             (default: a temporary directory, removed at the end)
#   -p PARTS  comma-separated (default speed,import)
#   -n, -d    rounds (default 5; import: 3) and seconds per run (default 10)
#   -l LINKS  links seeded in each speed database (default 100,000)
#   -r ROWS   URLs imported per round (default 1,000,000)
#
# Environment: ADMIN_DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). About 8
# minutes with the defaults. Needs go, git, psql, redis-server, redis-cli,
# curl, hey, wrk and /usr/bin/time (GNU time).
set -euo pipefail

conc=50 out='' parts='speed import' rounds=5 dur=10 links=100000 rows=1000000
args="$*"
while getopts qo:p:n:d:l:r: opt; do
	case $opt in
	q) rounds=1 dur=1 links=2000 rows=20000 ;;
	o) out=$OPTARG ;; n) rounds=$OPTARG ;; d) dur=${OPTARG%s} ;; l) links=$OPTARG ;; r) rows=$OPTARG ;;
	p) parts=$(echo "$OPTARG" | tr ',' ' ') ;;
	*) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "n $rounds" "d $dur" "l $links" "r $rows"; do
	case ${v#* } in '' | *[!0-9]* | 0) echo "creates.sh: -${v%% *} wants a whole number above 0" >&2; exit 2 ;; esac
done
for p in $parts; do case $p in speed | import) ;; *) echo "creates.sh: unknown part $p (speed, import)" >&2; exit 2 ;; esac; done
. "$(dirname "$0")/lib.sh"
sitting creates go git psql redis-server redis-cli curl hey wrk
[ -x /usr/bin/time ] || { echo "creates.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
outputs_dir

codeid=$(sh "$here/codeid.sh")
commit="$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- . ':!benchmarks/18-*' || echo ' (dirty tree)')"
go build -o "$tmp/app" .
go build -o "$tmp/zipf" ./benchmarks/zipf
nq=${admin%%\?*}
# newdb NAME: a new database of the sitting's own (dropped at the end,
# with $dbs); sets newurl to its URL. (Not $(newdb): in a subshell the
# name would not reach $dbs.)
newdb() {
	psql "$admin" -qc "CREATE DATABASE $1" >/dev/null
	dbs="$dbs $1"
	newurl="${nq%/*}/$1${admin#"$nq"}"
}
# CPU ticks: lib.sh's ticks_pids (a comma list, summed), and ticks_named
# postgres: the CPU of every postgres process, and of those that have
# ended (a backend ends with its connection, and the postmaster, its
# parent, then holds its CPU in cutime and cstime).
hz=$(getconf CLK_TCK)
header() { # header TITLE PART
	echo "# $1"
	echo "# made by:   benchmarks/creates.sh ${args:-(no flags)} (part $2): -n $rounds -d $dur -l $links -r $rows; code id $codeid, commit $commit, date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# machine:   $(machine_line)"
	echo "# software:  $(go version | awk '{print $3}'), postgres $(psql "$admin" -Atc 'show server_version') (synchronous_commit $(psql "$admin" -Atc 'show synchronous_commit')), redis $(redis-server --version | cut -d' ' -f3 | sed 's/v=//'), hey $(go version -m "$(command -v hey)" 2>/dev/null | awk '$1 == "mod" {print $3}'), $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f1-2)"
}

# ---- speed

if want speed; then
	dir="$tmp/speed"
	mkdir -p "$dir/s17"
	c17=$(git rev-parse --short=12 ':/^Step 17:')
	git archive "$c17" | tar -x -C "$dir/s17"
	(cd "$dir/s17" && go build -o "$tmp/app17" .)
	start_redis "$tmp"
	rurl="redis://127.0.0.1:$redis_port/0"
	# start_app NAME BINARY ENV...: an instance on a new database of its
	# own, seeded before it starts; sets NAME_url, NAME_pid, NAME_db.
	start_app() {
		local name=$1 bin=$2 port mport u
		shift 2
		newdb "${db}_$name"
		u=$newurl
		PGOPTIONS='-c client_min_messages=warning' psql "$u" -q -v ON_ERROR_STOP=1 -f sql/schema.sql >/dev/null
		"$tmp/zipf" -seed-copy "$links" | psql "$u" -q -v ON_ERROR_STOP=1 -c 'COPY links (code, url) FROM STDIN'
		psql "$u" -qc 'ANALYZE links' >/dev/null
		port=$(freeport) mport=$(freeport)
		env DATABASE_URL="$u" ADDR="127.0.0.1:$port" METRICS_ADDR="127.0.0.1:$mport" REDIS_URL="$rurl" REDIS_KEY_PREFIX="creates-$name:" \
			CREATE_RATE=1000000 CREATE_BURST=1000000 "$@" "$bin" 2>"$tmp/app-$name.log" &
		eval "${name}_pid=$! ${name}_url=http://127.0.0.1:$port ${name}_db=$u"
		pids="$pids $!"
		wait_healthy "http://127.0.0.1:$port" "$tmp/app-$name.log"
	}
	start_app s17 "$tmp/app17"
	start_app seq "$tmp/app" CODES=sequence
	start_app rnd "$tmp/app" CODES=random
	body='{"url":"https://example.com/some/path?q=1"}'
	rpid=$(redis-cli -p "$redis_port" info server | awk -F: '/^process_id:/ {print $2 + 0}')
	# run KEY FILE: one hey run; KEY picks the instance and the endpoint.
	run() {
		local k=$1 f=$2 url app t0 t1 p0 p1 r0 r1
		case $k in
		h | wh) url="$seq_url/healthz" app=$seq_pid ;;
		s17 | ws17) url="$s17_url/shorten" app=$s17_pid ;;
		seq | wseq) url="$seq_url/shorten" app=$seq_pid ;;
		rnd) url="$rnd_url/shorten" app=$rnd_pid ;;
		esac
		t0=$(ticks_pids "$app") p0=$(ticks_named postgres) r0=$(ticks_pids "$rpid")
		if [ "$k" = wh ]; then
			/usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency "$url" >"$f" 2>&1
		elif [ "${k#w}" != "$k" ]; then
			/usr/bin/time -f '%U %S' -o "$f.cpu" wrk -t2 -c"$conc" -d"${dur}s" --latency -s "$here/create.lua" "$url" >"$f" 2>&1
		elif [ "$k" = h ]; then
			/usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" "$url" >"$f" 2>&1
		else
			/usr/bin/time -f '%U %S' -o "$f.cpu" hey -z "${dur}s" -c "$conc" -m POST -T application/json -d "$body" "$url" >"$f" 2>&1
		fi
		t1=$(ticks_pids "$app") p1=$(ticks_named postgres) r1=$(ticks_pids "$rpid")
		if [ "${k#w}" != "$k" ]; then
			# wrk: req/s, responses less the non-2xx and socket errors, those, app µs, pg µs, redis µs, wrk µs per ok response, p50 and p99 ms
			awk -v hz="$hz" -v a=$((t1 - t0)) -v p=$((p1 - p0)) -v r=$((r1 - r0)) -v g="$(awk '{print $1 + $2}' "$f.cpu")" '
				function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; return v * 1000 }
				/^Requests\/sec:/ {rps = $2} / requests in / {all = $1}
				/Non-2xx or 3xx/ {bad += $NF} /Socket errors/ {gsub(",", ""); bad += $4 + $6 + $8 + $10}
				/^ +50%/ {p50 = ms($2)} /^ +99%/ {p99 = ms($2)}
				END {ok = all - bad; n = ok > 0 ? ok : 1; printf "%.0f %d %d %.1f %.1f %.1f %.1f %.2f %.2f\n", rps, ok, bad, a * 1e6 / hz / n, p * 1e6 / hz / n, r * 1e6 / hz / n, g * 1e6 / n, p50, p99}' "$f" >"$f.sum"
			return
		fi
		# req/s, ok responses (200 or 201), other responses, app µs, pg µs, redis µs, hey µs per ok response, p50 and p99 ms
		awk -v hz="$hz" -v a=$((t1 - t0)) -v p=$((p1 - p0)) -v r=$((r1 - r0)) -v g="$(awk '{print $1 + $2}' "$f.cpu")" '
			/Requests\/sec:/ {rps = $2}
			/^  \[20[01]\]/ {ok += $2} /^  \[[0-9]+\]/ && !/^  \[20[01]\]/ {bad += $2}
			/^Error distribution:/ {e = 1} e && /^  \[[0-9]+\]/ {x = $1; gsub(/[][]/, "", x); bad += x}
			/ 50%+ in / {p50 = $3 * 1000} / 99%+ in / {p99 = $3 * 1000}
			END {n = ok ? ok : 1; printf "%.0f %d %d %.1f %.1f %.1f %.1f %.2f %.2f\n", rps, ok, bad, a * 1e6 / hz / n, p * 1e6 / hz / n, r * 1e6 / hz / n, g * 1e6 / n, p50, p99}' "$f" >"$f.sum"
	}
	for k in h s17 seq rnd wh ws17 wseq; do run "$k" "$dir/warm-$k"; done
	keys="h s17 seq rnd wh ws17 wseq"
	for i in $(seq 1 "$rounds"); do
		progress "round $i of $rounds"
		for k in $keys; do run "$k" "$dir/$i-$k"; done
		keys="${keys#* } ${keys%% *}"
	done
	for k in s17 seq rnd; do
		eval "u=\$${k}_db"
		eval "created_$k=$(for f in "$dir"/*-"$k" "$dir"/*-w"$k"; do [ -f "$f.sum" ] && awk '{print $2}' "$f.sum"; done | awk '{s += $1} END {print s}')"
	done
	stop_apps() { for p in $pids; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; pids=''; }
	stop_apps
	for k in s17 seq rnd; do
		eval "u=\$${k}_db"
		eval "stored_$k=$(($(psql "$u" -Atc 'SELECT count(*) FROM links') - links))"
	done
	{
		header "creates with the rate limit on: step 17, and this tree with CODES=sequence and CODES=random, against /healthz" speed
		echo "# load:      hey -z ${dur}s -c $conc; creates: -m POST -T application/json -d '$body'; one warm-up run of each first;"
		echo "#            the order turns each round (h s17 seq rnd, then s17 seq rnd h, ...)"
		echo "# apps:      each on a database of its own seeded with $links links (benchmarks/zipf -seed-copy); one Redis, a key prefix each;"
		echo "#            CREATE_RATE=1000000 CREATE_BURST=1000000 (every create counted in Redis, none refused); s17 = commit $c17 (Step 17),"
		echo "#            seq and rnd = this tree, CODES=sequence and CODES=random; h = /healthz of seq"
		echo "# cpu:       µs per 200/201 of the app (/proc/PID/stat), all postgres processes, the Redis, and hey (GNU time)"
		echo "# wrk:       wh, ws17, wseq: the same with wrk -t2 -c$conc -d${dur}s (creates: -s benchmarks/create.lua, the same body), in the same rounds;"
		echo "#            wrk costs a fraction of hey's CPU per request, so its ratios are nearer what the server alone allows"
		echo "# durable:   201s hey and wrk counted over all runs, and links each database gained (>= 201s must hold): s17 $created_s17 / $stored_s17,"
		echo "#            seq $created_seq / $stored_seq, rnd $created_rnd / $stored_rnd"
		echo "# other:     responses that were not 200/201, hey errors or wrk socket errors, all runs: $(cat "$dir"/*.sum | awk '{n += $3} END {print n + 0}')"
		echo "#"
		echo "# round healthz s17 seq rnd  s17/h seq/h rnd/h seq/s17 rnd/seq  app_h app_s17 app_seq app_rnd  pg_s17 pg_seq pg_rnd  redis_s17 redis_seq redis_rnd  hey_h hey_seq  p99_s17 p99_seq p99_rnd  (target: seq/h >= 0.45)"
		for i in $(seq 1 "$rounds"); do
			read -r h _ _ ha _ _ hh _ _ <"$dir/$i-h.sum"
			read -r a _ _ aa ap ar _ _ a99 <"$dir/$i-s17.sum"
			read -r s _ _ sa sp sr sh _ s99 <"$dir/$i-seq.sum"
			read -r r _ _ ra rp rr _ _ r99 <"$dir/$i-rnd.sum"
			awk -v i="$i" -v h="$h" -v a="$a" -v s="$s" -v r="$r" \
				'BEGIN {printf "%d %d %d %d %d %.3f %.3f %.3f %.3f %.3f", i, h, a, s, r, a / h, s / h, r / h, s / a, r / s}'
			echo " $ha $aa $sa $ra $ap $sp $rp $ar $sr $rr $hh $sh $a99 $s99 $r99"
		done | medians | sed 's/^/# /'
		echo "#"
		echo "# with wrk: round healthz s17 seq  s17/h seq/h seq/s17  app_h app_s17 app_seq  pg_s17 pg_seq  wrk_h wrk_seq  p99_s17 p99_seq"
		for i in $(seq 1 "$rounds"); do
			read -r h _ _ ha _ _ hh _ _ <"$dir/$i-wh.sum"
			read -r a _ _ aa ap _ _ _ a99 <"$dir/$i-ws17.sum"
			read -r s _ _ sa sp _ sh _ s99 <"$dir/$i-wseq.sum"
			awk -v i="$i" -v h="$h" -v a="$a" -v s="$s" 'BEGIN {printf "%d %d %d %d %.3f %.3f %.3f", i, h, a, s, a / h, s / h, s / a}'
			echo " $ha $aa $sa $ap $sp $hh $sh $a99 $s99"
		done | medians | sed 's/^/# /'
		for i in $(seq 1 "$rounds"); do for k in h s17 seq rnd wh ws17 wseq; do
			printf '\n===== round %s, %s =====\n' "$i" "$k"; cat "$dir/$i-$k"
		done; done
	} >"$out/18-creates.txt"
	redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
	redis_port=''
fi

# ---- import

if want import; then
	dir="$tmp/import"
	mkdir -p "$dir"
	irounds=$rounds
	[ "$irounds" -gt 3 ] && irounds=3
	# ROWS URLs, each its own, of the lengths links have (42 to 60 bytes).
	awk -v n="$rows" 'BEGIN {for (i = 1; i <= n; i++) printf "https://www.example.com/articles/%d/a-title-of-some-words?utm_source=x%d\n", i, i % 997}' >"$dir/urls.txt"
	for i in $(seq 1 "$irounds"); do
		newdb "${db}_i$i"
		ui=$newurl
		newdb "${db}_c$i"
		uc=$newurl
		PGOPTIONS='-c client_min_messages=warning' psql "$ui" -q -v ON_ERROR_STOP=1 -f sql/schema.sql >/dev/null
		PGOPTIONS='-c client_min_messages=warning' psql "$uc" -q -v ON_ERROR_STOP=1 -f sql/schema.sql >/dev/null
		p0=$(ticks_named postgres) t0=$(date +%s%N)
		DATABASE_URL="$ui" /usr/bin/time -f '%U %S' -o "$dir/$i-import.cpu" "$tmp/app" import "$dir/urls.txt" >"$dir/$i-import.tsv" 2>"$dir/$i-import.log"
		t1=$(date +%s%N) p1=$(ticks_named postgres)
		n=$(psql "$ui" -Atc 'SELECT count(*) FROM links')
		printed=$(wc -l <"$dir/$i-import.tsv")
		psql "$ui" -qc "\\copy (SELECT code, url, token_hash FROM links) TO '$dir/rows.copy'"
		q0=$(ticks_named postgres) s0=$(date +%s%N)
		/usr/bin/time -f '%U %S' -o "$dir/$i-copy.cpu" psql "$uc" -qc "\\copy links (code, url, token_hash) FROM '$dir/rows.copy'" >"$dir/$i-copy.log" 2>&1
		s1=$(date +%s%N) q1=$(ticks_named postgres)
		m=$(psql "$uc" -Atc 'SELECT count(*) FROM links')
		awk -v i="$i" -v n="$n" -v pr="$printed" -v m="$m" -v ti=$((t1 - t0)) -v tc=$((s1 - s0)) -v pi=$((p1 - p0)) -v pc=$((q1 - q0)) -v hz="$hz" \
			-v ai="$(awk '{print $1 + $2}' "$dir/$i-import.cpu")" -v ac="$(awk '{print $1 + $2}' "$dir/$i-copy.cpu")" \
			'BEGIN {printf "%d %d %d %d %.3f %.3f %.0f %.0f %.3f %.2f %.2f %.2f %.2f\n", i, n, pr, m, ti / 1e9, tc / 1e9, n / (ti / 1e9), m / (tc / 1e9), (n / (ti / 1e9)) / (m / (tc / 1e9)), ai * 1e6 / n, pi * 1e6 / hz / n, ac * 1e6 / m, pc * 1e6 / hz / m}' >"$dir/$i.sum"
		psql "$admin" -qc "DROP DATABASE ${db}_i$i" -qc "DROP DATABASE ${db}_c$i" >/dev/null
		dbs=$(echo "$dbs" | sed "s/ ${db}_i$i//; s/ ${db}_c$i//")
	done
	{
		header "bulk import: shortener import of $rows URLs, against Postgres's own COPY of the same rows" import
		echo "# import:    DATABASE_URL=<a new database> shortener import urls.txt > codes.tsv (CODES=sequence, the default): every line checked,"
		echo "#            then chunks (import.go's importChunk, 5,000), each COPY straight into links and a commit"
		echo "# copy:      psql \\copy links (code, url, token_hash) FROM rows.copy: the rows the import stored (read back with \\copy ... TO),"
		echo "#            into another new database with the same schema (sql/schema.sql: its indexes on code, id and created_at)"
		echo "# file:      $rows lines like $(head -n 1 "$dir/urls.txt") ($(wc -c <"$dir/urls.txt") bytes)"
		echo "# cpu:       µs per row: the importer or psql (GNU time), all postgres processes (/proc)"
		echo "# $irounds rounds, each on two new databases, dropped after"
		echo "#"
		echo "# round imported printed copied import_s copy_s import_rows/s copy_rows/s import/copy  importer_us pg_import_us  psql_us pg_copy_us"
		for i in $(seq 1 "$irounds"); do cat "$dir/$i.sum"; done | medians | sed 's/^/# /'
		for i in $(seq 1 "$irounds"); do
			printf '\n===== round %s: the importer'"'"'s standard error =====\n' "$i"; cat "$dir/$i-import.log"
			printf '===== round %s: the first 3 lines it printed =====\n' "$i"; head -n 3 "$dir/$i-import.tsv" | cut -f1,3
			printf '===== round %s: psql =====\n' "$i"; cat "$dir/$i-copy.log"
		done
	} >"$out/18-import.txt"
fi
# The result on the terminal too: each output's column names, medians and
# ranges (with -q and no -o the files go with tmp).
for f in "$out"/18-*.txt; do
	[ -f "$f" ] || continue
	echo "== ${f##*/}"
	grep -E '^# (round|median|min-max)' "$f" || true
done
outputs_note
