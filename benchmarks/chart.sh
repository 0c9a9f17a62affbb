#!/usr/bin/env bash
# chart.sh: draw the steps table that table.sh wrote as an SVG chart, in
# two panels that share the steps axis and nothing else: above, the
# redirect's and the create's ratio to /healthz of the same step (dots
# joined by lines, a dashed line at 1); below, their throughput (bars,
# requests a second, each labelled with its median). Whiskers show the
# spread: the min–max of the runs for a bar, and for a ratio the redirect's
# (or create's) min over /healthz's max to its max over /healthz's min.
# bash and awk; no plotting library.
#
#   benchmarks/chart.sh [-a 'NN-MM:note']... TABLE.md > chart.svg
#
# TABLE.md is table.sh's output (its "Runs:" line and the rows "| NN | title |
# `GET /{code}` | median | min–max | ratio | p99 |"); a step without a redirect
# or create row is drawn without that bar. -a shades steps NN to MM in both
# panels and writes the note above them (say, two steps that are the same
# program measured twice); two -a fit, each note on a line of its own.
set -euo pipefail
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
notes=''
while getopts a: opt; do
	case $opt in
	a)
		printf '%s\n' "$OPTARG" | grep -Eq '^[0-9][0-9]-[0-9][0-9]:.' || usage
		notes="$notes$OPTARG
"
		;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] && [ -f "$1" ] || usage
src=$1
awk -F'|' -v src="$(basename "$src")" -v notes="$notes" '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
# lo and hi of a "min–max" cell (an en dash, or a hyphen)
function spread(s, which,   parts) {
	s = trim(s); gsub(/–/, "-", s)
	if (split(s, parts, "-") != 2) return -1
	return (which == "lo" ? parts[1] : parts[2]) + 0
}
# a number as a reader would write it: whole above 100, else one decimal
function fmt(v) { return v >= 100 ? sprintf("%d", int(v + 0.5)) : sprintf("%.1f", v) }
function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); return s }
# a round step for about five ticks up to v: 1, 2 or 5 times a power of ten
function nicestep(v,   raw, mag) {
	raw = v / 5; mag = 1
	while (mag * 10 <= raw) mag *= 10
	while (mag > raw) mag /= 10
	if (raw <= mag) return mag
	if (raw <= 2 * mag) return 2 * mag
	if (raw <= 5 * mag) return 5 * mag
	return 10 * mag
}
/^Runs:/ { runs = trim(substr($0, 6)); sub(/\.$/, "", runs) }
/^\| [0-9][0-9] \|/ {
	step = trim($2); ep = trim($4); rps = trim($5) + 0; lo = spread($6, "lo"); hi = spread($6, "hi"); ratio = trim($7)
	if (!(step in seen)) { seen[step] = 1; order[++n] = step; idx[step] = n }
	if (ep ~ /healthz/) { h[step] = rps; hlo[step] = lo; hhi[step] = hi }
	else if (ep ~ /code/) { v["r", step] = rps; vlo["r", step] = lo; vhi["r", step] = hi; ra["r", step] = ratio }
	else if (ep ~ /shorten/) { v["c", step] = rps; vlo["c", step] = lo; vhi["c", step] = hi; ra["c", step] = ratio }
}
END {
	if (n == 0) { print "chart.sh: no step rows in " src > "/dev/stderr"; exit 1 }
	W = 960; H = 680; L = 80; R = 40
	T1 = 96; P1 = 190     # ratio panel: top, height
	T2 = 340; P2 = 250    # throughput panel
	pw = W - L - R; gw = pw / n; bw = gw * 0.32
	kinds[1] = "r"; kinds[2] = "c"; name["r"] = "redirect"; name["c"] = "create"
	bar["r"] = "#4e79a7"; bar["c"] = "#f28e2b"; dot["r"] = "#1f3b5c"; dot["c"] = "#a3520c"
	# ratio whiskers: the extremes the runs allow
	rmax = 1; top = 0
	for (i = 1; i <= n; i++) for (k = 1; k <= 2; k++) {
		s = order[i]; e = kinds[k]
		if (!((e, s) in v)) continue
		if (vhi[e, s] > top) top = vhi[e, s]
		if (v[e, s] > top) top = v[e, s]
		rl[e, s] = rh[e, s] = ra[e, s] + 0
		if ((s in h) && hlo[s] > 0 && hhi[s] > 0 && vlo[e, s] >= 0) {
			rl[e, s] = vlo[e, s] / hhi[s]; rh[e, s] = vhi[e, s] / hlo[s]
		}
		if (rh[e, s] > rmax) rmax = rh[e, s]
	}
	rstep = 0.25; rtop = 0; while (rtop < rmax) rtop += rstep
	vstep = nicestep(top); vtop = 0; while (vtop < top) vtop += vstep
	printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H
	printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
	printf "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Each step measured from its own commit, one step after another in one sitting</text>\n", L
	printf "<text x=\"%d\" y=\"42\" fill=\"#555\">%s (hey, medians; whiskers: min to max of the runs)</text>\n", L, esc(runs == "" ? "runs not stated in the table" : runs)
	printf "<text x=\"%d\" y=\"58\" fill=\"#555\">from %s, drawn by benchmarks/chart.sh; each step'"'"'s own doc has its own sitting'"'"'s figures, which differ</text>\n", L, esc(src)
	# shaded notes, behind everything else
	# each note on a line of its own, the last one lowest, so that
	# two notes side by side do not write over each other (two fit above the
	# panel)
	m = split(notes, nl, "\n"); cnt = 0; k = 0
	for (j = 1; j <= m; j++) if (nl[j] != "") cnt++
	if (cnt > 2) { print "chart.sh: at most two -a notes fit above the chart" > "/dev/stderr"; exit 1 }
	for (j = 1; j <= m; j++) {
		if (nl[j] == "") continue
		k++
		a = substr(nl[j], 1, 2); b = substr(nl[j], 4, 2); text = substr(nl[j], 7)
		if (!(a in idx) || !(b in idx)) { print "chart.sh: -a " nl[j] ": no such step in " src > "/dev/stderr"; exit 1 }
		x0 = L + gw * (idx[a] - 1); x1 = L + gw * idx[b]
		printf "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#eee\"/>\n", x0, T1 - 8, x1 - x0, T2 + P2 - T1 + 8
		printf "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#333\">%s</text>\n", x0 + 4, T1 - 12 - 13 * (cnt - k), esc(text)
	}
	# ratio panel
	for (y = 0; y <= rtop + 1e-9; y += rstep) {
		py = T1 + P1 - P1 * y / rtop
		printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, py, L + pw, py
		printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n", L - 6, py + 4, y
	}
	py = T1 + P1 - P1 / rtop
	printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"5,4\"/>\n", L, py, L + pw, py
	printf "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">ratio to /healthz (dashed: 1)</text>\n", T1 + P1 / 2
	for (k = 1; k <= 2; k++) {
		e = kinds[k]; prev = ""; off = (k == 1 ? -0.12 : 0.12)
		for (i = 1; i <= n; i++) {
			s = order[i]
			if (!((e, s) in v)) continue
			x = L + gw * (i - 0.5 + off); y = T1 + P1 - P1 * ra[e, s] / rtop
			if (prev != "") printf "<line x1=\"%s\" y1=\"%s\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", px, py, x, y, dot[e]
			printf "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x, T1 + P1 - P1 * rl[e, s] / rtop, x, T1 + P1 - P1 * rh[e, s] / rtop, dot[e]
			printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>step %s %s: %s of /healthz (runs allow %.3g to %.3g)</title></circle>\n", x, y, dot[e], s, name[e], ra[e, s], rl[e, s], rh[e, s]
			px = sprintf("%.1f", x); py = sprintf("%.1f", y); prev = 1
		}
	}
	# throughput panel
	for (y = 0; y <= vtop + 1e-9; y += vstep) {
		py = T2 + P2 - P2 * y / vtop
		printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, py, L + pw, py
		printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 6, py + 4, vstep >= 1 ? sprintf("%d", y) : sprintf("%g", y)
	}
	printf "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">requests per second</text>\n", T2 + P2 / 2
	for (i = 1; i <= n; i++) {
		s = order[i]
		for (k = 1; k <= 2; k++) {
			e = kinds[k]
			if (!((e, s) in v)) continue
			x0 = L + gw * (i - 1) + gw * 0.16 + (k - 1) * bw; bh = P2 * v[e, s] / vtop; xc = x0 + bw / 2
			printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>step %s %s: %s req/s (runs %s to %s)</title></rect>\n", x0, T2 + P2 - bh, bw, bh, bar[e], s, name[e], v[e, s], vlo[e, s], vhi[e, s]
			if (vlo[e, s] >= 0)
				printf "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", xc, T2 + P2 - P2 * vlo[e, s] / vtop, xc, T2 + P2 - P2 * vhi[e, s] / vtop
			ly = T2 + P2 - P2 * (vhi[e, s] > v[e, s] ? vhi[e, s] : v[e, s]) / vtop - 4
			printf "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" font-size=\"10\" fill=\"#333\">%s</text>\n", xc + 3.5, ly, fmt(v[e, s])
		}
		printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", L + gw * (i - 0.5), T2 + P2 + 18, s
	}
	printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", L + pw / 2, T2 + P2 + 38
	ly = H - 22
	printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#4e79a7\"/><text x=\"%d\" y=\"%d\">redirect req/s</text>\n", L, ly - 10, L + 16, ly
	printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#f28e2b\"/><text x=\"%d\" y=\"%d\">create req/s</text>\n", L + 140, ly - 10, L + 156, ly
	printf "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#1f3b5c\"/><text x=\"%d\" y=\"%d\">redirect / healthz</text>\n", L + 276, ly - 4, L + 286, ly
	printf "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#a3520c\"/><text x=\"%d\" y=\"%d\">create / healthz</text>\n", L + 426, ly - 4, L + 436, ly
	print "</svg>"
}' "$src"
