#!/usr/bin/env bash
# moves.sh: what a commit that says it only moves code changed, line by
# line (step 41). For the program's Go files (*.go at the top, tests left
# out) at A and at B: each file's length at both, and then every line of
# code that is in one and not the other, counted as a multiset (a line
# moved to another file is in both; one added or removed is not). Blank
# lines and import lines are left out: a moved function takes its imports
# with it, and gofmt groups them. What this prints as "only in B" is the
# whole of what the move added; an empty list would mean nothing but moves.
#
#   benchmarks/moves.sh [-o FILE] A B
#
#   A, B      two commits (anything git rev-parse takes); B may be WORK
#             for the working tree
#   -o FILE   where the output goes (default: standard output)
set -euo pipefail
out=''
while getopts o: opt; do
	case $opt in o) out=$OPTARG ;; *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
repo=$(git rev-parse --show-toplevel)
cd "$repo"
a=$(git rev-parse --short=12 "$(git rev-parse --verify "$1")")
if [ "$2" = WORK ]; then b=WORK; else b=$(git rev-parse --short=12 "$(git rev-parse --verify "$2")"); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# tree REV DIR: REV's files in DIR (WORK: the working tree's, tracked or
# not ignored), and the program's Go files copied to DIR.go.
tree() {
	mkdir -p "$2" "$2.go"
	if [ "$1" = WORK ]; then
		git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
			[ -f "$f" ] || continue
			mkdir -p "$2/$(dirname "$f")" && cp "$f" "$2/$f"
		done
	else
		git archive "$1" | tar -x -C "$2"
	fi
	for f in "$2"/*.go; do
		case $f in *_test.go) ;; *) cp "$f" "$2.go/" ;; esac
	done
}
tree "$a" "$work/ta"
tree "$b" "$work/tb"
mv "$work/ta.go" "$work/a"
mv "$work/tb.go" "$work/b"
# code DIR: every line of code in DIR's files, trimmed, sorted.
code() {
	cat "$1"/*.go | awk '
		/^import \(/ { imp = 1; next }
		imp && /^\)/ { imp = 0; next }
		imp || /^import "/ || /^package / { next }
		{ sub(/^[ \t]+/, ""); sub(/[ \t]+$/, ""); if ($0 != "") print }' | LC_ALL=C sort
}
{
	echo "# moves.sh $1 $2 ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
	echo "# A: $a ($(git log -1 --format=%s "$a")), code id $("$repo/benchmarks/codeid.sh" "$work/ta")"
	if [ "$b" = WORK ]; then
		echo "# B: the working tree, code id $("$repo/benchmarks/codeid.sh" "$work/tb")"
	else
		echo "# B: $b ($(git log -1 --format=%s "$b")), code id $("$repo/benchmarks/codeid.sh" "$work/tb")"
	fi
	echo "# the program's *.go files (no tests); lines counted with wc -l; code lines compared as multisets, blank and import lines left out"
	echo
	echo "file lines_A lines_B"
	(cd "$work" && ls a b | grep '\.go$' | sort -u) | while read -r f; do
		la=-; lb=-
		[ -f "$work/a/$f" ] && la=$(wc -l <"$work/a/$f")
		[ -f "$work/b/$f" ] && lb=$(wc -l <"$work/b/$f")
		[ "$la" = "$lb" ] || echo "$f $la $lb"
	done
	echo "(files whose length did not change are left out)"
	echo "all $(cat "$work"/a/*.go | wc -l) $(cat "$work"/b/*.go | wc -l)"
	echo "longest: A $(cd "$work/a" && wc -l ./*.go | grep -v ' total$' | sort -n | tail -n 1 | awk '{print $2, $1}' | sed 's|^\./||'), B $(cd "$work/b" && wc -l ./*.go | grep -v ' total$' | sort -n | tail -n 1 | awk '{print $2, $1}' | sed 's|^\./||')"
	echo "over 600 lines: A $(cd "$work/a" && wc -l ./*.go | grep -v ' total$' | awk '$1 > 600' | wc -l), B $(cd "$work/b" && wc -l ./*.go | grep -v ' total$' | awk '$1 > 600' | wc -l)"
	code "$work/a" >"$work/a.code"
	code "$work/b" >"$work/b.code"
	echo
	echo "code lines: A $(wc -l <"$work/a.code"), B $(wc -l <"$work/b.code")"
	echo "only in A (removed): $(comm -23 "$work/a.code" "$work/b.code" | wc -l)"
	comm -23 "$work/a.code" "$work/b.code" | sed 's/^/  - /'
	echo "only in B (added): $(comm -13 "$work/a.code" "$work/b.code" | wc -l)"
	comm -13 "$work/a.code" "$work/b.code" | sed 's/^/  + /'
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
