package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
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
			pool := testPool
			pool.prepare = prepare
			sizes := &maxObserver{}
			s := openGroupCommitStore(t, testDatabase(t), pool, 16, sizes)
			const n = 300
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					errs[i] = s.Save(context.Background(), fmt.Sprintf("gc%05d", i), fmt.Sprintf("https://go.dev/%d", i))
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
				if got, err := s.Lookup(context.Background(), fmt.Sprintf("gc%05d", i)); err != nil || got != fmt.Sprintf("https://go.dev/%d", i) {
					t.Errorf("lookup %d = %q, %v", i, got, err)
				}
			}
		})
	}
}

// TestGroupCommitCodeTaken checks the two ways a code can be taken: by a
// link saved before, and by another create in the same batch.
func TestGroupCommitCodeTaken(t *testing.T) {
	s := openGroupCommitStore(t, testDatabase(t), testPool, 64, nil)
	ctx := context.Background()
	if err := s.Save(ctx, "taken01", "https://go.dev/"); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "taken01", "https://example.com/"); !errors.Is(err, ErrCodeTaken) {
		t.Errorf("save of a taken code: %v, want ErrCodeTaken", err)
	}
	// Many creates of one new code at once, most in the same batch:
	// exactly one wins.
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.Save(ctx, "twins01", fmt.Sprintf("https://go.dev/%d", i)) })
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
// through a connection of its own.
func TestGroupCommitAcknowledgesOnlyCommitted(t *testing.T) {
	dsn := testDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	pool := testPool
	pool.timeout, pool.replyTimeout = 2*time.Second, 3*time.Second
	s, err := openPostgres(context.Background(), u.String(), pool)
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

	// 20 clients, each creating one link after another, for about a
	// second, while every connection to Postgres is cut every 100 ms.
	stop := make(chan struct{})
	var cuts sync.WaitGroup
	cuts.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				proxy.drop()
			}
		}
	})
	const clients, each = 20, 60
	const n = clients * each
	var wg sync.WaitGroup
	errs := make([]error, n)
	for c := range clients {
		wg.Go(func() {
			for j := range each {
				i := c*each + j
				errs[i] = s.Save(context.Background(), fmt.Sprintf("ack%04d", i), "https://go.dev/")
			}
		})
	}
	wg.Wait()
	close(stop)
	cuts.Wait()
	acked, failed := 0, 0
	for i, err := range errs {
		if err != nil {
			failed++
			continue
		}
		acked++
		if _, err := direct.Lookup(context.Background(), fmt.Sprintf("ack%04d", i)); err != nil {
			t.Errorf("ack%04d was acknowledged but is not in the database: %v", i, err)
		}
	}
	t.Logf("%d acknowledged, %d failed while connections were cut every 100 ms", acked, failed)
	if failed == 0 || acked == 0 {
		t.Errorf("%d acknowledged, %d failed: want some of each, or this test proved nothing", acked, failed)
	}
}

// TestGroupCommitCloseDrains checks that closing the store writes the
// creates still waiting in the queue.
func TestGroupCommitCloseDrains(t *testing.T) {
	s, err := openPostgres(context.Background(), testDatabase(t), testPool)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.startGroupCommit(context.Background(), 8, nil); err != nil {
		t.Fatal(err)
	}
	const n = 100
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.Save(context.Background(), fmt.Sprintf("drain%03d", i), "https://go.dev/") })
	}
	time.Sleep(time.Millisecond) // some are queued, some written
	var n0 int
	if err := s.db.QueryRow(`SELECT count(*) FROM links`).Scan(&n0); err != nil {
		t.Fatal(err)
	}
	s.group.close()
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, errGroupCommitClosed) {
			t.Errorf("save %d: %v", i, err)
		}
	}
	var got int
	if err := s.db.QueryRow(`SELECT count(*) FROM links`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	acked := 0
	for _, err := range errs {
		if err == nil {
			acked++
		}
	}
	if got != acked {
		t.Errorf("links = %d, acknowledged = %d: want them equal", got, acked)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
