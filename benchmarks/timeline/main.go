// Command timeline reads vegeta's results as JSON lines (vegeta encode
// --to json) and prints them second by second: how many requests began in
// each second, how many got the status that means success, how many did
// not, and their latencies. A failure experiment reads its story off it:
// when the errors began, when they ended, how slow the survivors were.
//
//	vegeta encode --to json < creates.bin | go run ./benchmarks/timeline -ok 201 -t0 1764643200.25 -mark 1764643210.5 -codes acked.txt
//
// -t0 is second 0 (default: the first request); -mark is the moment the
// experiment did its harm, shown as the line it fell in; -codes writes the
// "code" of every successful response's JSON body, one per line: the
// links the service acknowledged, to look for afterwards.
//
// After the totals, each failed answer (the first 20) is listed on a line
// of its own: when it was sent, its status, how long it took, its
// X-Request-Id (nginx's, which the app's log lines carry too) and the start
// of its body, which says who answered it: the app's 503s say "server
// busy" (MAX_IN_FLIGHT) or "temporarily unavailable" (a deadline, or
// Postgres out of reach), nginx's own say "service unavailable" or "bad
// gateway" (since step 42: step 41's CI could not tell which it was).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is the part of vegeta's JSON encoding read here.
type result struct {
	Code      int         `json:"code"`
	Timestamp time.Time   `json:"timestamp"`
	Latency   int64       `json:"latency"` // nanoseconds
	Error     string      `json:"error"`
	Body      []byte      `json:"body"` // base64 in the JSON
	Headers   http.Header `json:"headers"`
}

// maxListed is how many failed answers are listed one by one.
const maxListed = 20

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	okCodes := fs.String("ok", "200", "the status codes that count as success, comma-separated")
	t0s := fs.String("t0", "", "second 0, as Unix seconds (default: the first request)")
	marks := fs.String("mark", "", "the moment of the harm, as Unix seconds")
	codesPath := fs.String("codes", "", "write the code of each successful response's body here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ok := map[int]bool{}
	for _, s := range strings.Split(*okCodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-ok %q: %w", *okCodes, err)
		}
		ok[n] = true
	}
	var rs []result
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("line %d: %w", len(rs)+1, err)
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(rs) == 0 {
		return errors.New("no results")
	}
	slices.SortFunc(rs, func(a, b result) int { return a.Timestamp.Compare(b.Timestamp) })
	t0 := rs[0].Timestamp
	if *t0s != "" {
		t, err := unixTime(*t0s)
		if err != nil {
			return fmt.Errorf("-t0: %w", err)
		}
		t0 = t
	}
	mark := -1
	if *marks != "" {
		t, err := unixTime(*marks)
		if err != nil {
			return fmt.Errorf("-mark: %w", err)
		}
		mark = int(t.Sub(t0) / time.Second)
	}
	var codes []string
	type second struct {
		sent, good int
		lat        []time.Duration
		why        map[string]int
	}
	var secs []second
	var firstBad, lastBad *result
	var bad []*result
	good := 0
	for i := range rs {
		r := &rs[i]
		s := int(r.Timestamp.Sub(t0) / time.Second)
		if s < 0 {
			s = 0
		}
		for len(secs) <= s {
			secs = append(secs, second{why: map[string]int{}})
		}
		sec := &secs[s]
		sec.sent++
		sec.lat = append(sec.lat, time.Duration(r.Latency))
		if ok[r.Code] && r.Error == "" {
			sec.good++
			good++
			if *codesPath != "" {
				var b struct {
					Code string `json:"code"`
				}
				if err := json.Unmarshal(r.Body, &b); err != nil || b.Code == "" {
					return fmt.Errorf("a %d at %s has no code in its body (%v): %q", r.Code, r.Timestamp.Format(time.RFC3339Nano), err, r.Body)
				}
				codes = append(codes, b.Code)
			}
			continue
		}
		if firstBad == nil {
			firstBad = r
		}
		lastBad = r
		bad = append(bad, r)
		why := strconv.Itoa(r.Code)
		if r.Error != "" {
			why += " " + shorten(r.Error)
		}
		sec.why[why]++
	}
	fmt.Fprintf(out, "%6s %6s %6s %6s %9s %9s  %s\n", "second", "sent", "ok", "failed", "p50_ms", "max_ms", "failures")
	for i, s := range secs {
		slices.Sort(s.lat)
		p50, top := 0.0, 0.0
		if len(s.lat) > 0 {
			p50 = ms(s.lat[len(s.lat)/2])
			top = ms(s.lat[len(s.lat)-1])
		}
		var why []string
		for k, n := range s.why {
			why = append(why, fmt.Sprintf("%d×%s", n, k))
		}
		slices.Sort(why)
		note := strings.Join(why, "; ")
		if i == mark {
			note = "<-- harm done here" + map[bool]string{true: "; ", false: ""}[note != ""] + note
		}
		fmt.Fprintf(out, "%6d %6d %6d %6d %9.1f %9.1f  %s\n", i, s.sent, s.good, s.sent-s.good, p50, top, note)
	}
	fmt.Fprintf(out, "total: %d sent, %d ok, %d failed\n", len(rs), good, len(rs)-good)
	if firstBad != nil {
		end := lastBad.Timestamp.Add(time.Duration(lastBad.Latency))
		fmt.Fprintf(out, "failures: from %.1f s to %.1f s (%.1f s, first request sent to last failure's answer)\n",
			firstBad.Timestamp.Sub(t0).Seconds(), end.Sub(t0).Seconds(), end.Sub(firstBad.Timestamp).Seconds())
		fmt.Fprintf(out, "failed answers (%d of %d): second, status, latency, X-Request-Id, body or error\n", min(len(bad), maxListed), len(bad))
		for _, r := range bad[:min(len(bad), maxListed)] {
			// vegeta sets Error to the status line for any status past
			// 399; the body says more, and Error is all there is when no
			// answer came.
			what := strings.TrimSpace(string(r.Body))
			if what == "" {
				what = r.Error
			}
			if len(what) > 100 {
				what = what[:100]
			}
			id := r.Headers.Get("X-Request-Id")
			if id == "" {
				id = "-"
			}
			fmt.Fprintf(out, "  %7.2f  %3d  %8.1f ms  %s  %s\n", r.Timestamp.Sub(t0).Seconds(), r.Code, ms(time.Duration(r.Latency)), id, what)
		}
	} else {
		fmt.Fprintln(out, "failures: none")
	}
	if *codesPath != "" {
		if err := os.WriteFile(*codesPath, []byte(strings.Join(codes, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// unixTime reads Unix seconds with a fraction, as date +%s.%N prints them.
func unixTime(s string) (time.Time, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(f*1e9)), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// shorten keeps an error's gist: vegeta's errors repeat the URL.
func shorten(e string) string {
	if i := strings.LastIndex(e, ": "); i >= 0 {
		e = e[i+2:]
	}
	if len(e) > 40 {
		e = e[:40]
	}
	return e
}
