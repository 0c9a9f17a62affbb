// Command historyclients runs the history checker's clients (package
// linkhistory, the checker of TestHistoryUnderFaults) against instances
// that are already running, such as step 20's three hosts, and checks
// what they recorded: whatever harm the caller does to the hosts
// meanwhile (benchmarks/hosts.sh removes one, or moves the Redis master).
//
//	go run ./benchmarks/historyclients -targets http://10.77.0.11:8080,http://10.77.0.12:8080,http://10.77.0.13:8080 -d 24s -harm 6s -tag histapp -o out/36-history-app
//	go run ./benchmarks/historyclients -check out/36-history-app.jsonl.gz -bound 5s -harm 6s
//
// Clients create, edit, delete and read a few dozen links (aliases made
// of -tag and a number, so that each run has links of its own) at a
// pace, each request to one instance: reads to any, a link's edits and
// deletes to its own (link number mod the instances), as the suite's
// test does. An instance that did not answer (connection refused or
// cut, a timeout) is left alone for a second; a write to it or answered
// 5xx has an unknown outcome, which the checker allows either way; a
// read with no answer is not recorded.
//
// -o PREFIX writes PREFIX.jsonl.gz (the history, one operation a line,
// gzipped), PREFIX.txt (the verdict) and, if porcupine refuses the
// writes, PREFIX-writes.html (its drawing). -check reads a saved history
// (.jsonl, or .jsonl.gz) and checks it again (a write of unknown outcome
// is saved with when its client gave up on it; the check moves it to the
// end). -harm says when, after the clients began, the caller does its
// harm: the history must hold edits and redirects after it, or it proves
// nothing of the harm. The exit status is 0 for a history allowed, 1 for
// one refused (or one that proves little), 3 when porcupine ran out of
// time, 2 for anything else.
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"shortener/linkhistory"
)

func main() {
	ok, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "historyclients:", err)
		os.Exit(2)
	}
	switch ok {
	case verdictRefused:
		os.Exit(1)
	case verdictUndecided:
		os.Exit(3)
	}
}

// A verdict on a history.
type verdictOf int

const (
	verdictAllowed verdictOf = iota
	verdictRefused
	verdictUndecided
)

// record is one operation as a line of the saved history.
type record struct {
	Client   int    `json:"client"`
	Link     string `json:"link"`
	Kind     string `json:"kind"`
	URL      string `json:"url,omitempty"`
	Inst     int    `json:"inst"`
	Call     int64  `json:"call_ns"`
	Return   int64  `json:"return_ns"`
	Status   int    `json:"status"` // 0: unknown outcome
	Location string `json:"location,omitempty"`
}

type config struct {
	targets        []string
	dur, timeout   time.Duration
	harm           time.Duration
	bound          time.Duration
	links, clients int
	rate           float64
	tag, out       string
}

func run(args []string, stdout io.Writer) (verdictOf, error) {
	fs := flag.NewFlagSet("historyclients", flag.ContinueOnError)
	targets := fs.String("targets", "", "the instances' base URLs, comma-separated")
	check := fs.String("check", "", "check a saved history (a .jsonl file) instead of making one")
	var c config
	fs.DurationVar(&c.dur, "d", 24*time.Second, "how long the clients run")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "a request's whole time")
	fs.DurationVar(&c.harm, "harm", 0, "when the harm comes, after the clients began: the history must change and redirect links after it")
	fs.DurationVar(&c.bound, "bound", 5*time.Second, "the staleness allowed to a read on an instance that did not make the change")
	fs.IntVar(&c.links, "links", 48, "links")
	fs.IntVar(&c.clients, "clients", 8, "clients, each one request at a time")
	fs.Float64Var(&c.rate, "rate", 20, "operations a second per client, at most")
	fs.StringVar(&c.tag, "tag", "hist", "the links' aliases begin with it (letters and digits)")
	fs.StringVar(&c.out, "o", "", "write PREFIX.jsonl.gz, PREFIX.txt (and PREFIX-writes.html on a refusal)")
	if err := fs.Parse(args); err != nil {
		return verdictRefused, err
	}
	if *check != "" {
		raw, err := load(*check)
		if err != nil {
			return verdictRefused, err
		}
		return verdict(raw, c, stdout, "")
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.targets = append(c.targets, strings.TrimRight(t, "/"))
		}
	}
	if len(c.targets) == 0 || c.links < 1 || c.clients < 1 || c.rate <= 0 || c.dur <= 0 || len(c.tag) < 2 || strings.Trim(c.tag, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return verdictRefused, errors.New("want -targets, -links, -clients, -rate and -d above 0, and -tag of two or more lowercase letters and digits")
	}
	h, tally := clients(c)
	raw := h.Raw()
	if c.out != "" {
		if err := save(c.out+".jsonl.gz", raw); err != nil {
			return verdictRefused, err
		}
	}
	var report strings.Builder
	fmt.Fprintf(&report, "history: %d operations on %d links by %d clients through %d instances in %v, from %s (unix %.3f)\n",
		len(raw), c.links, c.clients, len(c.targets), c.dur, h.Start().UTC().Format(time.RFC3339Nano), float64(h.Start().UnixNano())/1e9)
	fmt.Fprintf(&report, "answers not recorded or of unknown outcome: %s\n", tally)
	fmt.Fprintf(&report, "%s", tally.byInstance())
	w := io.MultiWriter(stdout, &report)
	fmt.Fprint(stdout, report.String())
	v, err := verdict(raw, c, w, c.out)
	if err == nil && c.out != "" {
		err = os.WriteFile(c.out+".txt", []byte(report.String()), 0o644)
	}
	return v, err
}

// tally counts what was not recorded as an answer: reads with none,
// writes of unknown outcome, instances left alone.
type tally struct {
	mu   sync.Mutex
	what map[string]int
	inst map[int]map[string]int
}

func (t *tally) add(inst int, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.what[what]++
	if t.inst[inst] == nil {
		t.inst[inst] = map[string]int{}
	}
	t.inst[inst][what]++
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.what) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(t.what))
	for k := range t.what {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, t.what[k])
	}
	return b.String()
}

func (t *tally) byInstance() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for i := range len(t.inst) + 8 {
		if m, ok := t.inst[i]; ok {
			fmt.Fprintf(&b, "  instance %d: %v\n", i, m)
		}
	}
	return b.String()
}

// clients runs c.clients clients for c.dur and returns what they
// recorded.
func clients(c config) (*linkhistory.History, *tally) {
	client := &http.Client{
		Timeout:       c.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		// A host removed does not refuse a connection, it does not
		// answer: a second is enough to call it gone.
		Transport: &http.Transport{MaxIdleConnsPerHost: c.clients, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext},
	}
	t := &tally{what: map[string]int{}, inst: map[int]map[string]int{}}
	// downUntil: an instance that did not answer is left alone until then
	// (unix nanoseconds).
	downUntil := make([]atomic.Int64, len(c.targets))
	up := func(i int) bool { return time.Now().UnixNano() >= downUntil[i].Load() }
	var tokens sync.Map // link → token, once its create answered 201
	h := linkhistory.New()
	// Each link is created first, through its own instance, so that the
	// run's reads find links and its edits and deletes have them to
	// change; later creates of it are 409, or 201 if this one failed.
	for l := range c.links {
		link, inst := fmt.Sprintf("%s%02d", c.tag, l), l%len(c.targets)
		in := linkhistory.Op{Link: link, Kind: "create", URL: fmt.Sprintf("https://h.example/%s/first", link), Inst: inst}
		call := h.Now()
		a, err := do(client, "POST", c.targets[inst]+"/shorten", fmt.Sprintf(`{"url":%q,"alias":%q}`, in.URL, link), "")
		ret := h.Now()
		switch {
		case err != nil || a.Status >= 500:
			t.add(inst, "create: first, no answer or 5xx (unknown)")
			a = linkhistory.Answer{Status: linkhistory.Unknown}
		case a.Status == http.StatusCreated:
			tokens.Store(link, a.URL)
			a.URL = ""
		}
		h.Add(c.clients, in, call, a, ret)
	}
	end := time.Now().Add(c.dur)
	// Half the links may be deleted; the others stay, for edits to reach.
	deletable := func(l int) bool { return l%2 == 1 }
	var wg sync.WaitGroup
	for cl := range c.clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(cl), 36))
			pace, next := time.Duration(float64(time.Second)/c.rate), time.Now()
			for i := 0; time.Now().Before(end); i++ {
				// A pace, not a wait for something to happen: a client that
				// is late does not wait.
				if early := time.Until(next); early > 0 {
					time.Sleep(early)
				} else {
					next = time.Now()
				}
				next = next.Add(pace)
				l := r.IntN(c.links)
				link := fmt.Sprintf("%s%02d", c.tag, l)
				var live []int
				for j := range c.targets {
					if up(j) {
						live = append(live, j)
					}
				}
				if len(live) == 0 {
					continue
				}
				inst, writer := live[r.IntN(len(live))], l%len(c.targets)
				token, _ := tokens.Load(link)
				tok, _ := token.(string)
				var in linkhistory.Op
				var method, url, body string
				switch p := r.IntN(1000); {
				case p < 20: // a create: the first of a link's is 201, the rest 409
					in = linkhistory.Op{Link: link, Kind: "create", URL: fmt.Sprintf("https://h.example/%s/c%d-%d", link, cl, i), Inst: inst}
					method, url, body = "POST", c.targets[inst]+"/shorten", fmt.Sprintf(`{"url":%q,"alias":%q}`, in.URL, link)
				case p < 320 && tok != "" && up(writer):
					in = linkhistory.Op{Link: link, Kind: "edit", URL: fmt.Sprintf("https://h.example/%s/e%d-%d", link, cl, i), Inst: writer}
					method, url, body = "PATCH", c.targets[writer]+"/api/links/"+link, fmt.Sprintf(`{"url":%q}`, in.URL)
				case p < 328 && tok != "" && deletable(l) && up(writer): // rarer, and half the links only
					in = linkhistory.Op{Link: link, Kind: "delete", Inst: writer}
					method, url = "DELETE", c.targets[writer]+"/api/links/"+link
				default:
					in = linkhistory.Op{Link: link, Kind: "read", Inst: inst}
					method, url = "GET", c.targets[in.Inst]+"/"+link
				}
				call := h.Now()
				a, err := do(client, method, url, body, tok)
				ret := h.Now()
				switch {
				case err != nil:
					downUntil[in.Inst].Store(time.Now().Add(time.Second).UnixNano())
					if in.Kind == "read" {
						t.add(in.Inst, "read: no answer")
						continue
					}
					t.add(in.Inst, in.Kind+": no answer (unknown)")
					a = linkhistory.Answer{Status: linkhistory.Unknown}
				case a.Status >= 500:
					if in.Kind == "read" {
						t.add(in.Inst, fmt.Sprintf("read: %d", a.Status))
						continue
					}
					t.add(in.Inst, fmt.Sprintf("%s: %d (unknown)", in.Kind, a.Status))
					a = linkhistory.Answer{Status: linkhistory.Unknown}
				}
				if in.Kind == "create" && a.Status == http.StatusCreated {
					tokens.Store(link, a.URL)
					a.URL = ""
				}
				h.Add(cl, in, call, a, ret)
			}
		})
	}
	wg.Wait()
	return h, t
}

// do sends one request; for a create answered 201, the answer's URL is
// the link's token.
func do(client *http.Client, method, url, body, token string) (linkhistory.Answer, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return linkhistory.Answer{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return linkhistory.Answer{}, err
	}
	defer resp.Body.Close()
	a := linkhistory.Answer{Status: resp.StatusCode, URL: resp.Header.Get("Location")}
	if method == "POST" && resp.StatusCode == http.StatusCreated {
		var made struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&made); err != nil {
			return linkhistory.Answer{}, err
		}
		a.URL = made.Token
	} else if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return linkhistory.Answer{}, err
	}
	return a, nil
}

// verdict checks a history, as recorded (raw), and writes what it found
// to w: porcupine on the writes, the reads with the bound, the least
// bound they meet, each deleted link directly, and what came after the
// harm. With a prefix, a refusal of the writes is drawn to
// PREFIX-writes.html.
func verdict(raw []porcupine.Operation, c config, w io.Writer, prefix string) (verdictOf, error) {
	ops := linkhistory.Settle(raw)
	count := map[string]int{}
	for _, o := range ops {
		count[o.Input.(linkhistory.Op).Kind+" "+fmt.Sprint(o.Output.(linkhistory.Answer).Status)]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprint(w, "operations by kind and status (0: unknown outcome):")
	for _, k := range keys {
		fmt.Fprintf(w, " %s: %d;", k, count[k])
	}
	fmt.Fprintln(w)
	v := verdictAllowed
	res, info := linkhistory.Writes(ops, 2*time.Minute)
	fmt.Fprintf(w, "writes (porcupine, linearizable): %s\n", res)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		v = verdictUndecided
	default:
		v = verdictRefused
		if prefix != "" {
			if err := porcupine.VisualizePath(linkhistory.Model, info, prefix+"-writes.html"); err != nil {
				fmt.Fprintf(w, "porcupine's drawing of the writes failed: %v\n", err)
			} else {
				fmt.Fprintf(w, "porcupine's drawing of the writes: %s-writes.html\n", prefix)
			}
		}
	}
	stale := linkhistory.Stale(ops, c.bound)
	fmt.Fprintf(w, "reads refused with a bound of %v: %d\n", c.bound, len(stale))
	for _, s := range stale[:min(len(stale), 20)] {
		fmt.Fprintf(w, "  %s\n", s)
	}
	if len(stale) > 0 {
		v = verdictRefused
	}
	if least := linkhistory.LeastBound(ops); least > time.Hour {
		fmt.Fprintln(w, "the least bound this history meets: none (a read no bound explains: on the instance that made the change, or of a URL no write set, or a 410 before any DELETE)")
	} else {
		fmt.Fprintf(w, "the least bound this history meets: %v\n", least.Round(time.Millisecond))
	}
	deletes, reads, served, late := deleted(ops, c.bound)
	fmt.Fprintf(w, "deleted links (204): %d; reads of them after the 204: %d; answered 302 after the 204: %d (the latest %v after it); 302 past the bound, or on the deleting instance: %d\n",
		deletes, reads, served.n, served.latest.Round(time.Millisecond), late)
	if late > 0 {
		v = verdictRefused
	}
	// After the harm: what the history holds there (raw: a write of
	// unknown outcome counted where its client gave up on it).
	after := map[string]int{}
	for _, o := range raw {
		if o.Call >= c.harm.Nanoseconds() {
			after[o.Input.(linkhistory.Op).Kind+" "+fmt.Sprint(o.Output.(linkhistory.Answer).Status)]++
		}
	}
	fmt.Fprintf(w, "after the harm (%v after the clients began): edits 200: %d, deletes 204: %d, redirects 302: %d, reads 410: %d, writes of unknown outcome: %d\n",
		c.harm, after["edit 200"], after["delete 204"], after["read 302"], after["read 410"], after["create 0"]+after["edit 0"]+after["delete 0"])
	if count["edit 200"] == 0 || count["delete 204"] == 0 || count["read 302"] == 0 || after["edit 200"] == 0 || after["read 302"] == 0 {
		fmt.Fprintln(w, "the history lacks edits, deletes or redirects, or edits and redirects after the harm: it proves little")
		if v == verdictAllowed {
			v = verdictRefused
		}
	}
	switch v {
	case verdictAllowed:
		fmt.Fprintln(w, "verdict: allowed")
	case verdictUndecided:
		fmt.Fprintln(w, "verdict: NOT DECIDED (porcupine ran out of time)")
	default:
		fmt.Fprintln(w, "verdict: REFUSED")
	}
	return v, nil
}

// deleted checks the promise users rely on directly: no read of a link
// answered 302 after its DELETE's 204 on the instance that deleted it,
// nor past the bound anywhere.
func deleted(ops []porcupine.Operation, bound time.Duration) (deletes, reads int, served struct {
	n      int
	latest time.Duration
}, late int) {
	gone := map[string]porcupine.Operation{}
	for _, o := range ops {
		in, out := o.Input.(linkhistory.Op), o.Output.(linkhistory.Answer)
		if in.Kind == "delete" && out.Status == http.StatusNoContent {
			gone[in.Link] = o
		}
	}
	deletes = len(gone)
	for _, o := range ops {
		in, out := o.Input.(linkhistory.Op), o.Output.(linkhistory.Answer)
		d, ok := gone[in.Link]
		if !ok || in.Kind != "read" || o.Call <= d.Return {
			continue
		}
		reads++
		if out.Status != http.StatusFound {
			continue
		}
		served.n++
		after := time.Duration(o.Call - d.Return)
		served.latest = max(served.latest, after)
		if in.Inst == d.Input.(linkhistory.Op).Inst || after > bound {
			late++
		}
	}
	return
}

// save writes a history as recorded, one operation a line, gzipped.
func save(path string, ops []porcupine.Operation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	bw := bufio.NewWriter(zw)
	enc := json.NewEncoder(bw)
	for _, o := range ops {
		in, out := o.Input.(linkhistory.Op), o.Output.(linkhistory.Answer)
		if err := enc.Encode(record{o.ClientId, in.Link, in.Kind, in.URL, in.Inst, o.Call, o.Return, out.Status, out.URL}); err != nil {
			f.Close()
			return err
		}
	}
	if err := errors.Join(bw.Flush(), zw.Close()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// load reads a history save wrote, as recorded.
func load(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	var ops []porcupine.Operation
	dec := json.NewDecoder(r)
	for {
		var r record
		if err := dec.Decode(&r); err == io.EOF {
			return ops, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: linkhistory.Op{Link: r.Link, Kind: r.Kind, URL: r.URL, Inst: r.Inst},
			Call: r.Call, Output: linkhistory.Answer{Status: r.Status, URL: r.Location}, Return: r.Return})
	}
}
