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
for f in $(ls *.go go.mod go.sum sql/*.sql web/* 2>/dev/null | grep -v '_test\.go$' | LC_ALL=C sort); do
	printf '%s %s\n' "$(git hash-object "$f")" "$f"
done | git hash-object --stdin | cut -c1-12
