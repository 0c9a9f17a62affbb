// Command propagate measures how long an edit made on one instance takes to
// be seen by every instance. Given the instances' base URLs and a link with
// its token, it edits the link -n times, -every apart, each time through
// the next instance in turn (PATCH /api/links/{code} with a new URL), and
// from the moment the PATCH's 200 arrives asks every instance for the code
// every -poll (HEAD, or GET with redirects not followed) until each
// answers with the new Location. It prints how it was run, a line per
// edit with each instance's delay, then p50, p90, p99 and the greatest
// delay per instance and over all, and how many never converged within
// -timeout. With -delete it then deletes the link through the next
// instance and measures the time until every instance answers 410.
//
//	go run ./benchmarks/propagate -instances http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083 -n 50 -every 500ms
//
// Without -code it creates a link first (through the first instance). The
// token is read from -token or, better, PROPAGATE_TOKEN (a flag shows in
// the process list), and is never printed. Edits count against the
// instances' CREATE_RATE: keep -every at or above 1/CREATE_RATE, or run
// them with CREATE_RATE=0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "propagate:", err)
		}
		os.Exit(2)
	}
}

// probe is one run's settings.
type probe struct {
	instances []string
	code      string
	token     string
	n         int
	every     time.Duration
	poll      time.Duration
	timeout   time.Duration
	method    string
	urlPrefix string
	delete    bool
	client    *http.Client
	now       func() time.Time
}

// never is the delay of an instance that did not converge within -timeout.
const never = time.Duration(-1)

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("propagate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	instances := fs.String("instances", "", "comma-separated base `URLs` of the instances, e.g. http://127.0.0.1:8081,http://127.0.0.1:8082")
	code := fs.String("code", "", "the link's `code`; empty: create one through the first instance")
	token := fs.String("token", "", "the link's `token` (better: PROPAGATE_TOKEN); never printed")
	n := fs.Int("n", 20, "`edits` to make")
	every := fs.Duration("every", time.Second, "at least this long between the starts of two edits (the next starts only once every instance has seen the last, or -timeout)")
	poll := fs.Duration("poll", time.Millisecond, "how often each instance is asked while an edit is not seen there")
	timeout := fs.Duration("timeout", 5*time.Second, "an instance that has not seen an edit this long after its 200 never converged")
	method := fs.String("method", "HEAD", "`HEAD` (counts no click) or GET (redirects not followed; counts clicks)")
	urlPrefix := fs.String("url-prefix", "https://example.com/propagate/", "each edit points the link at this `prefix` plus a number")
	del := fs.Bool("delete", false, "after the edits, delete the link and measure until every instance answers 410")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	p := probe{code: *code, token: *token, n: *n, every: *every, poll: *poll, timeout: *timeout,
		method: *method, urlPrefix: *urlPrefix, delete: *del, now: time.Now}
	if p.token == "" {
		p.token = getenv("PROPAGATE_TOKEN")
	}
	for _, s := range strings.Split(*instances, ",") {
		if s = strings.TrimRight(strings.TrimSpace(s), "/"); s != "" {
			p.instances = append(p.instances, s)
		}
	}
	switch {
	case len(p.instances) == 0:
		return errors.New("-instances: give at least one base URL")
	case p.n < 1:
		return fmt.Errorf("-n %d: want at least 1", p.n)
	case p.poll <= 0 || p.every < 0 || p.timeout <= 0:
		return errors.New("-poll and -timeout must be more than 0, -every at least 0")
	case p.method != http.MethodHead && p.method != http.MethodGet:
		return fmt.Errorf("-method %q: want HEAD or GET", p.method)
	case p.code != "" && p.token == "":
		return errors.New("-code needs its token: -token or PROPAGATE_TOKEN")
	}
	p.client = &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		// Enough idle connections that no poll opens a new one.
		Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute},
	}
	created := ""
	if p.code == "" {
		var err error
		if p.code, p.token, err = p.create(ctx); err != nil {
			return err
		}
		created = " (created for this run)"
	}
	// How it was made: every flag but the token.
	var flags []string
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if f.Name == "token" {
			v = "(not shown)"
		}
		flags = append(flags, fmt.Sprintf("-%s=%s", f.Name, v))
	})
	fmt.Fprintf(stdout, "# propagate %s\n", strings.Join(flags, " "))
	fmt.Fprintf(stdout, "# date %s, %s %s/%s\n", p.now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(stdout, "# code %s%s; delay = from the PATCH's 200 to the first %s answering the new Location, polled every %v\n",
		p.code, created, p.method, p.poll)
	for i, base := range p.instances {
		fmt.Fprintf(stdout, "# instance %d: %s\n", i, base)
	}
	return p.measure(ctx, stdout)
}

// measure makes the edits and prints the timeline and the summary.
func (p probe) measure(ctx context.Context, w io.Writer) error {
	delays := make([][]time.Duration, len(p.instances)) // per instance, per edit
	header := "edit  via  patch_ms"
	for i := range p.instances {
		header += fmt.Sprintf("  inst%d_ms", i)
	}
	fmt.Fprintf(w, "%s\n", header)
	start := p.now()
	tag := start.UnixNano()
	for e := range p.n {
		if e > 0 && p.every > 0 {
			next := start.Add(time.Duration(e) * p.every)
			select {
			case <-time.After(time.Until(next)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		via := e % len(p.instances)
		url := fmt.Sprintf("%s%d-%d", p.urlPrefix, tag, e+1)
		sent := p.now()
		if err := p.edit(ctx, p.instances[via], url); err != nil {
			return fmt.Errorf("edit %d through instance %d: %w", e+1, via, err)
		}
		ok := p.now()
		got := p.waitAll(ctx, func(status int, loc string) bool { return loc == url })
		line := fmt.Sprintf("%4d  %3d  %8.2f", e+1, via, ms(ok.Sub(sent)))
		for i, d := range got {
			delays[i] = append(delays[i], d)
			line += fmt.Sprintf("  %8s", cell(d))
		}
		fmt.Fprintln(w, line)
	}
	p.summary(w, "edits", delays)
	if !p.delete {
		return nil
	}
	via := p.n % len(p.instances)
	sent := p.now()
	if err := p.send(ctx, http.MethodDelete, p.instances[via], "", http.StatusNoContent); err != nil {
		return fmt.Errorf("delete through instance %d: %w", via, err)
	}
	ok := p.now()
	got := p.waitAll(ctx, func(status int, _ string) bool { return status == http.StatusGone })
	line := fmt.Sprintf("delete via %d: %.2f ms;", via, ms(ok.Sub(sent)))
	gone := make([][]time.Duration, len(p.instances))
	for i, d := range got {
		line += fmt.Sprintf(" inst%d %s", i, cell(d))
		gone[i] = []time.Duration{d}
	}
	fmt.Fprintln(w, line)
	p.summary(w, "delete", gone)
	return nil
}

// waitAll asks every instance for the code, every p.poll, until seen
// says yes or p.timeout passes, and returns each one's delay from now
// (never, past the timeout).
func (p probe) waitAll(ctx context.Context, seen func(status int, location string) bool) []time.Duration {
	from := p.now()
	out := make([]time.Duration, len(p.instances))
	var wg sync.WaitGroup
	for i, base := range p.instances {
		wg.Go(func() {
			out[i] = never
			tick := time.NewTicker(p.poll)
			defer tick.Stop()
			for {
				status, loc, err := p.ask(ctx, base)
				at := p.now()
				if err == nil && seen(status, loc) {
					out[i] = at.Sub(from)
					return
				}
				if at.Sub(from) > p.timeout {
					return
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}

// ask is one poll: the status and Location of base/code.
func (p probe) ask(ctx context.Context, base string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, p.method, base+"/"+p.code, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // drained so that the connection is reused; its error is the close's too
	if err := resp.Body.Close(); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get("Location"), nil
}

// edit points the link at url through base.
func (p probe) edit(ctx context.Context, base, url string) error {
	body, err := json.Marshal(map[string]string{"url": url})
	if err != nil {
		return err
	}
	return p.send(ctx, http.MethodPatch, base, string(body), http.StatusOK)
}

// send makes an authenticated request to base/api/links/code and checks
// its status. The answer's body is shown on a failure; the token is not.
func (p probe) send(ctx context.Context, method, base, body string, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, base+"/api/links/"+p.code, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s: %d %s, want %d", method, resp.StatusCode, strings.TrimSpace(string(b)), want)
	}
	return nil
}

// create makes the link the run edits, through the first instance.
func (p probe) create(ctx context.Context) (code, token string, err error) {
	body := fmt.Sprintf(`{"url":%q}`, p.urlPrefix+"0")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.instances[0]+"/shorten", strings.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("create: %w", err)
	}
	defer resp.Body.Close()
	var c struct{ Code, Token string }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusCreated {
		return "", "", fmt.Errorf("create: status %d, %v", resp.StatusCode, err)
	}
	return c.Code, c.Token, nil
}

// summary prints p50, p90, p99 and max per instance and over all, of the
// delays that converged, and how many never did.
func (p probe) summary(w io.Writer, what string, delays [][]time.Duration) {
	var all []time.Duration
	nevers, total := 0, 0
	fmt.Fprintf(w, "# %s: delay in ms, nearest rank, over the %s that converged\n", what, what)
	fmt.Fprintf(w, "%-10s %6s %8s %8s %8s %8s %6s\n", "instance", "seen", "p50", "p90", "p99", "max", "never")
	for i, ds := range delays {
		var ok []time.Duration
		for _, d := range ds {
			if d == never {
				nevers++
				continue
			}
			ok = append(ok, d)
		}
		total += len(ds)
		all = append(all, ok...)
		fmt.Fprintln(w, row(fmt.Sprintf("inst%d", i), ok, len(ds)))
	}
	fmt.Fprintln(w, row("all", all, total))
	fmt.Fprintf(w, "# never converged within %v: %d of %d\n", p.timeout, nevers, total)
}

func row(name string, ok []time.Duration, n int) string {
	slices.Sort(ok)
	return fmt.Sprintf("%-10s %6d %8s %8s %8s %8s %6d", name, len(ok),
		rank(ok, 0.50), rank(ok, 0.90), rank(ok, 0.99), rank(ok, 1), n-len(ok))
}

// rank is the nearest-rank percentile q of sorted, in ms; "-" if empty.
func rank(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := min(max(int(math.Ceil(q*float64(len(sorted))))-1, 0), len(sorted)-1)
	return fmt.Sprintf("%.2f", ms(sorted[i]))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func cell(d time.Duration) string {
	if d == never {
		return "never"
	}
	return fmt.Sprintf("%.2f", ms(d))
}
