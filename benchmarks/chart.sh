#!/bin/sh
# chart.sh: draw the steps table that table.sh wrote as an SVG chart: for
# each step, the redirect's and the create's throughput as bars (left
# scale, requests a second) and their ratio to /healthz of the same step as
# dots joined by lines (right scale). POSIX sh and awk; no plotting library.
#
#   benchmarks/chart.sh TABLE.md > chart.svg
#
# TABLE.md is table.sh's output (the rows "| NN | title | `GET /{code}` |
# median | spread | ratio | p99 |"); a step without a redirect or create row
# is drawn without that bar.
set -eu
[ $# -eq 1 ] && [ -f "$1" ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
src=$1
awk -F'|' -v src="$(basename "$src")" '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
/^\| [0-9][0-9] \|/ {
	step = trim($2); ep = trim($4); rps = trim($5) + 0; ratio = trim($7) + 0
	if (!(step in seen)) { seen[step] = 1; order[++n] = step }
	if (ep ~ /healthz/) h[step] = rps
	else if (ep ~ /code/) { r[step] = rps; rr[step] = ratio }
	else if (ep ~ /shorten/) { c[step] = rps; cr[step] = ratio }
}
END {
	if (n == 0) { print "chart.sh: no step rows in " src > "/dev/stderr"; exit 1 }
	W = 960; H = 520; L = 80; R = 80; T = 60; B = 80
	pw = W - L - R; ph = H - T - B
	max = 0
	for (i = 1; i <= n; i++) { s = order[i]; if (r[s] > max) max = r[s]; if (c[s] > max) max = c[s] }
	# a round top for the left scale
	step10 = 1; while (step10 * 10 <= max) step10 *= 10
	top = step10; while (top < max) top += step10 / 2
	rmax = 0
	for (i = 1; i <= n; i++) { s = order[i]; if (rr[s] > rmax) rmax = rr[s]; if (cr[s] > rmax) rmax = cr[s] }
	rtop = 0.25; while (rtop < rmax) rtop += 0.25
	gw = pw / n; bw = gw * 0.32
	printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H
	printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
	printf "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Throughput by step, and ratio to /healthz of the same step</text>\n", L
	printf "<text x=\"%d\" y=\"42\" fill=\"#555\">median req/s of hey runs at concurrency 50, one sitting (%s); made by benchmarks/chart.sh</text>\n", L, src
	for (k = 0; k <= 4; k++) {
		y = T + ph - ph * k / 4
		printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, L + pw, y
		printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", L - 6, y + 4, top * k / 4
		printf "<text x=\"%d\" y=\"%.1f\">%.2f</text>\n", L + pw + 6, y + 4, rtop * k / 4
	}
	printf "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">requests per second (bars)</text>\n", T + ph / 2
	printf "<text transform=\"translate(%d,%d) rotate(90)\" text-anchor=\"middle\">ratio to /healthz (dots)</text>\n", W - 14, T + ph / 2
	for (i = 1; i <= n; i++) {
		s = order[i]; x0 = L + gw * (i - 1) + gw * 0.16
		if (s in r) { bh = ph * r[s] / top; printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4e79a7\"><title>step %s redirect %d req/s</title></rect>\n", x0, T + ph - bh, bw, bh, s, r[s] }
		if (s in c) { bh = ph * c[s] / top; printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f28e2b\"><title>step %s create %d req/s</title></rect>\n", x0 + bw, T + ph - bh, bw, bh, s, c[s] }
		printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", L + gw * (i - 0.5), T + ph + 18, s
	}
	printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", L + pw / 2, T + ph + 38
	for (pass = 1; pass <= 2; pass++) {
		col = pass == 1 ? "#1f3b5c" : "#a3520c"; prev = ""
		for (i = 1; i <= n; i++) {
			s = order[i]; v = pass == 1 ? rr[s] : cr[s]
			if (pass == 1 && !(s in rr)) continue
			if (pass == 2 && !(s in cr)) continue
			x = L + gw * (i - 0.5); y = T + ph - ph * v / rtop
			if (prev != "") printf "<line x1=\"%s\" y1=\"%s\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", px, py, x, y, col
			printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>step %s %s %.3f of /healthz</title></circle>\n", x, y, col, s, pass == 1 ? "redirect" : "create", v
			px = sprintf("%.1f", x); py = sprintf("%.1f", y); prev = 1
		}
	}
	ly = H - 22
	printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#4e79a7\"/><text x=\"%d\" y=\"%d\">redirect req/s</text>\n", L, ly - 10, L + 16, ly
	printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#f28e2b\"/><text x=\"%d\" y=\"%d\">create req/s</text>\n", L + 140, ly - 10, L + 156, ly
	printf "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#1f3b5c\"/><text x=\"%d\" y=\"%d\">redirect / healthz</text>\n", L + 276, ly - 4, L + 286, ly
	printf "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#a3520c\"/><text x=\"%d\" y=\"%d\">create / healthz</text>\n", L + 426, ly - 4, L + 436, ly
	print "</svg>"
}' "$src"
