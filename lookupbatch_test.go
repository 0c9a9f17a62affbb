package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// sizesObserver remembers every value it observed, in order.
type sizesObserver struct {
	mu sync.Mutex
	v  []float64
}

func (o *sizesObserver) Observe(v float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.v = append(o.v, v)
}

func (o *sizesObserver) values() []float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.v)
}

// openLookupBatchStore opens a store whose lookups go in batches, with
// workers lookup workers. The tests that queue lookups behind held
// workers use one: with two, both let go at once could split the queue
// between them, and the batch the test waits for would be two.
func openLookupBatchStore(t *testing.T, pool poolConfig, batch, workers int, sizes observer) *pgStore {
	t.Helper()
	s, err := openPostgres(context.Background(), testDatabase(t), pool)
	if err != nil {
		t.Fatalf("openPostgres: %v", err)
	}
	if err := s.startLookupBatch(context.Background(), batch, workers, sizes); err != nil {
		t.Fatalf("startLookupBatch: %v", err)
	}
	closeOnCleanup(t, s)
	return s
}

// lockedLinks holds links locked (ACCESS EXCLUSIVE: lookups wait) and
// keeps every lookup worker waiting on the lock, each with a lookup of
// its own: a lookup made after it returns queues, and goes in the next
// batch, once unlock (or a cancelled query) lets a worker go.
type lockedLinks struct {
	t    *testing.T
	s    *pgStore
	lock *sql.Tx
	// held are the workers' own lookups, answered after the unlock.
	held []chan lookupResult
}

func lockLinks(t *testing.T, s *pgStore) *lockedLinks {
	t.Helper()
	lock, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(`LOCK TABLE links IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	l := &lockedLinks{t: t, s: s, lock: lock}
	t.Cleanup(func() { _ = lock.Rollback() }) // done already unless the test failed first
	for i := range s.batch.workers {
		l.held = append(l.held, l.look(context.Background(), fmt.Sprintf("held%03d", i)))
		waitUntil(t, fmt.Sprintf("%d lookup queries waiting on the lock", i+1), func() bool { return l.waiting() == i+1 })
	}
	return l
}

// waiting counts the lookup queries waiting on the lock.
func (l *lockedLinks) waiting() int {
	l.t.Helper()
	var n int
	if err := l.s.db.QueryRow(`SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		l.t.Fatal(err)
	}
	return n
}

// look starts a lookup of code; its result comes on the channel.
func (l *lockedLinks) look(ctx context.Context, code string) chan lookupResult {
	c := make(chan lookupResult, 1)
	go func() {
		t, err := l.s.Lookup(ctx, code)
		c <- lookupResult{t, err}
	}()
	return c
}

// queued waits until n lookups wait in the queue.
func (l *lockedLinks) queued(n int) {
	l.t.Helper()
	waitUntil(l.t, fmt.Sprintf("%d lookups queued", n), func() bool { return len(l.s.batch.queue) == n })
}

// cancel cancels the lookup queries waiting on the lock (an ERROR, 57014:
// pg_terminate_backend's FATAL would be database/sql's ErrBadConn, and the
// query sent again on a new connection).
func (l *lockedLinks) cancel() {
	l.t.Helper()
	if _, err := l.s.db.Exec(`SELECT pg_cancel_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lockedLinks) unlock() {
	l.t.Helper()
	if err := l.lock.Rollback(); err != nil {
		l.t.Fatal(err)
	}
}

// result waits for c, generously.
func result(t *testing.T, c chan lookupResult, what string) lookupResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30 s", what)
		return lookupResult{}
	}
}

// saveBatchLinks saves a link, a deleted one, an expired one and one with
// max_clicks.
func saveBatchLinks(t *testing.T, s *pgStore) {
	t.Helper()
	if _, err := s.db.Exec(`INSERT INTO links (code, url) VALUES ('bfound1', 'https://go.dev/found');
INSERT INTO links (code, url, deleted_at, version) VALUES ('bgone01', '', now(), 2);
INSERT INTO links (code, url, expires_at, redirect) VALUES ('bexpir1', 'https://go.dev/expired', '2001-02-03T04:05:06Z', 301);
INSERT INTO links (code, url, max_clicks) VALUES ('blimit1', 'https://go.dev/limited', 5)`); err != nil {
		t.Fatal(err)
	}
}

// TestLookupBatchAnswersEachItsOwn queues lookups of a link, a deleted
// link, an expired link, an unknown code, a link with max_clicks and the
// first link again behind busy
// workers, and checks that they went as one query and that each waiter
// got its own code's answer.
func TestLookupBatchAnswersEachItsOwn(t *testing.T) {
	for _, prepare := range []bool{true, false} {
		t.Run(fmt.Sprintf("prepare=%v", prepare), func(t *testing.T) {
			pool := generousPool()
			pool.prepare = prepare
			sizes := &sizesObserver{}
			s := openLookupBatchStore(t, pool, 8, 1, sizes)
			saveBatchLinks(t, s)
			l := lockLinks(t, s)
			codes := []string{"bfound1", "bgone01", "bexpir1", "nosuch1", "blimit1", "bfound1"}
			got := make([]chan lookupResult, len(codes))
			for i, code := range codes {
				got[i] = l.look(context.Background(), code)
			}
			l.queued(len(codes))
			l.unlock()
			for i, code := range codes {
				r := result(t, got[i], code)
				var want Target
				var wantErr error
				switch code {
				case "bfound1":
					want = Target{URL: "https://go.dev/found", Status: 302, Version: 1}
				case "bgone01":
					want = Target{Status: 302, Deleted: true, Version: 2}
				case "bexpir1":
					want = Target{URL: "https://go.dev/expired", Status: 301, ExpiresAt: time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC), Version: 1}
				case "blimit1":
					want = Target{URL: "https://go.dev/limited", Status: 302, Limited: true, Version: 1}
				default:
					wantErr = ErrNotFound
				}
				if !errors.Is(r.err, wantErr) || (wantErr == nil && r.err != nil) || r.t != want {
					t.Errorf("lookup %d (%s) = %+v, %v; want %+v, %v", i, code, r.t, r.err, want, wantErr)
				}
			}
			for i, c := range l.held {
				if r := result(t, c, "a held lookup"); !errors.Is(r.err, ErrNotFound) {
					t.Errorf("held lookup %d: %+v, %v; want ErrNotFound", i, r.t, r.err)
				}
			}
			if v := sizes.values(); !slices.Contains(v, float64(len(codes))) {
				t.Errorf("codes per query = %v, want one query of all %d queued", v, len(codes))
			}
		})
	}
}

// TestLookupBatchFailsEachWaiter makes a batch's query fail (cancelled
// while it waits on a lock): every waiter in it gets an error,
// and the next lookup is answered.
func TestLookupBatchFailsEachWaiter(t *testing.T) {
	sizes := &sizesObserver{}
	s := openLookupBatchStore(t, generousPool(), 8, 1, sizes)
	saveBatchLinks(t, s)
	l := lockLinks(t, s)
	codes := []string{"bfound1", "nosuch1", "bgone01"}
	got := make([]chan lookupResult, len(codes))
	for i, code := range codes {
		got[i] = l.look(context.Background(), code)
	}
	l.queued(len(codes))
	l.cancel() // the held lookups fail; a worker takes the queued ones
	for i, c := range l.held {
		if r := result(t, c, "a held lookup"); r.err == nil || errors.Is(r.err, ErrNotFound) {
			t.Errorf("held lookup %d, its query cancelled: %+v, %v; want an error", i, r.t, r.err)
		}
	}
	waitUntil(t, "the batch of three waiting on the lock", func() bool { return l.waiting() == 1 })
	l.cancel()
	for i, code := range codes {
		if r := result(t, got[i], code); r.err == nil || errors.Is(r.err, ErrNotFound) {
			t.Errorf("lookup %d (%s), its batch's query cancelled: %+v, %v; want an error", i, code, r.t, r.err)
		}
	}
	l.unlock()
	if r, err := s.Lookup(context.Background(), "bfound1"); err != nil || r.URL != "https://go.dev/found" {
		t.Errorf("lookup after the failed batch = %+v, %v; want the link", r, err)
	}
	if v := sizes.values(); !slices.Contains(v, float64(len(codes))) {
		t.Errorf("codes per query = %v, want one query of all %d queued", v, len(codes))
	}
}

// lateContext has a deadline already past, and is done only when the
// test says so: a lookup made with it queues (pgStore.Lookup's own
// timeout keeps it: a deadline earlier than its own), and its batch finds
// it past its deadline, with no wait on the clock.
type lateContext struct {
	context.Context
	deadline time.Time
	done     chan struct{}
	once     sync.Once
}

func newLateContext() *lateContext {
	return &lateContext{Context: context.Background(), deadline: time.Now(), done: make(chan struct{})}
}

func (c *lateContext) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *lateContext) Done() <-chan struct{}       { return c.done }
func (c *lateContext) end()                        { c.once.Do(func() { close(c.done) }) }
func (c *lateContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestLookupBatchWaiterGivesUp cancels one waiter of a queued batch, and
// lets another's deadline pass: each returns its context's error at
// once, and the others are answered all the same. The one whose deadline
// passed is not asked for: the query holds the rest. Each is counted in
// shortener_db_lookups_total as it was answered.
func TestLookupBatchWaiterGivesUp(t *testing.T) {
	sizes := &sizesObserver{}
	s := openLookupBatchStore(t, generousPool(), 8, 1, sizes)
	var found, notFound, failed testCount
	s.lookups = dbLookups{found: &found, notFound: &notFound, err: &failed}
	saveBatchLinks(t, s)
	l := lockLinks(t, s)
	cancelled, cancel := context.WithCancel(context.Background())
	late := newLateContext()
	a := l.look(context.Background(), "bfound1")
	b := l.look(cancelled, "bexpir1")
	c := l.look(late, "bgone01")
	d := l.look(context.Background(), "nosuch1")
	l.queued(4)
	cancel()
	late.end()
	if r := result(t, b, "the cancelled lookup"); !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled lookup: %+v, %v; want context.Canceled", r.t, r.err)
	}
	if r := result(t, c, "the lookup past its deadline"); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("lookup past its deadline: %+v, %v; want context.DeadlineExceeded", r.t, r.err)
	}
	l.unlock()
	if r := result(t, a, "bfound1"); r.err != nil || r.t.URL != "https://go.dev/found" {
		t.Errorf("lookup beside a cancelled one = %+v, %v; want the link", r.t, r.err)
	}
	if r := result(t, d, "nosuch1"); !errors.Is(r.err, ErrNotFound) {
		t.Errorf("unknown code beside a cancelled one = %+v, %v; want ErrNotFound", r.t, r.err)
	}
	if v := sizes.values(); !slices.Contains(v, 3) {
		t.Errorf("codes per query = %v, want one of 3 (the cancelled one asked for, the one past its deadline not)", v)
	}
	// Counted as each waiter got it: the held lookup and d not found, a
	// found, b and c errors (they gave up), as before step 37.
	if found.get() != 1 || notFound.get() != 2 || failed.get() != 2 {
		t.Errorf("db lookups counted found %d, not found %d, error %d; want 1, 2, 2", found.get(), notFound.get(), failed.get())
	}
}

// TestLookupAloneGoesAlone makes lookups one after another: each is its
// own query of one code, sent at once, with no wait for company.
func TestLookupAloneGoesAlone(t *testing.T) {
	sizes := &sizesObserver{}
	s := openLookupBatchStore(t, generousPool(), 8, defaultLookupWorkers, sizes)
	saveBatchLinks(t, s)
	for range 5 {
		if r, err := s.Lookup(context.Background(), "bfound1"); err != nil || r.URL != "https://go.dev/found" {
			t.Fatalf("lookup = %+v, %v", r, err)
		}
	}
	if v := sizes.values(); !slices.Equal(v, []float64{1, 1, 1, 1, 1}) {
		t.Errorf("codes per query = %v, want five queries of one", v)
	}
}

// TestLookupBatchClosed: a store closed answers what was queued, and
// refuses lookups after.
func TestLookupBatchClosed(t *testing.T) {
	s, err := openPostgres(context.Background(), testDatabase(t), generousPool())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.startLookupBatch(context.Background(), 8, 1, nil); err != nil {
		s.Close() //nolint:errcheck // the start error is the one worth reporting
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	closing := false
	t.Cleanup(func() { // closed by the test, or here if it stopped first
		if !closing {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	saveBatchLinks(t, s)
	l := lockLinks(t, s)
	a := l.look(context.Background(), "bfound1")
	l.queued(1)
	closing = true
	go func() { closed <- s.Close() }()
	waitUntil(t, "close to begin", func() bool {
		select {
		case <-s.batch.stop:
			return true
		default:
			return false
		}
	})
	if _, err := s.batch.lookup(context.Background(), "bfound1"); !errors.Is(err, errLookupBatchClosed) {
		t.Errorf("lookup after close began: %v, want errLookupBatchClosed", err)
	}
	l.unlock()
	if r := result(t, a, "the queued lookup"); r.err != nil || r.t.URL != "https://go.dev/found" {
		t.Errorf("lookup queued before close = %+v, %v; want the link", r.t, r.err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("close did not return within 30 s of the lock's end")
	}
}

// TestLookupsDoNotWaitForWrites: with every connection of the request
// pool taken (as on three hosts while the synchronous standby was gone:
// each write held its connection until its deadline), a lookup still
// answers, on the lookups' pool (pgStore.reads, step 42). Before, it
// waited for a connection of the request pool until its deadline, and
// its redirect answered 503 (docs/42).
func TestLookupsDoNotWaitForWrites(t *testing.T) {
	pool := testPool
	pool.maxOpen, pool.maxIdle = 2, 2
	s := openLookupBatchStore(t, pool, defaultLookupBatch, defaultLookupWorkers, nil)
	saveBatchLinks(t, s)
	ctx := context.Background()
	for range pool.maxOpen {
		c, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	if st := s.db.Stats(); st.InUse != pool.maxOpen {
		t.Fatalf("the request pool has %d of %d connections in use; the test needs them all taken", st.InUse, pool.maxOpen)
	}
	tgt, err := s.Lookup(ctx, "bfound1")
	if err != nil {
		t.Fatalf("lookup with the request pool full: %v (it must not need that pool)", err)
	}
	if tgt.URL != "https://go.dev/found" {
		t.Errorf("lookup = %+v, want https://go.dev/found", tgt)
	}
	if st := s.db.Stats(); st.WaitCount != 0 {
		t.Errorf("the request pool was waited on %d times; a lookup must not wait there", st.WaitCount)
	}
	if s.reads == nil || s.reads.Stats().MaxOpenConnections != defaultLookupWorkers {
		t.Errorf("the lookups' pool is %v; want one of %d connections (LOOKUP_WORKERS)", s.reads, defaultLookupWorkers)
	}
}
