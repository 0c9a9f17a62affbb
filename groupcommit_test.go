package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxObserver remembers the largest value it observed.
type maxObserver struct {
	mu  sync.Mutex
	max float64
	n   int
}

func (o *maxObserver) Observe(v float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	o.max = max(o.max, v)
}

func openTestStoreOn(t *testing.T, dsn string) *pgStore {
	t.Helper()
	s, err := openPostgres(context.Background(), dsn, testPool)
	if err != nil {
		t.Fatalf("openPostgres: %v", err)
	}
	closeOnCleanup(t, s)
	return s
}

// generousPool is testPool with deadlines far above what any call here
// takes on a slow, busy machine, for tests that do not test a deadline.
func generousPool() poolConfig {
	pool := testPool
	pool.timeout, pool.replyTimeout = 30*time.Second, 35*time.Second
	return pool
}

func openGroupCommitStore(t *testing.T, dsn string, pool poolConfig, batch int, sizes observer) *pgStore {
	t.Helper()
	s, err := openPostgres(context.Background(), dsn, pool)
	if err != nil {
		t.Fatalf("openPostgres: %v", err)
	}
	if err := s.startGroupCommit(context.Background(), batch, sizes); err != nil {
		t.Fatalf("startGroupCommit: %v", err)
	}
	closeOnCleanup(t, s)
	return s
}

// TestGroupCommitBatches saves many links at once and checks that they went
// in batches of more than one, and that every one acknowledged is there.
func TestGroupCommitBatches(t *testing.T) {
	for _, prepare := range []bool{true, false} {
		t.Run(fmt.Sprintf("prepare=%v", prepare), func(t *testing.T) {
			pool := generousPool()
			pool.prepare = prepare
			sizes := &maxObserver{}
			s := openGroupCommitStore(t, testDatabase(t), pool, 16, sizes)
			const n = 300
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					errs[i] = s.Save(context.Background(), fmt.Sprintf("gc%05d", i), NewLink{URL: fmt.Sprintf("https://go.dev/%d", i)})
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("save %d: %v", i, err)
				}
			}
			if got := countLinks(t, s); got != n {
				t.Errorf("links = %d, want %d", got, n)
			}
			if sizes.max < 2 || sizes.max > 16 {
				t.Errorf("largest batch = %v over %d batches, want 2 to 16 (CREATE_BATCH)", sizes.max, sizes.n)
			}
			for _, i := range []int{0, n / 2, n - 1} {
				if got, err := s.Lookup(context.Background(), fmt.Sprintf("gc%05d", i)); err != nil || got.URL != fmt.Sprintf("https://go.dev/%d", i) {
					t.Errorf("lookup %d = %q, %v", i, got.URL, err)
				}
			}
		})
	}
}

// TestGroupCommitCodeTaken checks the two ways a code can be taken: by a
// link saved before, and by another create in the same batch.
func TestGroupCommitCodeTaken(t *testing.T) {
	s := openGroupCommitStore(t, testDatabase(t), generousPool(), 64, nil)
	ctx := context.Background()
	if err := s.Save(ctx, "taken01", NewLink{URL: "https://go.dev/"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "taken01", NewLink{URL: "https://example.com/"}); !errors.Is(err, ErrCodeTaken) {
		t.Errorf("save of a taken code: %v, want ErrCodeTaken", err)
	}
	// Many creates of one new code at once, most in the same batch:
	// exactly one wins.
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.Save(ctx, "twins01", NewLink{URL: fmt.Sprintf("https://go.dev/%d", i)}) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrCodeTaken):
			t.Errorf("save: %v, want nil or ErrCodeTaken", err)
		}
	}
	if won != 1 {
		t.Errorf("%d creates of one code succeeded, want 1", won)
	}
	if got := countLinks(t, s); got != 2 {
		t.Errorf("links = %d, want 2", got)
	}
}

// TestGroupCommitAcknowledgesOnlyCommitted saves links while the
// connections to Postgres are cut, again and again, mid-batch: a save may
// fail, but a save that returned nil must be in the database, read
// through a connection of its own. The cuts follow progress (one after
// every cutEvery acknowledged saves), not the clock, and the test runs
// until it has seen both outcomes enough times, so that it holds on a
// machine of any speed.
func TestGroupCommitAcknowledgesOnlyCommitted(t *testing.T) {
	dsn := testDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	s, err := openPostgres(context.Background(), u.String(), generousPool())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Its connections were cut under it: closing its statements on
		// them may fail, and says nothing about the test.
		if err := s.Close(); err != nil {
			t.Logf("close store after the cuts: %v", err)
		}
	})
	if err := s.startGroupCommit(context.Background(), 32, nil); err != nil {
		t.Fatal(err)
	}
	direct := openTestStoreOn(t, dsn)

	const (
		clients    = 20
		cutEvery   = 25     // acknowledged saves between two cuts
		wantAcked  = 200    // stop once this many saves were acknowledged
		wantFailed = 10     // and this many failed
		maxSaves   = 20_000 // or give up: the cuts do not make saves fail
	)
	var (
		next, acked, failed atomic.Int64
		mu                  sync.Mutex
		ackedCodes          []string
		firstErr            error
		stopOnce            sync.Once
	)
	stop := make(chan struct{})
	cut := make(chan struct{}, 1)
	var cuts sync.WaitGroup
	cuts.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-cut:
				proxy.drop()
			}
		}
	})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := next.Add(1)
				if i > maxSaves {
					return
				}
				code := fmt.Sprintf("ack%05d", i)
				if err := s.Save(context.Background(), code, NewLink{URL: "https://go.dev/"}); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					failed.Add(1)
				} else {
					mu.Lock()
					ackedCodes = append(ackedCodes, code)
					mu.Unlock()
					if acked.Add(1)%cutEvery == 0 {
						select {
						case cut <- struct{}{}:
						default: // a cut is pending already
						}
					}
				}
				if acked.Load() >= wantAcked && failed.Load() >= wantFailed {
					stopOnce.Do(func() { close(stop) })
				}
			}
		})
	}
	wg.Wait()
	stopOnce.Do(func() { close(stop) })
	cuts.Wait()
	for _, code := range ackedCodes {
		if _, err := direct.Lookup(context.Background(), code); err != nil {
			t.Errorf("%s was acknowledged but is not in the database: %v", code, err)
		}
	}
	t.Logf("%d acknowledged, %d failed, with connections cut after every %d acknowledged; first failure: %v",
		acked.Load(), failed.Load(), cutEvery, firstErr)
	if acked.Load() < wantAcked || failed.Load() < wantFailed {
		t.Errorf("%d acknowledged, %d failed in %d saves: want at least %d and %d, or this test proved nothing",
			acked.Load(), failed.Load(), maxSaves, wantAcked, wantFailed)
	}
}

// TestGroupCommitCloseDrains checks that closing the store writes the
// creates still waiting in the queue. A lock on the table holds both
// workers in a batch of one, while the queue fills; the lock is let go
// only once close has begun, so that what is queued can only be written
// by close's drain.
func TestGroupCommitCloseDrains(t *testing.T) {
	s, err := openPostgres(context.Background(), testDatabase(t), generousPool())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := s.startGroupCommit(context.Background(), 8, nil); err != nil {
		t.Fatal(err)
	}
	g := s.group
	ctx := context.Background()
	lock, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// EXCLUSIVE blocks inserts and lets count(*) through.
	if _, err := lock.ExecContext(ctx, `LOCK TABLE links IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		t.Helper()
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := groupCommitWorkers + cap(g.queue)
	var wg sync.WaitGroup
	errs := make([]error, n)
	save := func(i int) {
		wg.Go(func() { errs[i] = s.Save(ctx, fmt.Sprintf("drain%03d", i), NewLink{URL: "https://go.dev/"}) })
	}
	// One create at a time until each worker waits on the lock with it,
	// then enough to fill the queue.
	for i := range groupCommitWorkers {
		save(i)
		waitUntil(t, fmt.Sprintf("%d batches waiting on the lock", i+1), func() bool { return waiting() == i+1 })
	}
	for i := groupCommitWorkers; i < n; i++ {
		save(i)
	}
	waitUntil(t, "the group commit's queue to fill", func() bool { return len(g.queue) == cap(g.queue) })
	var n0 int
	if err := s.db.QueryRow(`SELECT count(*) FROM links`).Scan(&n0); err != nil {
		t.Fatal(err)
	}
	if n0 != 0 {
		t.Fatalf("%d links written while the table was locked, want 0", n0)
	}

	closed := make(chan struct{})
	go func() {
		g.close()
		close(closed)
	}()
	waitUntil(t, "close to begin", func() bool {
		select {
		case <-g.stop:
			return true
		default:
			return false
		}
	})
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("close did not return within 30 s of the table's lock being let go")
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("save %d, queued before close: %v, want nil", i, err)
		}
	}
	var got int
	if err := s.db.QueryRow(`SELECT count(*) FROM links`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("links = %d, want the %d created before close", got, n)
	}

	// After close, a create is refused as a 503 is, with one prefix.
	err = s.Save(ctx, "late001", NewLink{URL: "https://go.dev/"})
	if !errors.Is(err, errGroupCommitClosed) {
		t.Fatalf("save after close: %v, want errGroupCommitClosed", err)
	}
	if got, want := err.Error(), `store: save "late001": group commit closed`; got != want {
		t.Errorf("save after close: %q, want %q", got, want)
	}
	if status, _, retry := errorStatus(err); status != http.StatusServiceUnavailable || retry == 0 {
		t.Errorf("save after close: status %d, Retry-After %v; want 503 with a Retry-After", status, retry)
	}
}
