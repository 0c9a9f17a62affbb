package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// flightCallers is how many requests miss one cold code at once.
const flightCallers = 50

// gatedStore holds every lookup until open is closed, as a slow backend
// holds it, and gives up on the context it is handed as a real one does.
// It stands between the flight and the real miss path, so that a test
// can have every caller join one flight before that flight can end.
type gatedStore struct {
	Store
	open chan struct{}
}

func (g *gatedStore) Lookup(ctx context.Context, code string) (Target, error) {
	select {
	case <-g.open:
		return g.Store.Lookup(ctx, code)
	case <-ctx.Done():
		return Target{}, ctx.Err()
	}
}

// flightRig is a flight in front of a gate in front of the real miss path:
// a cache on a real Redis in front of a real Postgres, its queries counted
// in a registry of the test's own.
type flightRig struct {
	flight *flightStore
	gate   *gatedStore
	pg     *pgStore
	m      *metrics
	redis  *testResults
	look   *redis.Client
	prefix string
	joined chan struct{} // one value per caller in a flight
}

func newFlightRig(t *testing.T) *flightRig {
	t.Helper()
	r := &flightRig{pg: openTestStore(t), m: newMetrics(prometheus.NewRegistry()), redis: &testResults{}}
	r.pg.lookups = r.m.dbLookups()
	opts, prefix := testRedis(t)
	cache, look := newTestCache(t, r.pg, opts, prefix, discardLog)
	cache.counts = r.redis.results()
	r.look, r.prefix = look, prefix
	r.gate = &gatedStore{Store: cache, open: make(chan struct{})}
	r.flight = newFlightStore(r.gate, r.m.coalescedCounter(), nil)
	r.joined = make(chan struct{}, 4*flightCallers) // never blocks a caller
	r.flight.joined = func() { r.joined <- struct{}{} }
	return r
}

type flightAnswer struct {
	url string
	err error
}

// lookup starts a lookup of code on ctx and returns where its answer
// will come.
func (r *flightRig) lookup(ctx context.Context, code string) <-chan flightAnswer {
	ch := make(chan flightAnswer, 1)
	go func() {
		t, err := r.flight.Lookup(ctx, code)
		ch <- flightAnswer{t.URL, err}
	}()
	return ch
}

// lookups starts n lookups of code and returns where their answers come.
func (r *flightRig) lookups(n int, code string) []<-chan flightAnswer {
	chans := make([]<-chan flightAnswer, n)
	for i := range chans {
		chans[i] = r.lookup(context.Background(), code)
	}
	return chans
}

// waitJoined waits until n more callers are in a flight. The bound is
// generous: it only ends a test that would otherwise hang.
func (r *flightRig) waitJoined(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-r.joined:
		case <-timeout:
			t.Fatalf("%d of %d callers joined a flight in 30 s", i, n)
		}
	}
}

// answer waits for one answer, with the same generous bound.
func answer(t *testing.T, ch <-chan flightAnswer) flightAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no answer in 30 s")
		return flightAnswer{}
	}
}

// noAnswerYet fails if any of chans has answered: while the gate is
// shut, nobody's lookup can have ended.
func noAnswerYet(t *testing.T, chans ...<-chan flightAnswer) {
	t.Helper()
	for i, ch := range chans {
		select {
		case a := <-ch:
			t.Fatalf("caller %d answered %q, %v while the lookup was held", i, a.url, a.err)
		default:
		}
	}
}

// queries returns the Postgres lookup queries counted with result.
func (r *flightRig) queries(result string) float64 {
	return testutil.ToFloat64(r.m.lookups.WithLabelValues(result))
}

// checkCounts compares the queries by result and the coalesced callers
// with what the test expects.
func (r *flightRig) checkCounts(t *testing.T, found, notFound, failed, coalesced float64) {
	t.Helper()
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{`db_lookups_total{result="found"}`, r.queries("found"), found},
		{`db_lookups_total{result="not_found"}`, r.queries("not_found"), notFound},
		{`db_lookups_total{result="error"}`, r.queries("error"), failed},
		{"lookups_coalesced_total", testutil.ToFloat64(r.m.coalesced), coalesced},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestFlightCoalescesConcurrentMisses: fifty callers miss one cold code at
// once, all in one flight before it may end; Redis is asked once, Postgres
// once, and every caller gets the answer. A not-found is an answer like a
// URL, shared the same way, and not remembered: the next lookup of an
// unknown code asks again, while a found link is in Redis by then.
func TestFlightCoalescesConcurrentMisses(t *testing.T) {
	for _, tt := range []struct {
		name string
		save bool
	}{{"link", true}, {"unknown code", false}} {
		t.Run(tt.name, func(t *testing.T) {
			r := newFlightRig(t)
			ctx := context.Background()
			const code, url = "hotLnk1", "https://go.dev/hot"
			if tt.save {
				if err := r.pg.Save(ctx, code, NewLink{URL: url}); err != nil {
					t.Fatal(err)
				}
			}
			chans := r.lookups(flightCallers, code)
			r.waitJoined(t, flightCallers)
			noAnswerYet(t, chans...)
			close(r.gate.open)
			for i, ch := range chans {
				a := answer(t, ch)
				switch {
				case tt.save && (a.err != nil || a.url != url):
					t.Errorf("caller %d: %q, %v; want %s", i, a.url, a.err, url)
				case !tt.save && !errors.Is(a.err, ErrNotFound):
					t.Errorf("caller %d: %q, %v; want ErrNotFound", i, a.url, a.err)
				}
			}
			if tt.save {
				r.checkCounts(t, 1, 0, 0, flightCallers-1)
			} else {
				r.checkCounts(t, 0, 1, 0, flightCallers-1)
			}
			if got := r.redis.String(); got != "hit 0, miss 1, error 0, skipped 0, refused 0" {
				t.Errorf("redis: %s; want one miss, and nothing else", got)
			}

			// The flight is over; the next lookup is a new one.
			a := answer(t, r.lookup(ctx, code))
			if tt.save {
				if a.err != nil || a.url != url {
					t.Errorf("lookup after the flight: %q, %v; want %s", a.url, a.err, url)
				}
				r.checkCounts(t, 1, 0, 0, flightCallers-1) // from Redis
			} else {
				if !errors.Is(a.err, ErrNotFound) {
					t.Errorf("lookup after the flight: %q, %v; want ErrNotFound", a.url, a.err)
				}
				r.checkCounts(t, 0, 2, 0, flightCallers-1)
			}
		})
	}
}

// TestFlightWaiterLeaves: a caller waiting on another's lookup whose own
// request is cancelled returns at once, with its context's error, while
// the lookup is still held; the others get the answer.
func TestFlightWaiterLeaves(t *testing.T) {
	r := newFlightRig(t)
	const code, url = "leave01", "https://go.dev/leave"
	if err := r.pg.Save(context.Background(), code, NewLink{URL: url}); err != nil {
		t.Fatal(err)
	}
	first := r.lookup(context.Background(), code)
	r.waitJoined(t, 1) // the first in: the one whose lookup runs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaving := r.lookup(ctx, code)
	r.waitJoined(t, 1)
	others := r.lookups(flightCallers-2, code)
	r.waitJoined(t, flightCallers-2)

	cancel()
	if a := answer(t, leaving); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled waiter: %q, %v; want context.Canceled", a.url, a.err)
	}
	noAnswerYet(t, append(others, first)...)
	close(r.gate.open)
	for i, ch := range append(others, first) {
		if a := answer(t, ch); a.err != nil || a.url != url {
			t.Errorf("caller %d: %q, %v; want %s", i, a.url, a.err, url)
		}
	}
	r.checkCounts(t, 1, 0, 0, flightCallers-2)
}

// TestFlightFirstCallerLeaves: the caller whose lookup runs hangs up
// while it is held. It returns at once; the lookup goes on, detached from
// its request, and the callers waiting on it get the link.
func TestFlightFirstCallerLeaves(t *testing.T) {
	r := newFlightRig(t)
	const code, url = "leave02", "https://go.dev/first"
	if err := r.pg.Save(context.Background(), code, NewLink{URL: url}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := r.lookup(ctx, code)
	r.waitJoined(t, 1)
	others := r.lookups(flightCallers-1, code)
	r.waitJoined(t, flightCallers-1)

	cancel()
	if a := answer(t, first); !errors.Is(a.err, context.Canceled) {
		t.Errorf("first caller, cancelled: %q, %v; want context.Canceled", a.url, a.err)
	}
	noAnswerYet(t, others...)
	close(r.gate.open)
	for i, ch := range others {
		if a := answer(t, ch); a.err != nil || a.url != url {
			t.Errorf("caller %d: %q, %v; want %s", i, a.url, a.err, url)
		}
	}
	r.checkCounts(t, 1, 0, 0, flightCallers-1)
}

// TestFlightErrorIsNotRemembered: Postgres fails the one query (the table
// is renamed under it, a real error from a real server); every caller of
// that flight gets the error, none a not-found, nothing is cached, and the
// next lookup, once Postgres answers again, queries again.
func TestFlightErrorIsNotRemembered(t *testing.T) {
	r := newFlightRig(t)
	ctx := context.Background()
	const code, url = "broken1", "https://go.dev/broken"
	if err := r.pg.Save(ctx, code, NewLink{URL: url}); err != nil {
		t.Fatal(err)
	}
	chans := r.lookups(flightCallers, code)
	r.waitJoined(t, flightCallers)
	if _, err := r.pg.db.ExecContext(ctx, `ALTER TABLE links RENAME TO links_away`); err != nil {
		t.Fatal(err)
	}
	close(r.gate.open)
	for i, ch := range chans {
		if a := answer(t, ch); a.err == nil || errors.Is(a.err, ErrNotFound) {
			t.Errorf("caller %d with the table gone: %q, %v; want an error that is not ErrNotFound", i, a.url, a.err)
		}
	}
	r.checkCounts(t, 0, 0, 1, flightCallers-1)
	if n := r.look.Exists(ctx, r.prefix+code).Val(); n != 0 {
		t.Errorf("after a failed lookup, the code is in Redis")
	}

	if _, err := r.pg.db.ExecContext(ctx, `ALTER TABLE links_away RENAME TO links`); err != nil {
		t.Fatal(err)
	}
	if a := answer(t, r.lookup(ctx, code)); a.err != nil || a.url != url {
		t.Errorf("lookup after Postgres is back: %q, %v; want %s", a.url, a.err, url)
	}
	r.checkCounts(t, 1, 0, 1, flightCallers-1)
}
