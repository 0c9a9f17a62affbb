package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPgStoreSaveAndLookup(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.Save(ctx, "abcDEF1", NewLink{URL: "https://go.dev/"}); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if err := s.Save(ctx, "abcDEF1", NewLink{URL: "https://example.com/"}); !errors.Is(err, ErrCodeTaken) {
		t.Errorf("Save of a taken code: err %v, want ErrCodeTaken", err)
	}
	got, err := s.Lookup(ctx, "abcDEF1")
	if err != nil || got.URL != "https://go.dev/" {
		t.Errorf("Lookup = %q, %v; want https://go.dev/, nil", got.URL, err)
	}
	if _, err := s.Lookup(ctx, "zzzzzzz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of an unknown code: err %v, want ErrNotFound", err)
	}
}

// TestMigrateConcurrently starts several stores on one new database at once,
// as replicas starting together would, then once more on the existing schema.
func TestMigrateConcurrently(t *testing.T) {
	dsn := testDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 4 {
		wg.Go(func() {
			s, err := openPostgres(context.Background(), dsn, testPool)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	s, err := openPostgres(context.Background(), dsn, testPool)
	if err == nil {
		err = s.Close()
	}
	errs <- err
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("openPostgres: %v", err)
		}
	}
}

func TestOpenPostgresUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there, so the connection is refused.
	_, err := openPostgres(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", testPool)
	if err == nil {
		t.Fatal("openPostgres on a closed port returned nil error")
	}
}

// TestPostgresErrorsDoNotLeak breaks the database under a running handler:
// the client gets a plain 500, the log gets the cause.
func TestPostgresErrorsDoNotLeak(t *testing.T) {
	s := openTestStore(t)
	logs := &syncBuffer{}
	h := newServer(s, noClicks{}, nil, nil, nil, config{}, nil, slog.New(slog.NewTextHandler(logs, nil))).Handler
	if _, err := s.db.Exec(`DROP TABLE links`); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/abcdefg", ""},
		{"POST", "/shorten", `{"url":"https://go.dev"}`},
	} {
		rec := do(t, h, r.method, "http://sho.rt"+r.path, r.body)
		if rec.Code != 500 {
			t.Errorf("%s %s with no table: status %d, want 500", r.method, r.path, rec.Code)
		}
		if msg := jsonError(t, rec); msg != "internal error" {
			t.Errorf("%s %s: error %q, want %q", r.method, r.path, msg, "internal error")
		}
	}
	if !strings.Contains(logs.String(), `relation \"links\" does not exist`) {
		t.Errorf("log does not carry the cause:\n%s", logs)
	}
}

// TestSlowDatabaseIsBounded holds a lock on the table so that lookups wait:
// the request must give up after DB_TIMEOUT with a 503 and Retry-After,
// not hang.
func TestSlowDatabaseIsBounded(t *testing.T) {
	s := openTestStore(t)
	h := newServer(s, noClicks{}, nil, nil, nil, config{}, nil, discardLog).Handler
	tx, err := s.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // the test only needs the lock released
	if _, err := tx.Exec(`LOCK TABLE links IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/abcdefg", ""},
		{"POST", "/shorten", `{"url":"https://go.dev/locked"}`},
	} {
		start := time.Now()
		rec := do(t, h, req.method, req.path, req.body)
		took := time.Since(start)
		if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" {
			t.Errorf("%s %s behind a lock: status %d, Retry-After %q; want 503, 1", req.method, req.path, rec.Code, rec.Header().Get("Retry-After"))
		}
		jsonError(t, rec)
		if took < s.timeout || took > s.timeout+time.Second {
			t.Errorf("%s %s behind a lock took %v, want about %v", req.method, req.path, took, s.timeout)
		}
	}
}

// TestFrozenDatabaseIsBounded: a Postgres that stops answering altogether
// (a frozen process, a partition) never reads lib/pq's cancel request, so
// the context alone cannot end the call. The request must still get its
// 503 at DB_TIMEOUT (bounded), and the stuck calls must end, and give
// their connections back, at the connection's reply deadline.
func TestFrozenDatabaseIsBounded(t *testing.T) {
	dsn := testDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	pool := testPool
	pool.timeout, pool.replyTimeout = 200*time.Millisecond, time.Second
	s, err := openPostgres(context.Background(), u.String(), pool)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, s)
	ctx := context.Background()
	if _, err := s.Lookup(ctx, "abcdefg"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup before the freeze: %v, want ErrNotFound", err)
	}
	proxy.stall()
	for i := range 3 { // the pooled connection, then new ones
		start := time.Now()
		_, err := s.Lookup(ctx, "abcdefg")
		took := time.Since(start)
		if status, _, _ := errorStatus(err); status != http.StatusServiceUnavailable {
			t.Errorf("lookup %d with Postgres frozen: err %v (status %d), want a 503", i, err, status)
		}
		if took > pool.timeout+300*time.Millisecond {
			t.Errorf("lookup %d with Postgres frozen took %v, want about DB_TIMEOUT (%v)", i, took, pool.timeout)
		}
	}
	if n := s.db.Stats().InUse; n == 0 {
		t.Fatal("no connection in use right after the lookups: the test froze nothing")
	}
	deadline := time.Now().Add(pool.replyTimeout + 2*time.Second)
	for s.db.Stats().InUse > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := s.db.Stats().InUse; n > 0 {
		t.Errorf("%d connections still stuck %v after the reply deadline", n, pool.replyTimeout+2*time.Second)
	}
}

// TestStartWaitsOutAMigration: an instance that starts while the table is
// locked (another instance migrating, an ALTER TABLE) waits for the lock,
// as long as the schema step's own deadline, not the shorter reply
// deadline its connections have afterwards.
func TestStartWaitsOutAMigration(t *testing.T) {
	dsn := testDatabase(t)
	first, err := openPostgres(context.Background(), dsn, testPool)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, first)
	tx, err := first.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE links IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(time.Second, func() {
		if err := tx.Rollback(); err != nil {
			t.Errorf("release the lock: %v", err)
		}
	})
	pool := testPool
	pool.replyTimeout = 300 * time.Millisecond
	start := time.Now()
	s, err := openPostgres(context.Background(), dsn, pool)
	if err != nil {
		t.Fatalf("start while the table was locked for 1s: %v", err)
	}
	closeOnCleanup(t, s)
	if took := time.Since(start); took < time.Second {
		t.Errorf("start took %v; the table was locked for 1s, so the test locked nothing", took)
	}
}

// TestSeed loads sql/seed.sql with psql, as the docs tell a reader to.
func TestSeed(t *testing.T) {
	dsn := testDatabase(t)
	s, err := openPostgres(context.Background(), dsn, testPool)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, s)
	for range 2 { // a second run must add nothing
		out, err := exec.Command("psql", dsn, "-q", "-v", "rows=2000", "-f", "sql/seed.sql").CombinedOutput()
		if err != nil {
			t.Fatalf("psql -f sql/seed.sql: %v\n%s", err, out)
		}
	}
	var n, distinct int
	if err := s.db.QueryRow(`SELECT count(*), count(DISTINCT code) FROM links`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 2000 || distinct != 2000 {
		t.Errorf("seeded %d links with %d distinct codes, want 2000 and 2000", n, distinct)
	}
	rows, err := s.db.Query(`SELECT code FROM links`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var code string
		if err := rows.Scan(&code); err != nil {
			t.Fatal(err)
		}
		if !validCode(code) || reserved(code) || len(code) != codeLength {
			t.Errorf("seeded code %q is not one the app could hand out", code)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The codes the docs and benchmarks name.
	for code, want := range map[string]string{"015ftgN": "https://example.com/seed/1"} {
		got, err := s.Lookup(context.Background(), code)
		if err != nil || got.URL != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", code, got.URL, err, want)
		}
	}
	var middle string
	err = s.db.QueryRow(`SELECT code FROM links WHERE url = 'https://example.com/seed/250'`).Scan(&middle)
	if errors.Is(err, sql.ErrNoRows) || middle != seedCode(250) {
		t.Errorf("code of seed link 250 = %q (%v), want %q", middle, err, seedCode(250))
	}
}

// seedCode is sql/seed.sql's formula in Go: n * 1000000007 mod 62^7 in base62.
func seedCode(n int64) string {
	v := n * 1000000007 % 3521614606208
	b := make([]byte, codeLength)
	for i := codeLength - 1; i >= 0; i-- {
		b[i] = alphabet[v%62]
		v /= 62
	}
	return string(b)
}

func TestSeedCode(t *testing.T) {
	// The middle of the 500,000-link table, which the benchmarks hit.
	if got := seedCode(250000); got != "zOC1qfw" {
		t.Errorf("seedCode(250000) = %q, want zOC1qfw", got)
	}
}

// TestSaveSameCodeConcurrently is the race step 02 left open: many requests
// saving one code at the same moment. The unique index must let exactly one
// through.
func TestSaveSameCodeConcurrently(t *testing.T) {
	s := openTestStore(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- s.Save(context.Background(), "sameCod", NewLink{URL: "https://example.com/" + strconv.Itoa(i)})
		})
	}
	wg.Wait()
	close(errs)
	saved, taken := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			saved++
		case errors.Is(err, ErrCodeTaken):
			taken++
		default:
			t.Errorf("Save: %v", err)
		}
	}
	if saved != 1 || taken != n-1 {
		t.Errorf("%d saves succeeded and %d found the code taken, want 1 and %d", saved, taken, n-1)
	}
	if got := countLinks(t, s); got != 1 {
		t.Errorf("table holds %d links, want 1", got)
	}
}

func TestPoolSettingsApply(t *testing.T) {
	s, err := openPostgres(context.Background(), testDatabase(t), poolConfig{maxOpen: 3, maxIdle: 3})
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, s)
	if got := s.db.Stats().MaxOpenConnections; got != 3 {
		t.Errorf("MaxOpenConnections = %d, want 3", got)
	}
}

// TestRestartTakesNoLockOnLinks: an instance that starts while a long
// reader holds links (pg_dump, a report) opens at once, and the other
// instances' lookups keep answering. On step 26's code the restart's
// migration queued for an exclusive lock behind the reader, and every
// lookup queued behind it (issue 24, item 8). A schema that must change
// is still applied, and recorded.
func TestRestartTakesNoLockOnLinks(t *testing.T) {
	dsn := testDatabase(t)
	ctx := context.Background()
	running, err := openPostgres(ctx, dsn, testPool)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, running)
	if err := running.Save(ctx, "lock001", NewLink{URL: "https://go.dev/"}); err != nil {
		t.Fatal(err)
	}
	// The long reader: an open transaction that has read links holds
	// its ACCESS SHARE lock until it ends.
	reader, err := running.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback() //nolint:errcheck // the reader only read
	var n int
	if err := reader.QueryRowContext(ctx, "SELECT count(*) FROM links").Scan(&n); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		s, err := openPostgres(ctx, dsn, testPool) // the restart
		if err == nil {
			err = s.Close()
		}
		opened <- err
	}()
	// Either it opens, or its migration is seen waiting for a lock on links.
	waiting := `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE c.relname = 'links' AND NOT l.granted)`
	for done := false; !done; {
		select {
		case err := <-opened:
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			done = true
		default:
			var w bool
			if err := running.db.QueryRowContext(ctx, waiting).Scan(&w); err != nil {
				t.Fatal(err)
			}
			if w {
				t.Fatal("the restart's migration waits for a lock on links behind the reader; lookups queue behind it")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, defaultDBTimeout)
	defer cancel()
	if _, err := running.Lookup(lctx, "lock001"); err != nil {
		t.Errorf("lookup on the running instance while the reader holds links: %v", err)
	}
	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}

	// A schema to change (as a new binary brings) is applied and recorded.
	if _, err := running.db.ExecContext(ctx, "UPDATE schema_version SET sha256 = 'older'"); err != nil {
		t.Fatal(err)
	}
	again, err := openPostgres(ctx, dsn, testPool)
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, again)
	if have, err := again.schemaVersion(ctx, again.db); err != nil || have != schemaSHA256() {
		t.Errorf("schema version after an upgrade = %q, %v; want %q", have, err, schemaSHA256())
	}
}

// TestAbandonedStatementEndsInPostgres: a statement the app gives up on at
// its connection's reply deadline, while Postgres sends nothing (a long
// function, a wait for a lock), must end in Postgres too, not hold a
// backend until it finishes (docs/39). Beside it, the same statement on a
// connection with DB_CLIENT_CHECK=0 runs on: the check ends it, not the
// dropped connection alone.
func TestAbandonedStatementEndsInPostgres(t *testing.T) {
	for _, tc := range []struct{ name, query string }{
		{"sleep", "SELECT pg_sleep(600)"},
		{"lock", "SELECT count(*) FROM links"}, // behind the test's lock on links
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := testDatabase(t)
			ctx := context.Background()
			open := func(check time.Duration) *pgStore {
				pool := testPool
				pool.replyTimeout, pool.clientCheck = 500*time.Millisecond, check
				s, err := openPostgres(ctx, dsn, pool)
				if err != nil {
					t.Fatal(err)
				}
				closeOnCleanup(t, s)
				return s
			}
			on, off := open(100*time.Millisecond), open(0)
			for s, want := range map[*pgStore]string{on: "100ms", off: "0"} {
				var got string
				if err := s.db.QueryRowContext(ctx, "SHOW client_connection_check_interval").Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("client_connection_check_interval = %q on a connection, want %q", got, want)
				}
			}
			admin := openBehind(t, dsn)
			if tc.name == "lock" {
				tx, err := admin.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := tx.Rollback(); err != nil {
						t.Errorf("release the lock: %v", err)
					}
				})
				if _, err := tx.ExecContext(ctx, "LOCK TABLE links IN ACCESS EXCLUSIVE MODE"); err != nil {
					t.Fatal(err)
				}
			}
			// Each statement carries its own tag, so that pg_stat_activity
			// finds its backend (and not the query that looks for it).
			tag := "abandoned-" + strings.ToLower(rand.Text()[:10])
			for name, s := range map[string]*pgStore{"on": on, "off": off} {
				q := fmt.Sprintf("%s /* %s-%s */", tc.query, tag, name)
				if _, err := s.db.ExecContext(ctx, q); err == nil {
					t.Fatalf("%s: %q returned before its reply deadline: the test abandons nothing", name, q)
				}
			}
			running := func(name string) bool {
				var n int
				err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'`, tag+"-"+name).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				return n > 0
			}
			// Generous: the check runs every 100 ms.
			deadline := time.Now().Add(time.Minute)
			for running("on") && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if running("on") {
				t.Fatalf("the statement abandoned with DB_CLIENT_CHECK=100ms still runs in Postgres a minute later")
			}
			if !running("off") {
				t.Fatalf("the statement abandoned with DB_CLIENT_CHECK=0 has ended too: the test cannot tell the check from the drop")
			}
		})
	}
}

// TestBackgroundCallsOutliveTheReplyDeadline holds a lock on links, so
// that the Bloom filter's first query waits behind it, well past the
// request pool's reply deadline, and checks that on the background pool
// the query waits on, and the build completes once the lock goes
// (docs/40). The same query on the request pool must fail at that
// deadline: the arm that shows the test can fail.
func TestBackgroundCallsOutliveTheReplyDeadline(t *testing.T) {
	const reply = 300 * time.Millisecond
	pool := testPool
	pool.replyTimeout = reply
	dsn := testDatabase(t)
	ctx := context.Background()
	pg := openTestStoreAt(t, dsn, pool)
	for i := range 3 {
		if err := pg.Save(ctx, fmt.Sprintf("bgcall%d", i), NewLink{URL: "https://go.dev/"}); err != nil {
			t.Fatal(err)
		}
	}
	admin := openBehind(t, dsn)
	lock, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			if err := lock.Rollback(); err != nil {
				t.Errorf("release the lock: %v", err)
			}
		}
	})
	if _, err := lock.ExecContext(ctx, "LOCK TABLE links IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	var n int64
	var at time.Time
	err = pg.db.QueryRowContext(ctx, bloomCountSQL+" /* request pool */").Scan(&n, &at)
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("behind the lock, the request pool's count returned %v, want its reply deadline's timeout", err)
	}

	b := newBloomStore(pg, pg.bg, defaultBloomFPRate, true, noSweep, (*metrics)(nil).bloomCounts(), discardLog)
	type scanned struct {
		rows uint
		err  error
	}
	done := make(chan scanned, 1)
	go func() {
		_, _, rows, _, err := b.scan(ctx)
		done <- scanned{rows, err}
	}()
	// Until the build's count has waited far longer than the request
	// pool's reply deadline, as Postgres's clock sees it.
	waited := func() bool {
		var k int
		err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE query = $1 AND wait_event_type = 'Lock' AND now() - query_start > $2 * interval '1 millisecond'`,
			bloomCountSQL, (5 * reply).Milliseconds()).Scan(&k)
		if err != nil {
			t.Fatal(err)
		}
		return k > 0
	}
	deadline := time.Now().Add(time.Minute) // generous: the wait is 1.5 s
	for !waited() {
		select {
		case s := <-done:
			t.Fatalf("the build's scan returned (rows %d, err %v) while the lock was held", s.rows, s.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build's count was not seen waiting %v behind the lock within a minute", 5*reply)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	released = true
	select {
	case s := <-done:
		if s.err != nil {
			t.Fatalf("the build's scan, on the background pool, failed: %v", s.err)
		}
		if s.rows != 3 {
			t.Errorf("the build's scan read %d rows, want 3", s.rows)
		}
	case <-time.After(time.Minute):
		t.Fatal("the build's scan did not return within a minute of the lock's release")
	}
}
