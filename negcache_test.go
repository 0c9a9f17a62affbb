package main

import (
	"context"
	"errors"
	"testing"
	"time"
)

// newTestNegCache puts a negative cache of size entries, on a clock the
// test moves, in front of a Postgres store whose "not found" queries it
// counts.
func newTestNegCache(t *testing.T, size int) (*negCache, *pgStore, *testCount, *testClock, *testCount) {
	t.Helper()
	pg := openTestStore(t)
	queries, hits := &testCount{}, &testCount{}
	pg.lookups = dbLookups{found: noCount{}, notFound: queries, err: noCount{}}
	n := newNegCache(pg, size, defaultNegCacheTTL, true, hits)
	clock := newTestClock()
	n.now = clock.now
	return n, pg, queries, clock, hits
}

func wantNotFound(t *testing.T, s Store, code string) {
	t.Helper()
	if url, err := s.Lookup(context.Background(), code); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup(%s) = %q, %v; want ErrNotFound", code, url.URL, err)
	}
}

// TestNegCacheRemembersNotFound: a second lookup of an unknown code within
// the TTL does not reach Postgres; one after it does.
func TestNegCacheRemembersNotFound(t *testing.T) {
	n, _, queries, clock, hits := newTestNegCache(t, 100)
	code := newCode()
	wantNotFound(t, n, code)
	wantNotFound(t, n, code)
	if queries.get() != 1 || hits.get() != 1 {
		t.Errorf("two lookups within the TTL: %d queries, %d hits; want 1, 1", queries.get(), hits.get())
	}
	clock.add(defaultNegCacheTTL - time.Nanosecond)
	wantNotFound(t, n, code)
	if queries.get() != 1 {
		t.Errorf("a lookup just within the TTL made a query")
	}
	clock.add(time.Nanosecond)
	wantNotFound(t, n, code)
	if queries.get() != 2 {
		t.Errorf("a lookup at the TTL: %d queries, want 2", queries.get())
	}
	if n.len() != 1 {
		t.Errorf("%d entries, want 1", n.len())
	}
}

// TestNegCacheCreateRemovesEntry: a create of a code the cache holds as
// unknown (through the feed, as run wires it; here with no Redis) makes
// the next lookup find it.
func TestNegCacheCreateRemovesEntry(t *testing.T) {
	n, _, queries, _, _ := newTestNegCache(t, 100)
	feed := newCodeFeed(nil, nil, "", defaultBloomAckTimeout, nil, n, (*metrics)(nil).bloomCounts(), discardLog)
	store := &announcingStore{Store: n, feed: feed}
	code := newCode()
	wantNotFound(t, store, code)
	if err := store.Save(context.Background(), code, NewLink{URL: "https://go.dev/now"}); err != nil {
		t.Fatal(err)
	}
	if url, err := store.Lookup(context.Background(), code); err != nil || url.URL != "https://go.dev/now" {
		t.Errorf("after the create: Lookup = %q, %v; want the URL", url.URL, err)
	}
	if queries.get() != 1 {
		t.Errorf("%d not-found queries, want 1", queries.get())
	}
}

// blockingStore answers from its store, then waits for release before it
// returns: a lookup caught between its query and its answer.
type blockingStore struct {
	Store
	answered, release chan struct{}
}

func (b *blockingStore) Lookup(ctx context.Context, code string) (Target, error) {
	url, err := b.Store.Lookup(ctx, code)
	b.answered <- struct{}{}
	<-b.release
	return url, err
}

// TestNegCacheLookupRacingCreate: a lookup that read "not found" before a
// create, and returns after the create removed the code, must not store
// its stale answer.
func TestNegCacheLookupRacingCreate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		between func(n *negCache, code string)
	}{
		{"the code created", func(n *negCache, code string) { n.forget(code) }},
		{"more creates than the ring holds", func(n *negCache, code string) {
			for range negRecent + 1 {
				n.forget(newCode())
			}
		}},
		{"the feed down and up again", func(n *negCache, code string) { n.setUp(false); n.setUp(true) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mem := &countingStore{Store: newMemoryStore()}
			bs := &blockingStore{Store: mem, answered: make(chan struct{}), release: make(chan struct{})}
			n := newNegCache(bs, 100, defaultNegCacheTTL, true, noCount{})
			code := newCode()
			done := make(chan error, 1)
			go func() {
				_, err := n.Lookup(context.Background(), code)
				done <- err
			}()
			<-bs.answered // it has read "not found"
			tt.between(n, code)
			close(bs.release)
			if err := <-done; !errors.Is(err, ErrNotFound) {
				t.Fatalf("racing lookup = %v, want ErrNotFound", err)
			}
			if n.len() != 0 {
				t.Fatalf("the stale answer was stored: %d entries", n.len())
			}
			// And an unrelated lookup afterwards is stored as usual.
			go func() { <-bs.answered }()
			wantNotFound(t, n, newCode())
			if n.len() != 1 {
				t.Errorf("%d entries after a lookup with no create, want 1", n.len())
			}
		})
	}
}

// TestNegCacheBounded: past its size, the oldest entries go first.
func TestNegCacheBounded(t *testing.T) {
	mem := &countingStore{Store: newMemoryStore()}
	n := newNegCache(mem, 3, defaultNegCacheTTL, true, noCount{})
	codes := make([]string, 200)
	for i := range codes {
		codes[i] = newCode()
		wantNotFound(t, n, codes[i])
		if n.len() > 3 {
			t.Fatalf("%d entries, want 3 at most", n.len())
		}
	}
	if got := len(n.queue) - n.head; got > 3 {
		t.Errorf("queue holds %d entries, want 3 at most", got)
	}
	before := mem.lookups.Load()
	wantNotFound(t, n, codes[len(codes)-1]) // the newest: cached
	wantNotFound(t, n, codes[0])            // the oldest: gone
	if got := mem.lookups.Load() - before; got != 1 {
		t.Errorf("%d lookups reached the store, want 1 (the oldest code's)", got)
	}
}

// errStore fails every lookup.
type errStore struct{ Store }

func (errStore) Lookup(context.Context, string) (Target, error) {
	return Target{}, errors.New("postgres is down")
}

// TestNegCacheKeepsOnlyNotFound: an error says nothing of the code, and
// is not remembered; and while the feed is down, nothing is.
func TestNegCacheKeepsOnlyNotFound(t *testing.T) {
	n := newNegCache(errStore{}, 100, defaultNegCacheTTL, true, noCount{})
	if _, err := n.Lookup(context.Background(), newCode()); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup = %v, want the store's error", err)
	}
	if n.len() != 0 {
		t.Errorf("an error was remembered: %d entries", n.len())
	}

	mem := &countingStore{Store: newMemoryStore()}
	n = newNegCache(mem, 100, defaultNegCacheTTL, true, noCount{})
	code := newCode()
	wantNotFound(t, n, code)
	n.setUp(false)
	if n.len() != 0 {
		t.Errorf("down: %d entries, want none", n.len())
	}
	wantNotFound(t, n, code)
	wantNotFound(t, n, code)
	if n.len() != 0 || mem.lookups.Load() != 3 {
		t.Errorf("down: %d entries, %d lookups reached the store; want 0, 3", n.len(), mem.lookups.Load())
	}
}
