// Command cachesim replays a recorded stream of link codes through the two
// in-process caches the shortener could keep, at equal memory, and prints
// what each one gives for it: the share of lookups it answers, the CPU a
// hit and a fill cost, and the heap it takes per link.
//
//	go run ./benchmarks/zipf -links 10000000 -s 1.0 -n 10000000 -seed 1 >/tmp/stream
//	go run ./benchmarks/cachesim -stream /tmp/stream -budgets 8MiB,32MiB,128MiB
//
// The two: hashicorp/golang-lru/v2 (least recently used out first, one lock
// around a map and a list), bounded by a number of links, and
// maypok86/otter/v2 (W-TinyLFU: a small window of recent links in front of a
// main area that admits a newcomer only if a frequency sketch says it is
// asked for more often than the link it would push out), bounded by a
// weight. "Equal memory" is measured, not nominal: each cache is filled by
// the stream, the garbage collector run, and the heap it holds read with
// runtime.ReadMemStats; the LRU's count is budget / heap per link, otter's
// per-link overhead (weight = len(code) + len(url) + overhead) is set so that
// its heap is the budget, each found by replaying again until the heap is
// within 1% of it, or, where a step in the growth of a hash table skips
// past that, at the largest bound under it. The app runs otter as the
// otter-inline rows do (cache.go), and their overhead is its
// localEntryOverhead.
//
// The value of a code is the URL sql/seed.sql gives its link,
// https://example.com/seed/<n>: n is recovered from the code (the seed's map
// from n to code is one-to-one), so the sizes are the seeded ones exactly.
// The stream has no times, so the local cache's lifetime (LOCAL_CACHE_TTL)
// plays no part: these are hit ratios of capacity alone.
//
// Hit ratios count the lookups after the first -warmup share of the stream;
// the table gives the median of -runs replays and their range. The LRU's is
// the same on every run; otter's varies a little, because its frequency
// sketch hashes with a random seed per cache, and, with its default
// executor, because its maintenance runs on goroutines of its own, behind
// the replay. otter-inline runs that maintenance on the goroutine that
// calls the cache (Options.Executor), which takes the scheduler out of it.
//
// CPU is the process's user and system time (getrusage) over the timed
// loop, so that work otter hands to other goroutines is counted. The gets
// are of hits only, the stream's own codes in the stream's order, each a
// string of its own as a request's code is; the sets are of links the
// stream never asks for, into the full cache. Both libraries are called
// through the same interface. On a machine doing anything else the
// timings mean little; the hit ratios and heap do not depend on it.
//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/maypok86/otter/v2"
)

func main() {
	if err := run(os.Args, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "cachesim:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cachesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	streamPath := fs.String("stream", "", "`FILE` of codes, one a line, as benchmarks/zipf writes them (- for stdin)")
	budgetList := fs.String("budgets", "8MiB,32MiB,128MiB", "heap `SIZES` to compare the caches at, bytes or with KiB, MiB, GiB")
	warmup := fs.Float64("warmup", 0.2, "`SHARE` of the stream replayed before hits are counted")
	runs := fs.Int("runs", 3, "replays of otter per budget: its hit ratio varies with its sketch's random seed")
	gets := fs.Int("gets", 2_000_000, "hits timed per cache, and per goroutine with GOMAXPROCS goroutines")
	sets := fs.Int("sets", 200_000, "fills of links the stream never asks for, timed per cache")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *streamPath == "" {
		return errors.New("-stream: want the file of codes to replay")
	}
	if !(*warmup >= 0 && *warmup < 1) {
		return fmt.Errorf("-warmup %v: want 0 or more, less than 1", *warmup)
	}
	if *runs < 1 || *gets < 1 || *sets < 1 {
		return errors.New("-runs, -gets and -sets: want 1 or more")
	}
	var budgets []int64
	for _, f := range strings.Split(*budgetList, ",") {
		b, err := parseBytes(strings.TrimSpace(f))
		if err != nil || b < 1<<20 {
			return fmt.Errorf("-budgets %q: want sizes of 1MiB or more, like 8MiB,32MiB", *budgetList)
		}
		budgets = append(budgets, b)
	}

	in := os.Stdin
	if *streamPath != "-" {
		f, err := os.Open(*streamPath)
		if err != nil {
			return fmt.Errorf("open stream: %w", err)
		}
		defer f.Close() //nolint:errcheck // read only: a close error loses nothing
		in = f
	}
	stream, err := readStream(in)
	if err != nil {
		return fmt.Errorf("read %s: %w", *streamPath, err)
	}
	if len(stream) == 0 {
		return fmt.Errorf("read %s: no codes", *streamPath)
	}
	distinct, maxN := countDistinct(stream)

	// The header and the table are written whole at the end, the table
	// once every row is known (tabwriter lines up the columns).
	var head, rows bytes.Buffer
	fmt.Fprintf(&head, "# cachesim: golang-lru/v2 and otter/v2 at equal measured heap, replaying one recorded stream\n")
	fmt.Fprintf(&head, "# command: %s\n", strings.Join(args, " "))
	fmt.Fprintf(&head, "# commit:  %s\n", commit())
	fmt.Fprintf(&head, "# date:    %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&head, "# go:      %s %s/%s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&head, "# cpu:     %s, %d logical; memory %s\n", cpuModel(), runtime.NumCPU(), memTotal())
	fmt.Fprintf(&head, "# stream:  %d codes, %d distinct, highest link %d; hits counted after the first %.0f%% (%d lookups)\n",
		len(stream), distinct, maxN, *warmup*100, len(stream)-int(float64(len(stream))**warmup))
	fmt.Fprintf(&head, "# values:  https://example.com/seed/<n>, as sql/seed.sql; no lifetime (the stream has no times)\n")
	fmt.Fprintf(&head, "# hit%%:    median of %d replays [range]; lru is the same each time, otter's sketch has a random seed per cache\n", *runs)
	fmt.Fprintf(&head, "# otter:   maintenance on goroutines of its own (its default executor); otter-inline: on the caller's\n")
	fmt.Fprintf(&head, "# ns/get:  CPU (getrusage) per hit, over %d hits of the stream's own codes, 1 goroutine and %d\n", *gets, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&head, "# ns/set:  CPU per fill of a link the stream never asks for (%d), into the full cache\n", *sets)
	fmt.Fprintf(&head, "# heap:    runtime.ReadMemStats HeapAlloc after GC, filled cache minus empty process; B/link = heap / links held;\n")
	fmt.Fprintf(&head, "#          bound: the one that brings the heap within 1%% of the budget, or the largest under it\n")
	fmt.Fprintf(&head, "#\n")

	fmt.Fprintf(&rows, "budget\tpolicy\tbound\tlinks\theap MiB\tB/link\thit%%\tns/get 1\tns/get %d\tns/set\t\n", runtime.GOMAXPROCS(0))
	warm := int(float64(len(stream)) * *warmup)
	policies := []policy{lruPolicy{}, otterPolicy{}, otterPolicy{inline: true}}
	knobs := make([]float64, len(policies)) // each budget starts from the last one's
	for b, budget := range budgets {
		for i, p := range policies {
			if b == 0 {
				knobs[i] = p.firstKnob(budget)
			} else if _, ok := p.(lruPolicy); ok {
				knobs[i] *= float64(budget) / float64(budgets[b-1]) // a count: scaled
			}
			if _, err := fmt.Fprintf(stderr, "cachesim: %s at %s\n", p.name(), formatBytes(budget)); err != nil {
				return fmt.Errorf("write progress: %w", err)
			}
			r, err := measure(p, budget, knobs[i], stream, warm, maxN, *runs, *gets, *sets)
			if err != nil {
				return fmt.Errorf("%s at %s: %w", p.name(), formatBytes(budget), err)
			}
			knobs[i] = r.knob
			hit := fmt.Sprintf("%.2f", r.hits[len(r.hits)/2]*100)
			if len(r.hits) > 1 {
				hit += fmt.Sprintf(" [%.2f-%.2f]", r.hits[0]*100, r.hits[len(r.hits)-1]*100)
			}
			bound := r.bound
			if !r.full {
				bound += " (not filled: stream too short)"
			}
			fmt.Fprintf(&rows, "%s\t%s\t%s\t%d\t%.2f\t%.1f\t%s\t%.0f\t%.0f\t%.0f\t\n",
				formatBytes(budget), p.name(), bound, r.links, float64(r.heap)/(1<<20), float64(r.heap)/float64(r.links),
				hit, r.getNs, r.getNsPar, r.setNs)
		}
	}
	if _, err := stdout.Write(head.Bytes()); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	if _, err := tw.Write(rows.Bytes()); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// entry is what the app's local cache keeps per link (localEntry in
// cache.go): the URL and when it expires, which the replay sets only so
// that an entry takes the app's room.
type entry struct {
	url     string
	expires int64
}

// cache is what the replay needs of either library.
type cache interface {
	get(code string) (entry, bool)
	set(code string, e entry)
	has(code string) bool // without counting as a use
	len() int
	settle() // finish the maintenance a write left, if any
}

// policy makes caches of one library. Its knob is what bounds them: the
// LRU's number of links, otter's overhead per link (its weight bound is the
// budget itself).
type policy interface {
	name() string
	firstKnob(budget int64) float64
	// nextKnob is the knob that should bring the heap to budget, from the
	// heap and links the last knob gave.
	nextKnob(knob float64, budget int64, heap uint64, links int) float64
	make(budget int64, knob float64) (c cache, bound string, err error)
}

type lruPolicy struct{}

func (lruPolicy) name() string { return "lru" }

func (lruPolicy) firstKnob(budget int64) float64 { return float64(budget) / 150 }

func (lruPolicy) nextKnob(_ float64, budget int64, heap uint64, links int) float64 {
	return float64(budget) / (float64(heap) / float64(links))
}

func (lruPolicy) make(_ int64, knob float64) (cache, string, error) {
	n := int(knob)
	c, err := lru.New[string, entry](n)
	if err != nil {
		return nil, "", fmt.Errorf("lru: %w", err)
	}
	return lruCache{c}, fmt.Sprintf("%d links", n), nil
}

type lruCache struct{ c *lru.Cache[string, entry] }

func (l lruCache) get(code string) (entry, bool) { return l.c.Get(code) }
func (l lruCache) set(code string, e entry)      { l.c.Add(code, e) }
func (l lruCache) has(code string) bool          { return l.c.Contains(code) }
func (l lruCache) len() int                      { return l.c.Len() }
func (l lruCache) settle()                       {}

// otterPolicy makes otter caches; inline runs their maintenance on the
// goroutine that calls the cache instead of on goroutines of their own.
type otterPolicy struct{ inline bool }

func (o otterPolicy) name() string {
	if o.inline {
		return "otter-inline"
	}
	return "otter"
}

func (otterPolicy) firstKnob(int64) float64 { return 100 }

func (otterPolicy) nextKnob(knob float64, budget int64, heap uint64, links int) float64 {
	return max(knob+(float64(heap)-float64(budget))/float64(links), 1)
}

func (p otterPolicy) make(budget int64, knob float64) (cache, string, error) {
	overhead := int(knob + 0.5)
	o := &otter.Options[string, entry]{
		MaximumWeight: uint64(budget),
		Weigher: func(code string, e entry) uint32 {
			return uint32(len(code) + len(e.url) + overhead)
		},
	}
	if p.inline {
		o.Executor = func(fn func()) { fn() }
	}
	c, err := otter.New(o)
	if err != nil {
		return nil, "", fmt.Errorf("otter: %w", err)
	}
	return otterCache{c}, fmt.Sprintf("len+%d B", overhead), nil
}

type otterCache struct{ c *otter.Cache[string, entry] }

func (o otterCache) get(code string) (entry, bool) { return o.c.GetIfPresent(code) }
func (o otterCache) set(code string, e entry)      { o.c.Set(code, e) }
func (o otterCache) has(code string) bool {
	_, ok := o.c.GetEntryQuietly(code)
	return ok
}
func (o otterCache) len() int { return o.c.EstimatedSize() }
func (o otterCache) settle()  { o.c.CleanUp() }

// result is one policy's row at one budget.
type result struct {
	bound           string
	knob            float64
	full            bool
	links           int
	heap            uint64
	hits            []float64 // sorted
	getNs, getNsPar float64
	setNs           float64
}

// measure finds the bound at which p's cache holds budget bytes of heap
// once the stream has filled it (or the largest under it: a map's memory
// grows in steps), then replays the stream to count hits and times gets
// and sets on the cache of the last replay. knob is where the search starts.
func measure(p policy, budget int64, knob float64, stream []uint64, warm int, maxN uint64, runs, gets, sets int) (res result, err error) {
	// otter's default executor runs its upkeep on goroutines that hold
	// their cache: one still running at a heap reading would count a
	// cache that is gone, or miss work still to come. Each reading, and
	// measure's return, waits until they have ended.
	quiesce := waitGoroutines(runtime.NumGoroutine())
	defer func() { err = errors.Join(err, quiesce()) }()
	var r, under result
	haveUnder, haveOver := false, false
	var overKnob float64
	for range 16 {
		c, bound, err := p.make(budget, knob)
		if err != nil {
			return r, err
		}
		heap, hit, filled, err := replayMeasured(c, stream, warm, quiesce)
		if err != nil {
			return r, err
		}
		r = result{bound: bound, knob: knob, full: c.len() < filled, links: c.len(), heap: heap, hits: []float64{hit}}
		d := float64(heap)/float64(budget) - 1
		if d > -0.01 && d < 0.01 || !r.full {
			under, haveUnder = r, true
			break
		}
		if d < 0 {
			under, haveUnder = r, true
		} else {
			overKnob, haveOver = knob, true
		}
		if !haveUnder || !haveOver {
			knob = p.nextKnob(knob, budget, heap, r.links)
			continue
		}
		if math.Abs(overKnob-under.knob) <= max(1, under.knob/1000) {
			break
		}
		knob = (overKnob + under.knob) / 2
	}
	if !haveUnder {
		return r, fmt.Errorf("no bound found that keeps the heap under %d bytes", budget)
	}
	r, knob = under, under.knob

	c := cache(nil)
	for range runs - 1 {
		var err error
		if c, _, err = p.make(budget, knob); err != nil {
			return r, err
		}
		r.hits = append(r.hits, replay(c, stream, warm))
	}
	slices.Sort(r.hits)
	if c == nil {
		var err error
		if c, _, err = p.make(budget, knob); err != nil {
			return r, err
		}
		replay(c, stream, warm)
	}
	c.settle()
	hot := hits(c, stream[warm:], gets)
	if len(hot) == 0 {
		return r, errors.New("no hits to time")
	}
	r.getNs = timeGets(c, hot, gets, 1)
	r.getNsPar = timeGets(c, hot, gets, runtime.GOMAXPROCS(0))
	cold := coldLinks(c, maxN, sets)
	r.setNs = timeSets(c, cold)
	return r, nil
}

// replayMeasured replays the stream into c, an empty cache, and returns
// the heap c holds after it, its hit ratio and how many links it was
// filled with (more than it holds once it has evicted some). quiesce
// waits for the goroutines of caches to end.
func replayMeasured(c cache, stream []uint64, warm int, quiesce func() error) (heap uint64, hit float64, filled int, err error) {
	if err := quiesce(); err != nil {
		return 0, 0, 0, err
	}
	before := heapAlloc()
	hit, filled = replayCounted(c, stream, warm)
	c.settle()
	if err := quiesce(); err != nil {
		return 0, 0, 0, err
	}
	after := heapAlloc()
	runtime.KeepAlive(c)
	return after - min(before, after), hit, filled, nil
}

// waitGoroutines returns a function that waits until no more than n
// goroutines are left, yielding the processor rather than sleeping.
func waitGoroutines(n int) func() error {
	return func() error {
		for i := 0; runtime.NumGoroutine() > n; i++ {
			if i == 10_000_000 {
				return fmt.Errorf("%d goroutines of a cache still running", runtime.NumGoroutine()-n)
			}
			runtime.Gosched()
		}
		return nil
	}
}

// replay asks c for each code in turn as the app's local cache does: a
// miss fills it with the link's URL. It returns the share of hits after
// the first warm lookups.
func replay(c cache, stream []uint64, warm int) float64 {
	hit, _ := replayCounted(c, stream, warm)
	return hit
}

func replayCounted(c cache, stream []uint64, warm int) (hit float64, filled int) {
	hits := 0
	for i, v := range stream {
		code := codeString(v)
		if _, ok := c.get(code); ok {
			if i >= warm {
				hits++
			}
			continue
		}
		c.set(code, entry{url: seedURL(v), expires: int64(i)})
		filled++
	}
	return float64(hits) / float64(len(stream)-warm), filled
}

// heapAlloc is the live heap: what is left after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// hits returns up to n of the stream's codes that c holds, in the
// stream's order (so as often as the stream asks for them), each a string
// of its own as a request's would be.
func hits(c cache, stream []uint64, n int) []string {
	var out []string
	for _, v := range stream {
		if len(out) == n {
			break
		}
		if code := codeString(v); c.has(code) {
			out = append(out, code)
		}
	}
	return out
}

// timeGets times n gets on each of g goroutines, cycling through keys
// (each goroutine from its own offset), and returns the CPU per get.
func timeGets(c cache, keys []string, n, g int) float64 {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range g {
		wg.Go(func() {
			j := i * len(keys) / g
			<-start
			for range n {
				c.get(keys[j])
				if j++; j == len(keys) {
					j = 0
				}
			}
		})
	}
	t0 := cpuTime()
	close(start)
	wg.Wait()
	return float64(cpuTime()-t0) / float64(n*g)
}

// coldLinks returns up to n links, with their codes, that c does not hold,
// from the highest one the stream asked for down.
func coldLinks(c cache, maxN uint64, n int) []struct {
	code string
	e    entry
} {
	var out []struct {
		code string
		e    entry
	}
	for k := maxN; k > 0 && len(out) < n; k-- {
		v := k * codePrime % codeSpace
		if code := codeString(v); !c.has(code) {
			out = append(out, struct {
				code string
				e    entry
			}{code, entry{url: seedURL(v)}})
		}
	}
	return out
}

// timeSets fills c with links it does not hold and returns the CPU per
// fill, maintenance included.
func timeSets(c cache, links []struct {
	code string
	e    entry
}) float64 {
	t0 := cpuTime()
	for _, l := range links {
		c.set(l.code, l.e)
	}
	c.settle()
	return float64(cpuTime()-t0) / float64(len(links))
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err)) // only with a bad argument
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The codes sql/seed.sql gives links: link n's code is n * codePrime mod
// 62^7 written in base 62, seven digits.
const (
	codeSpace = 3521614606208 // 62^7
	codePrime = 1000000007
	alphabet  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// codeInverse undoes the multiplication: n = v * codeInverse mod 62^7.
var codeInverse = new(big.Int).ModInverse(big.NewInt(codePrime), big.NewInt(codeSpace)).Uint64()

// readStream reads one code a line and returns each as its number in base
// 62. A line that is not a code is an error: the stream is input.
func readStream(r io.Reader) ([]uint64, error) {
	var out []uint64
	s := bufio.NewScanner(r)
	for line := 1; s.Scan(); line++ {
		v, ok := parseCode(s.Text())
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not a seven-character code", line, s.Text())
		}
		out = append(out, v)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func parseCode(s string) (uint64, bool) {
	if len(s) != 7 {
		return 0, false
	}
	var v uint64
	for i := range len(s) {
		d := strings.IndexByte(alphabet, s[i])
		if d < 0 {
			return 0, false
		}
		v = v*62 + uint64(d)
	}
	return v, true
}

func codeString(v uint64) string {
	var b [7]byte
	for i := 6; i >= 0; i-- {
		b[i] = alphabet[v%62]
		v /= 62
	}
	return string(b[:])
}

// linkOf is the n whose code is v.
func linkOf(v uint64) uint64 {
	hi, lo := bits.Mul64(v, codeInverse)
	_, rem := bits.Div64(hi, lo, codeSpace) // hi < codeSpace: v and codeInverse are below 2^42
	return rem
}

// seedURL is the URL sql/seed.sql gives the link whose code is v.
func seedURL(v uint64) string {
	return "https://example.com/seed/" + strconv.FormatUint(linkOf(v), 10)
}

func countDistinct(stream []uint64) (distinct int, maxN uint64) {
	seen := make(map[uint64]struct{})
	for _, v := range stream {
		seen[v] = struct{}{}
		maxN = max(maxN, linkOf(v))
	}
	return len(seen), maxN
}

// parseBytes reads a size as LOCAL_CACHE_BYTES takes it: digits, then
// nothing, KiB, MiB or GiB.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("parse %q: want digits, then nothing, KiB, MiB or GiB", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, fmt.Errorf("parse %q: too large", s)
	}
	return n * mult, nil
}

func formatBytes(b int64) string {
	switch {
	case b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return strconv.FormatInt(b, 10)
}

// commit names the checkout the program runs in, and whether it has
// changes not committed, for the header.
func commit() string {
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (git rev-parse: " + err.Error() + ")"
	}
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	switch {
	case err != nil:
		return strings.TrimSpace(string(rev)) + " (dirty: unknown)"
	case len(status) > 0:
		return strings.TrimSpace(string(rev)) + " (dirty)"
	}
	return strings.TrimSpace(string(rev)) + " (clean)"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimLeft(name, " \t:"))
		}
	}
	return "unknown"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return "unknown"
}
