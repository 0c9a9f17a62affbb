#!/usr/bin/env bash
# readme.sh: the README's size and its step table's headlines at each
# commit given (step 41): bytes, step rows, and each headline's words
# counted as TestReadmeStaysShort counts them (links to outputs in a
# parenthesis, and the erratum link, left out; a link's text kept).
#
#   benchmarks/readme.sh [-o FILE] REV...
#
#   REV       a commit (anything git rev-parse takes), or WORK for the
#             working tree's README.md
#   -o FILE   where the output goes (default: standard output)
set -euo pipefail
out=''
while getopts o: opt; do
	case $opt in o) out=$OPTARG ;; *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
cd "$(git rev-parse --show-toplevel)"
readme() { if [ "$1" = WORK ]; then cat README.md; else git show "$1:README.md"; fi; }
{
	echo "# readme.sh $* ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
	echo "# bytes: wc -c; rows: lines '| NN | [title](docs/NN-...) | headline |'; words: the headline with"
	echo "#   ([..](..), [..](..)) and [Erratum](docs/errata.md), [†](docs/errata.md) or [†][e] removed and [text](url) read as text, split on spaces"
	for arg in "$@"; do
		rev=$arg
		if [ "$rev" = WORK ]; then
			name='the working tree'
		else
			rev=$(git rev-parse --verify "$rev")
			name="$(git rev-parse --short=12 "$rev") ($(git log -1 --format=%s "$rev"))"
		fi
		echo
		echo "== $arg: $name"
		bytes=$(readme "$rev" | wc -c)
		echo "bytes $bytes (room under the test's 12288: $((12288 - bytes)))"
		readme "$rev" | perl -ne '
			next unless /^\| (\d\d) \| \[[^\]]+\]\(docs\/\d\d-[^)]+\.md\) \| (.*) \|$/;
			my ($n, $h) = ($1, $2);
			$h =~ s/\s*\[(Erratum|†)\](\(docs\/errata\.md\)|\[e\])//g;
			$h =~ s/\s*\((\[[^\]]*\]\([^)\s]+\)(, )?)+\)//g;
			$h =~ s/\[([^\]]*)\]\([^)\s]+\)/$1/g;
			my @w = split " ", $h;
			push @rows, [$n, scalar @w];
			$rowbytes += length($_);
			END {
				my @long = grep { $_->[1] > 25 } @rows;
				my ($max) = sort { $b->[1] <=> $a->[1] } @rows;
				printf "bytes per step row, mean: %.0f\n", $rowbytes / @rows;
				printf "rows %d\nlongest headline: row %s, %d words\nover 25 words: %s\n", scalar @rows, $max->[0], $max->[1],
					@long ? join(", ", map { "row $_->[0] ($_->[1])" } @long) : "none";
			}'
	done
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
