#!/bin/sh
# codeid.sh [DIR]: print a short hash of the program's source files in DIR
# (default: the repository root): what goes into the binary, every *.go file
# but the tests, go.mod, go.sum, sql/*.sql and the page's files, web/*
# (embedded since step 19; before it, there are none).
# bench.sh writes it into each output's header, so that an output can be
# matched to the code it measured even though the commit that holds the
# output is not the one that was measured.
set -eu
cd "${1:-$(git rev-parse --show-toplevel)}"
# POSIX sh has no pipefail: each step that can fail is checked on its own.
# (ls finds no web/ before step 19, and says so on the standard error.)
files=$(ls *.go go.mod go.sum sql/*.sql web/* 2>/dev/null | grep -v '_test\.go$' | LC_ALL=C sort)
[ -n "$files" ] || { echo "codeid.sh: no source files in $(pwd)" >&2; exit 1; }
list=$(for f in $files; do
	h=$(git hash-object "$f") || exit 1
	printf '%s %s\n' "$h" "$f"
done) || { echo "codeid.sh: git hash-object failed in $(pwd)" >&2; exit 1; }
id=$(printf '%s\n' "$list" | git hash-object --stdin)
printf '%.12s\n' "$id"
