package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// insertBehind stores a link straight in Postgres, as a create on another
// instance whose announcement never arrived: the filter is not told.
func insertBehind(t *testing.T, pg *pgStore, code string) {
	t.Helper()
	if _, err := pg.db.Exec(`INSERT INTO links (code, url) VALUES ($1, $2)`, code, "https://go.dev/"+code); err != nil {
		t.Fatal(err)
	}
}

// has reports whether the filter holds code.
func (tb *testBloom) has(code string) bool {
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	return tb.filter != nil && tb.filter.TestString(code)
}

// unknownCode is a new code the filter does not hold: not one of the
// codes (one in a hundred) it would say "maybe" to by chance, which a
// sweep could not count missed.
func (tb *testBloom) unknownCode() string {
	for {
		if c := newCode(); !tb.has(c) {
			return c
		}
	}
}

func (tb *testBloom) sweepBound() time.Time {
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	return tb.sweptTo
}

// sweepCounts reads the sweep's counters: sweeps ok, failed, codes read,
// codes missed.
func (tb *testBloom) sweepCounts() [4]float64 {
	return [4]float64{
		testutil.ToFloat64(tb.m.bloom.sweeps.WithLabelValues("ok")),
		testutil.ToFloat64(tb.m.bloom.sweeps.WithLabelValues("failed")),
		testutil.ToFloat64(tb.m.bloom.sweepCodes),
		testutil.ToFloat64(tb.m.bloom.sweepMissed),
	}
}

// TestBloomSweepFindsWhatTheFeedMissed: a link created behind the app's
// back (no feed told this instance), and remembered as unknown by the
// negative cache before it existed, is answered 404 by the trusted
// filter; after one sweep it is found, and at the next it is counted
// missed, since the feed never brought it. Not counted: a link the
// filter heard of before the sweep, one whose announcement came after
// the sweep found it (it was on its way), and one found while the filter
// was not trusted anyway.
func TestBloomSweepFindsWhatTheFeedMissed(t *testing.T) {
	pg := openTestStore(t)
	// An hour: the entry must leave because the sweep drops it, not
	// because it expired.
	neg := newNegCache(pg, 100, time.Hour, true, noCount{})
	m := newMetrics(prometheus.NewRegistry())
	tb := &testBloom{bloomStore: newBloomStore(neg, pg.bg, defaultBloomFPRate, true, noSweep, m.bloomCounts(), discardLog), pg: pg, m: m}
	tb.neg = neg
	tb.start(t)
	waitTrusted(t, tb.bloomStore, true)
	ctx := context.Background()

	missed := tb.unknownCode()
	if _, err := neg.Lookup(ctx, missed); !errors.Is(err, ErrNotFound) {
		t.Fatalf("negative cache: Lookup(missed) = %v, want ErrNotFound", err)
	}
	insertBehind(t, pg, missed)
	onItsWay := tb.unknownCode()
	insertBehind(t, pg, onItsWay)
	told := newCode()
	tb.save(t, told)
	if _, err := tb.Lookup(ctx, missed); !errors.Is(err, ErrNotFound) || tb.result("no") != 1 {
		t.Fatalf("before the sweep: Lookup(missed) = %v with %v no; want ErrNotFound from the filter (no feed told it)", err, tb.result("no"))
	}
	if err := tb.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if url, err := tb.Lookup(ctx, missed); err != nil || url.URL != "https://go.dev/"+missed {
		t.Errorf("after the sweep: Lookup(missed) = %q, %v; want its URL", url.URL, err)
	}
	if got, want := tb.sweepCounts(), [4]float64{1, 0, 3, 0}; got != want {
		t.Errorf("first sweep: sweeps ok, failed, codes read, missed = %v, want %v (missed: not yet)", got, want)
	}
	tb.added(onItsWay) // its announcement, late
	if err := tb.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := tb.sweepCounts(), [4]float64{2, 0, 6, 1}; got != want {
		t.Errorf("second sweep: sweeps ok, failed, codes read, missed = %v, want %v", got, want)
	}

	// With the feed down, the filter is not trusted: a code the sweep
	// finds is added, but was no 404, and is not counted missed.
	tb.feedDown(time.Now())
	whileDown := newCode()
	insertBehind(t, pg, whileDown)
	for range 2 {
		if err := tb.sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !tb.has(whileDown) {
		t.Errorf("swept while untrusted: the filter does not hold %s", whileDown)
	}
	if got := tb.sweepCounts(); got[0] != 4 || got[3] != 1 {
		t.Errorf("sweeps ok, failed, codes read, missed = %v, want 4 ok and still 1 missed", got)
	}
}

// TestBloomFailedSweepKeepsItsBound: a sweep that fails (a cancelled
// context; a query that fails after the sweep has read Postgres's clock)
// does not move the moment the next one reads from. With no margin, a
// bound moved to a failed sweep's start would skip a code committed
// before it; the next sweep finds it.
func TestBloomFailedSweepKeepsItsBound(t *testing.T) {
	tb := newTestBloom(t, true, func(tb *testBloom) { tb.sweepMargin = 0 })
	waitTrusted(t, tb.bloomStore, true)
	bound := tb.sweepBound()
	if bound.IsZero() {
		t.Fatal("the build set no bound for the first sweep")
	}
	code := tb.unknownCode()
	insertBehind(t, tb.pg, code)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tb.sweep(cancelled); err == nil {
		t.Error("sweep with a cancelled context: no error")
	}
	if _, err := tb.pg.db.Exec(`ALTER TABLE links RENAME TO links_away`); err != nil {
		t.Fatal(err)
	}
	err := tb.sweep(context.Background())
	if _, rerr := tb.pg.db.Exec(`ALTER TABLE links_away RENAME TO links`); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Error("sweep with no links table: no error")
	}
	if got := tb.sweepBound(); !got.Equal(bound) {
		t.Fatalf("after two failed sweeps the bound is %v, want %v, where it was", got, bound)
	}
	if got := tb.sweepCounts(); got[0] != 0 || got[1] != 2 {
		t.Errorf("sweeps ok, failed = %v, %v; want 0, 2", got[0], got[1])
	}

	if err := tb.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !tb.has(code) {
		t.Errorf("the sweep after the failed ones does not find %s", code)
	}
	if got := tb.sweepBound(); !got.After(bound) {
		t.Errorf("after a sweep the bound is %v, want past %v", got, bound)
	}
	if got, want := tb.sweepCounts(), [4]float64{1, 2, 1, 0}; got != want {
		t.Errorf("sweeps ok, failed, codes read, missed = %v, want %v", got, want)
	}
}

// TestBloomSweepsOnEachTick: run sweeps at each tick of its ticker (here
// a channel the test sends on), logs a failed sweep, and the next tick
// finds what the failed one would have.
func TestBloomSweepsOnEachTick(t *testing.T) {
	ticks := make(chan time.Time)
	logs := &syncBuffer{}
	tb := newTestBloom(t, true, func(tb *testBloom) {
		tb.sweepTicks = ticks
		tb.log = newLogger("text", logs)
	})
	waitTrusted(t, tb.bloomStore, true)
	tick := func() {
		t.Helper()
		select {
		case ticks <- time.Now(): // taken once the last sweep has ended
		case <-time.After(30 * time.Second):
			t.Fatal("run did not take a tick in 30 s")
		}
	}
	code := newCode()
	insertBehind(t, tb.pg, code)

	if _, err := tb.pg.db.Exec(`ALTER TABLE links RENAME TO links_away`); err != nil {
		t.Fatal(err)
	}
	tick()
	waitUntil(t, "a failed sweep to be logged", func() bool { return strings.Contains(logs.String(), "sweep failed") })
	if _, err := tb.pg.db.Exec(`ALTER TABLE links_away RENAME TO links`); err != nil {
		t.Fatal(err)
	}
	if got := tb.sweepCounts(); got[0] != 0 || got[1] != 1 {
		t.Errorf("sweeps ok, failed = %v, %v; want 0, 1", got[0], got[1])
	}
	tick()
	waitUntil(t, "a sweep", func() bool { return tb.sweepCounts()[0] == 1 })
	if !tb.has(code) {
		t.Errorf("after a tick the filter does not hold %s", code)
	}
	if _, err := tb.Lookup(context.Background(), code); err != nil {
		t.Errorf("Lookup(%s) = %v, want its URL", code, err)
	}
}
