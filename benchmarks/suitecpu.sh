#!/usr/bin/env bash
# suitecpu.sh: does a step's test suite compute or wait? Runs the README's
# test command (go test -race -count=1 ./...) at each step given, each from
# its own commit in a worktree, once to build (not timed), then timed: its
# wall time, the CPU of go test and everything it started (user + sys, from
# GNU time), and the CPU that Postgres and Redis spent meanwhile (from
# /proc, every process of those names). Step 23's CI runs three suites at
# once on this reading.
#
#   benchmarks/suitecpu.sh [-o FILE] [-s N] STEP...     e.g. benchmarks/suitecpu.sh 18 22
#
# -s N: also where Postgres's time went, from pg_stat_statements (the
# server must load it: shared_preload_libraries=pg_stat_statements; the
# extension is created in TEST_DATABASE_URL's database): per step, the
# statements run, the databases made, and the N statements that took the
# most execution time in all, with their calls. Reset before each suite.
#
# Uses TEST_DATABASE_URL and TEST_REDIS_URL (default: the system's
# Postgres and Redis on 5432 and 6379, as CI's slot 0). Run nothing else
# meanwhile: the other processes' CPU is not subtracted.
set -euo pipefail
. "$(dirname "$0")/lib.sh" # for ticks_named
unset NGINX_LIMIT_CONN # lib.sh raises it for load tests; the suites test the default
outf='' top=0
while getopts o:s: opt; do
	case $opt in o) outf=$OPTARG ;; s) top=$OPTARG ;; *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
case $top in '' | *[!0-9]*) echo "suitecpu.sh: -s takes a whole number" >&2; exit 2 ;; esac
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "suitecpu.sh: name the steps, e.g. 18 22" >&2; exit 2; }
export TEST_DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
export TEST_REDIS_URL=${TEST_REDIS_URL:-redis://127.0.0.1:6379/0}
export CI=true
psql "$TEST_DATABASE_URL" -Atc 'select 1' >/dev/null || { echo "suitecpu.sh: no Postgres at TEST_DATABASE_URL" >&2; exit 1; }
redis-cli -u "$TEST_REDIS_URL" ping >/dev/null || { echo "suitecpu.sh: no Redis at TEST_REDIS_URL" >&2; exit 1; }
if [ "$top" -gt 0 ]; then
	psql "$TEST_DATABASE_URL" -qc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null 2>&1 &&
		psql "$TEST_DATABASE_URL" -Atc 'select pg_stat_statements_reset()' >/dev/null 2>&1 ||
		{ echo "suitecpu.sh: -s needs pg_stat_statements loaded by the server at TEST_DATABASE_URL (shared_preload_libraries=pg_stat_statements)" >&2; exit 1; }
fi
repo=$(git rev-parse --show-toplevel)
cd "$repo"
tmp=$(mktemp -d)
trap 'for t in "$tmp"/wt*; do [ -d "$t" ] && git worktree remove --force "$t"; done; rm -rf "$tmp"' EXIT
hz=$(getconf CLK_TCK)
{
	echo "# suitecpu.sh $*: wall time and CPU of each step's test suite (go test -race -count=1 ./...)"
	echo "# commit:    $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD || echo ' (dirty tree)'), date $(date -u +%FT%TZ)"
	echo "# machine:   $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, Linux $(uname -r); $(go version | cut -d' ' -f3)"
	echo "# services:  Postgres $(psql "$TEST_DATABASE_URL" -Atc 'show server_version') (shared_preload_libraries '$(psql "$TEST_DATABASE_URL" -Atc 'show shared_preload_libraries')'), Redis $(redis-cli -u "$TEST_REDIS_URL" info server | tr -d '\r' | sed -n 's/^redis_version://p')"
	echo "# columns:   wall s; CPU s of go test and its children (user + sys); CPU s of all postgres and redis-server processes meanwhile; the sum over wall (1.0 = one core busy throughout; this machine has $(nproc))"
	printf '%-5s %8s %10s %10s %10s %8s\n' step wall_s go_cpu_s pg_cpu_s redis_cpu_s cores
	for nn in "$@"; do
		wt=$tmp/wt$nn
		git worktree add -q --detach "$wt" ":/^Step $nn:"
		(cd "$wt" && go test -race -count=1 -run '^$' ./... >/dev/null) # the build, not timed
		[ "$top" -eq 0 ] || psql "$TEST_DATABASE_URL" -Atc 'select pg_stat_statements_reset()' >/dev/null
		pg0=$(ticks_named postgres) r0=$(ticks_named redis-server)
		t0=$(date +%s.%N)
		(cd "$wt" && /usr/bin/time -f '%U %S' -o "$tmp/cpu$nn" go test -race -count=1 ./... >"$tmp/out$nn" 2>&1) || { tail -n 30 "$tmp/out$nn" >&2; echo "suitecpu.sh: step $nn's suite failed" >&2; exit 1; }
		t1=$(date +%s.%N)
		pg1=$(ticks_named postgres) r1=$(ticks_named redis-server)
		awk -v n="$nn" -v w="$(echo "$t1 - $t0" | bc)" -v g="$(awk '{print $1 + $2}' "$tmp/cpu$nn")" \
			-v p="$(((pg1 - pg0)))" -v r="$((r1 - r0))" -v hz="$hz" \
			'BEGIN { printf "%-5s %8.1f %10.1f %10.1f %10.1f %8.2f\n", n, w, g, p / hz, r / hz, (g + p / hz + r / hz) / w }'
		[ "$top" -gt 0 ] || continue
		# pg_stat_statements keeps a statement's figures after its
		# database is dropped; the top N, by execution time in all.
		psql "$TEST_DATABASE_URL" -At -F ' | ' -c "
			select 'step $nn: ' || sum(calls) || ' statements, ' || round(sum(total_exec_time)::numeric / 1000, 1) || ' s of execution in all; databases made: '
				|| coalesce(sum(calls) filter (where query ilike 'create database%'), 0)
				|| ' (' || round(coalesce(sum(total_exec_time) filter (where query ilike 'create database%'), 0)::numeric / 1000, 1) || ' s), dropped: '
				|| coalesce(sum(calls) filter (where query ilike 'drop database%'), 0)
				|| ' (' || round(coalesce(sum(total_exec_time) filter (where query ilike 'drop database%'), 0)::numeric / 1000, 1) || ' s)'
			from pg_stat_statements"
		echo "total_s | calls | ms_per_call | statement (first 110 characters, spaces squeezed)"
		psql "$TEST_DATABASE_URL" -At -F ' | ' -c "
			select round((sum(total_exec_time) / 1000)::numeric, 2), sum(calls), round((sum(total_exec_time) / sum(calls))::numeric, 2),
				left(regexp_replace(query, '\s+', ' ', 'g'), 110)
			from pg_stat_statements group by 4 order by 1 desc limit $top"
	done
} | tee "${outf:-/dev/null}"
