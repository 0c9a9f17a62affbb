// Command statsgen writes the clicks of benchmarks/stats.sh's storage
// part: a vegeta target per click (HTTP format), each with an
// X-Forwarded-For, a User-Agent and a Referer drawn from pools, over the
// codes read from stdin (a stream of benchmarks/zipf), and prints the
// exact number of distinct visitors of each link that a browser followed,
// so that the sketches' estimates can be checked against it.
//
//	go run ./benchmarks/zipf -links 100000 -s 1.0 -n 100000 -seed 17 |
//	  go run ./benchmarks/statsgen -base http://127.0.0.1:8080 -targets targets >exact
//
// Every draw comes from -seed: the same flags write the same files.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
)

// The pools. Browsers are people; the rest are bots (the app's classify).
var (
	browsers = []string{
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
		"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
	}
	bots = []string{
		"facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
		"Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
		"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
		"curl/8.5.0",
	}
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "statsgen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("statsgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "", "the instance's `URL`, like http://127.0.0.1:8080")
	targets := fs.String("targets", "", "the `file` the vegeta targets go to")
	visitors := fs.Int("visitors", 50_000, "distinct addresses in the pool")
	botShare := fs.Float64("bots", 0.15, "share of clicks from bots")
	noRef := fs.Float64("no-referer", 0.4, "share of clicks without a Referer")
	hosts := fs.Int("hosts", 30, "distinct referrer hosts")
	seed := fs.Uint64("seed", 1, "seed of every draw")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *base == "" || !strings.HasPrefix(*base, "http"):
		return errors.New("-base wants the instance's URL")
	case *targets == "":
		return errors.New("-targets wants a file")
	case *visitors < 1 || *visitors > 1<<24 || *hosts < 1:
		return errors.New("-visitors wants 1 to 16,777,216 and -hosts at least 1")
	case *botShare < 0 || *botShare > 1 || *noRef < 0 || *noRef > 1:
		return errors.New("-bots and -no-referer want a share from 0 to 1")
	}
	f, err := os.Create(*targets)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	r := rand.New(rand.NewPCG(*seed, *seed^0x5eed))
	seen := make(map[string]map[int32]bool)
	in := bufio.NewScanner(stdin)
	n := 0
	for in.Scan() {
		code := strings.TrimSpace(in.Text())
		if code == "" {
			continue
		}
		n++
		v := int32(r.IntN(*visitors))
		agent := browsers[r.IntN(len(browsers))]
		person := r.Float64() >= *botShare
		if !person {
			agent = bots[r.IntN(len(bots))]
		}
		fmt.Fprintf(w, "GET %s/%s\nX-Forwarded-For: 10.%d.%d.%d\nUser-Agent: %s\n", *base, code, v>>16&255, v>>8&255, v&255, agent)
		if r.Float64() >= *noRef {
			// Skewed: the first hosts send most.
			h := int(float64(*hosts) * r.Float64() * r.Float64())
			fmt.Fprintf(w, "Referer: https://site%d.example.com/some/page?id=%d\n", h, r.IntN(1000))
		}
		fmt.Fprintln(w)
		if person {
			if seen[code] == nil {
				seen[code] = make(map[int32]bool)
			}
			seen[code][v] = true
		}
	}
	if err := in.Err(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("no codes on stdin")
	}
	codes := make([]string, 0, len(seen))
	for c := range seen {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	fmt.Fprintf(stdout, "# code distinct_visitors (people), %d clicks over %d links\n", n, len(codes))
	for _, c := range codes {
		fmt.Fprintf(stdout, "%s %d\n", c, len(seen[c]))
	}
	return nil
}
