package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"
)

// unpermute is permute's inverse, here to prove permute is one: the
// Feistel rounds run backwards, cycle walking the same way.
func (p *codePerm) unpermute(n uint64) uint64 {
	for {
		l, r := n>>permHalf, n&permMask
		for i := permRounds - 1; i >= 0; i-- {
			l, r = r^p.round(i, l), l
		}
		n = l<<permHalf | r
		if n < codeSpace {
			return n
		}
	}
}

func testPerm(t *testing.T, key string) *codePerm {
	t.Helper()
	p, err := newCodePerm([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCodePermIsAPermutation: every number maps below codeSpace to a
// valid code, and back; numbers from every part of the range, the first
// ones and the last ones included.
func TestCodePermIsAPermutation(t *testing.T) {
	p := testPerm(t, "0123456789abcdef")
	r := rand.New(rand.NewPCG(1, 2))
	ns := []uint64{0, 1, 2, codeSpace - 2, codeSpace - 1}
	for range 100_000 {
		ns = append(ns, r.Uint64N(codeSpace))
	}
	for i := range uint64(50_000) {
		ns = append(ns, i)
	}
	seen := make(map[uint64]uint64, len(ns))
	for _, n := range ns {
		m := p.permute(n)
		if m >= codeSpace {
			t.Fatalf("permute(%d) = %d, past codeSpace", n, m)
		}
		if back := p.unpermute(m); back != n {
			t.Fatalf("unpermute(permute(%d)) = %d", n, back)
		}
		if prev, dup := seen[m]; dup && prev != n {
			t.Fatalf("permute(%d) = permute(%d) = %d", n, prev, m)
		}
		seen[m] = n
		if c := encodeCode(m); !validCode(c) || len(c) != codeLength {
			t.Fatalf("encodeCode(%d) = %q, not a generated code", m, c)
		}
	}
}

// TestEncodeCode: base 62, most significant digit first, padded with '0'.
func TestEncodeCode(t *testing.T) {
	for n, want := range map[uint64]string{0: "0000000", 61: "000000z", 62: "0000010", codeSpace - 1: "zzzzzzz"} {
		if got := encodeCode(n); got != want {
			t.Errorf("encodeCode(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestCodePermHidesOrder: codes of consecutive numbers look unrelated
// (their first characters agree about 1 time in 62, as random codes'
// do), and another key gives other codes.
func TestCodePermHidesOrder(t *testing.T) {
	p, q := testPerm(t, "0123456789abcdef"), testPerm(t, "0123456789abcdeF")
	const n = 20_000
	sameFirst, sameAcrossKeys := 0, 0
	prev := encodeCode(p.permute(0))
	for i := uint64(1); i <= n; i++ {
		c := encodeCode(p.permute(i))
		if c[0] == prev[0] {
			sameFirst++
		}
		if c == encodeCode(q.permute(i)) {
			sameAcrossKeys++
		}
		prev = c
	}
	// Expected n/62 ≈ 323; a permutation that kept order would agree on
	// nearly all.
	if sameFirst > 3*n/62 {
		t.Errorf("consecutive numbers' codes share their first character %d times in %d, want about %d", sameFirst, n, n/62)
	}
	if sameAcrossKeys > 1 {
		t.Errorf("two keys gave the same code for %d of %d numbers", sameAcrossKeys, n)
	}
}

func TestCodePermKeyLength(t *testing.T) {
	for _, k := range []string{"", "short", "0123456789abcdef0"} {
		if _, err := newCodePerm([]byte(k)); err == nil {
			t.Errorf("newCodePerm(%d bytes) accepted", len(k))
		}
	}
}

// TestSequenceCodesAcrossInstances: two instances on one database, each
// taking codes from many goroutines at once, never give out the same
// code, share the key the first one made, and take a block per
// codeBlock codes.
func TestSequenceCodesAcrossInstances(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	a, err := newSequenceCodes(ctx, s.db, testPool.timeout)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSequenceCodes(ctx, s.db, testPool.timeout)
	if err != nil {
		t.Fatal(err)
	}
	var ka, kb [16]byte
	a.perm.block.Encrypt(ka[:], make([]byte, 16))
	b.perm.block.Encrypt(kb[:], make([]byte, 16))
	if !bytes.Equal(ka[:], kb[:]) {
		t.Fatal("the two instances use different keys")
	}
	const perWorker, workers = 600, 8
	var mu sync.Mutex
	seen := make(map[string]bool)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		src := a
		if w%2 == 1 {
			src = b
		}
		wg.Go(func() {
			for range perWorker {
				c, err := src.next(ctx)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				dup := seen[c]
				seen[c] = true
				mu.Unlock()
				if dup {
					errs <- errors.New("code " + c + " given out twice")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != perWorker*workers {
		t.Errorf("%d codes, want %d", len(seen), perWorker*workers)
	}
	// 2,400 codes each: three blocks each, no more.
	if a.blocks != 3 || b.blocks != 3 {
		t.Errorf("blocks taken: %d and %d, want 3 and 3", a.blocks, b.blocks)
	}
}

// TestSequenceCodesBadKey: a key in Postgres that is not 16 bytes (here,
// the table's check dropped to put one there) stops the start.
func TestSequenceCodesBadKey(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if _, err := s.db.ExecContext(ctx, `ALTER TABLE code_keys DROP CONSTRAINT code_keys_key_check;
		INSERT INTO code_keys VALUES (1, '\x0102')`); err != nil {
		t.Fatal(err)
	}
	if _, err := newSequenceCodes(ctx, s.db, testPool.timeout); err == nil {
		t.Fatal("a 2-byte key was accepted")
	}
}

// TestSequenceCodesPostgresStalled: a Postgres that stops answering while
// a block is being taken costs each create DB_TIMEOUT, a 503, not the
// connection's reply deadline, and the creates waiting for the block do
// not queue behind one another.
func TestSequenceCodesPostgresStalled(t *testing.T) {
	dsn := testDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	pool := testPool
	// A reply deadline far past DB_TIMEOUT: a create that waited for it
	// would take 5 s, one that is bounded 200 ms.
	pool.timeout, pool.replyTimeout = 200*time.Millisecond, 5*time.Second
	s, err := openPostgres(context.Background(), u.String(), pool)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, s)
	src, err := newSequenceCodes(context.Background(), s.db, pool.timeout)
	if err != nil {
		t.Fatal(err)
	}
	proxy.stall()
	start := time.Now()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := src.next(context.Background())
			errs <- err
		}()
	}
	for range 8 {
		err := <-errs
		if status, _, _ := errorStatus(err); status != http.StatusServiceUnavailable {
			t.Errorf("a code with Postgres frozen: %v (status %d), want a 503", err, status)
		}
	}
	// Generous: 8 creates waiting in turn for the reply deadline would
	// take 40 s, one after the other for DB_TIMEOUT 1.6 s.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("8 creates with Postgres frozen took %v, want about DB_TIMEOUT (%v) in all", took, pool.timeout)
	}
	// A create whose own context ends first is not held by the block.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("next with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestSequenceCodesKeyRace: an instance that starts while another's key
// is inserted but not yet committed waits for it, and uses it (with ON
// CONFLICT DO NOTHING it would get no row, and fail to start).
func TestSequenceCodesKeyRace(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	first := []byte("0123456789abcdef")
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if _, err := tx.ExecContext(ctx, `INSERT INTO code_keys (id, key) VALUES (1, $1)`, first); err != nil {
		t.Fatal(err)
	}
	type result struct {
		src *sequenceCodes
		err error
	}
	done := make(chan result, 1)
	go func() {
		src, err := newSequenceCodes(ctx, s.db, testPool.timeout)
		done <- result{src, err}
	}()
	// Commit once the second start waits on the first's row.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second start never waited on the first's key")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("start beside another's uncommitted key: %v", r.err)
	}
	want := testPerm(t, string(first))
	if got, exp := encodeCode(r.src.perm.permute(42)), encodeCode(want.permute(42)); got != exp {
		t.Errorf("the second start's codes are not the first key's (%s, want %s)", got, exp)
	}
}
