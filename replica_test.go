package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// openReplicaOn opens dsn as a replica is opened: no migration, the lookup
// prepared only.
func openReplicaOn(t *testing.T, dsn string) *pgStore {
	t.Helper()
	pool := testPool
	pool.readOnly = true
	s, err := openPostgres(context.Background(), dsn, pool)
	if err != nil {
		t.Fatalf("open replica: %v", err)
	}
	closeOnCleanup(t, s)
	return s
}

// TestReplicaReadsFallBack stands a second database in for a replica that
// is behind: it has the schema and none of the primary's links. A link
// saved through the store must still be found at once (read your writes),
// by the primary; one only the "replica" has is read from it; an unknown
// code is unknown to both.
func TestReplicaReadsFallBack(t *testing.T) {
	primary := openTestStore(t)
	behindDSN := testDatabase(t)
	openTestStoreOn(t, behindDSN) // makes the schema there
	behind := openReplicaOn(t, behindDSN)
	m := newMetrics(prometheus.NewRegistry())
	primary.lookups, behind.lookups = m.dbLookups(), m.dbLookups()
	// Far above what a lookup takes on a busy machine: this test is about
	// which server answers, not how fast (TestReplicaReadsStalled is).
	r := &replicaReads{Store: primary, replica: behind, counts: m.replicaResults(), replicaWait: 10 * time.Second}
	ctx := context.Background()

	if err := r.Save(ctx, "fresh01", NewLink{URL: "https://go.dev/fresh"}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup(ctx, "fresh01"); err != nil || got.URL != "https://go.dev/fresh" {
		t.Errorf("lookup right after save = %q, %v; want the link, from the primary", got.URL, err)
	}
	if l, err := r.Link(ctx, "fresh01"); err != nil || l.URL != "https://go.dev/fresh" {
		t.Errorf("link right after save = %+v, %v", l, err)
	}
	if err := behind.db.QueryRow(`INSERT INTO links (code, url) VALUES ('onrepl1', 'https://go.dev/r') RETURNING code`).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup(ctx, "onrepl1"); err != nil || got.URL != "https://go.dev/r" {
		t.Errorf("lookup of a link on the replica = %q, %v", got.URL, err)
	}
	if _, err := r.Lookup(ctx, "nothere"); !errors.Is(err, ErrNotFound) {
		t.Errorf("lookup of an unknown code: %v, want ErrNotFound", err)
	}
	for _, tt := range []struct {
		result string
		want   float64
	}{{"hit", 1}, {"missed", 3}, {"failed", 0}} {
		if got := testutil.ToFloat64(m.replica.WithLabelValues(tt.result)); got != tt.want {
			t.Errorf("replica reads %s = %v, want %v", tt.result, got, tt.want)
		}
	}
	// Every query counts, on either server: fresh01 missed on the replica
	// and found on the primary, onrepl1 found on the replica, nothere
	// missed on both. (Link is not a lookup.)
	for _, tt := range []struct {
		result string
		want   float64
	}{{"found", 2}, {"not_found", 3}, {"error", 0}} {
		if got := testutil.ToFloat64(m.lookups.WithLabelValues(tt.result)); got != tt.want {
			t.Errorf("db lookups %s = %v, want %v", tt.result, got, tt.want)
		}
	}
}

// TestReplicaReadsFailing points the replica at a database without the
// schema, as a broken replica would answer: every read fails there and is
// answered by the primary.
func TestReplicaReadsFailing(t *testing.T) {
	primary := openTestStore(t)
	broken := openReplicaOnUnprepared(t, testDatabase(t))
	m := newMetrics(prometheus.NewRegistry())
	primary.lookups, broken.lookups = m.dbLookups(), m.dbLookups()
	var logs syncBuffer
	r := &replicaReads{Store: primary, replica: broken, counts: m.replicaResults(), replicaWait: 10 * time.Second, failLog: &sampledLog{log: slog.New(slog.NewTextHandler(&logs, nil))}}
	ctx := context.Background()
	if err := r.Save(ctx, "saved01", NewLink{URL: "https://go.dev/"}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup(ctx, "saved01"); err != nil || got.URL != "https://go.dev/" {
		t.Errorf("lookup = %q, %v; want the link from the primary", got.URL, err)
	}
	// The failure is in the log too (step 42), with the replica's error.
	if got := logs.String(); !strings.Contains(got, `msg="replica read failed; asked the primary"`) || !strings.Contains(got, "links") {
		t.Errorf("log = %q; want the failed replica read, with its error (no links table)", got)
	}
	if got := testutil.ToFloat64(m.replica.WithLabelValues("failed")); got != 1 {
		t.Errorf("replica reads failed = %v, want 1", got)
	}
	// Two queries: the replica's failed, the primary's found the link.
	for _, tt := range []struct {
		result string
		want   float64
	}{{"found", 1}, {"not_found", 0}, {"error", 1}} {
		if got := testutil.ToFloat64(m.lookups.WithLabelValues(tt.result)); got != tt.want {
			t.Errorf("db lookups %s = %v, want %v", tt.result, got, tt.want)
		}
	}
}

// openedReplica is what openReplicaWaiting's open returned.
type openedReplica struct {
	s   *pgStore
	err error
}

// openReplicaWaiting opens dsn as a replica in the background: waiting
// closes the first time the open waits for the replica (onSchemaWait),
// and done gets what it returned.
func openReplicaWaiting(t *testing.T, dsn string) (waiting chan struct{}, done chan openedReplica) {
	t.Helper()
	waiting = make(chan struct{})
	var once sync.Once
	onSchemaWait = func() { once.Do(func() { close(waiting) }) }
	t.Cleanup(func() { onSchemaWait = func() {} })
	pool := testPool
	pool.readOnly = true
	done = make(chan openedReplica, 1)
	go func() {
		s, err := openPostgres(context.Background(), dsn, pool)
		done <- openedReplica{s, err}
	}()
	return waiting, done
}

// TestReplicaWaitsForSchema: an instance started beside a fresh primary
// may reach its replica before the replica has replayed the schema. Opening
// it waits for the links table (asked again until migrateTimeout) instead
// of failing, which made an app exit at start on three hosts (step 23).
func TestReplicaWaitsForSchema(t *testing.T) {
	dsn := testDatabase(t) // no schema: the replica has not replayed it yet
	waiting, done := openReplicaWaiting(t, dsn)
	select {
	case <-waiting: // it found no table, and waits for one
	case r := <-done:
		t.Fatalf("open returned before any table existed: %v", r.err)
	}
	// The schema reaches the replica: a primary's migration on it.
	migrateOn(t, dsn)
	checkOpenedReplica(t, done, "after the schema arrived")
}

// migrateOn makes the schema in dsn, as a primary's start does.
func migrateOn(t *testing.T, dsn string) {
	t.Helper()
	primary, err := openPostgres(context.Background(), dsn, testPool)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	closeOnCleanup(t, primary)
}

// checkOpenedReplica takes what openReplicaWaiting's open returned (after
// what the test names): no error, and a store that answers a lookup.
func checkOpenedReplica(t *testing.T, done chan openedReplica, after string) {
	t.Helper()
	r := <-done
	if r.err != nil {
		t.Fatalf("open replica %s: %v", after, r.err)
	}
	closeOnCleanup(t, r.s)
	if _, err := r.s.Lookup(context.Background(), "nothere"); !errors.Is(err, ErrNotFound) {
		t.Errorf("lookup on the opened replica: %v, want ErrNotFound", err)
	}
}

// TestReplicaWaitsForDatabase: on three hosts started at once, an app
// can reach its standby before the standby has replayed CREATE DATABASE
// ("database \"shortener\" does not exist" made an app exit at start in
// a rehearsal of step 27). Opening the replica waits for the database, then
// for the schema, as it waits for a missing table.
func TestReplicaWaitsForDatabase(t *testing.T) {
	dsn := testDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	admin, err := sql.Open("postgres", os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name + "_away WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s_away: %v", name, err)
		}
		if err := admin.Close(); err != nil {
			t.Errorf("close admin connection: %v", err)
		}
	})
	// The database is not there yet under its name: the standby has not
	// replayed its creation.
	if _, err := admin.Exec("ALTER DATABASE " + name + " RENAME TO " + name + "_away"); err != nil {
		t.Fatal(err)
	}
	waiting, done := openReplicaWaiting(t, dsn)
	select {
	case <-waiting: // no database of that name: it waits
	case r := <-done:
		t.Fatalf("open returned before the database existed: %v", r.err)
	}
	if _, err := admin.Exec("ALTER DATABASE " + name + "_away RENAME TO " + name); err != nil {
		t.Fatal(err)
	}
	// Then the schema (until it comes, the wait goes on: the table is
	// missing), as a primary's migration makes it.
	migrateOn(t, dsn)
	checkOpenedReplica(t, done, "after the database and the schema arrived")
}

// TestReplicaWaitsWhileCut: a host brought back after a failover starts
// its app while Patroni rewinds and restarts the Postgres beside it, which
// cuts the app's connections ("prepare lookup: EOF" made an app exit in
// step 24's run of docs/20's Try it). Opening the replica waits for it,
// as for a missing schema, instead of failing.
func TestReplicaWaitsWhileCut(t *testing.T) {
	dsn := testDatabase(t)
	openTestStoreOn(t, dsn) // the schema, as a primary makes it
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	proxy.refuse() // every connection closed as soon as it is made
	u.Host = proxy.addr()
	waiting, done := openReplicaWaiting(t, u.String())
	select {
	case <-waiting: // its connection was cut, and it waits
	case r := <-done:
		t.Fatalf("open returned while every connection was cut: %v", r.err)
	}
	proxy.restore() // the replica is back
	checkOpenedReplica(t, done, "once it was back")
}

// TestReplicaNotReady: what a replica that is not ready answers is waited
// out; any other error is not.
func TestReplicaNotReady(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&pq.Error{Code: "3D000"}, true}, // no database of that name yet
		{&pq.Error{Code: "42P01"}, true}, // no links table yet
		{&pq.Error{Code: "57P03"}, true}, // the database system is starting up
		{&pq.Error{Code: "57P01"}, true}, // terminating connection due to administrator command
		{&pq.Error{Code: "08006"}, true}, // connection failure
		{fmt.Errorf("prepare: %w", io.EOF), true},
		{io.ErrUnexpectedEOF, true},
		{driver.ErrBadConn, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{&pq.Error{Code: "28P01"}, false}, // a wrong password
		{&pq.Error{Code: "42601"}, false}, // a syntax error
		{context.DeadlineExceeded, false},
		{errors.New("something else"), false},
	} {
		if got := replicaNotReady(tt.err); got != tt.want {
			t.Errorf("replicaNotReady(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// openReplicaOnUnprepared opens dsn read-only without preparing (a
// database without the schema cannot prepare the lookup).
func openReplicaOnUnprepared(t *testing.T, dsn string) *pgStore {
	t.Helper()
	pool := testPool
	pool.readOnly, pool.prepare = true, false
	s, err := openPostgres(context.Background(), dsn, pool)
	if err != nil {
		t.Fatalf("open replica: %v", err)
	}
	closeOnCleanup(t, s)
	return s
}

// TestReplicaReadsStalled puts a replica behind a proxy that stops
// answering, as a frozen replica or a network that drops packets does: a
// read gives the replica replicaTimeout, then asks the primary with what
// is left, so that it still ends within DB_TIMEOUT, not twice that.
func TestReplicaReadsStalled(t *testing.T) {
	const dbTimeout = 2 * time.Second // far above replicaTimeout, on any machine
	pool := testPool
	pool.timeout = dbTimeout
	dsn := testDatabase(t)
	primary := openTestStoreOn(t, dsn)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	rpool := pool
	rpool.readOnly = true
	replica, err := openPostgres(context.Background(), u.String(), rpool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.cut() // or closing would wait for the stalled connections' reply deadline
		// Its connections were cut under it: closing its statements on
		// them may fail, and says nothing about the test.
		if err := replica.Close(); err != nil {
			t.Logf("close replica after the stall: %v", err)
		}
	})
	m := newMetrics(prometheus.NewRegistry())
	r := &replicaReads{Store: primary, replica: replica, counts: m.replicaResults(), timeout: dbTimeout}
	ctx := context.Background()
	if err := primary.Save(ctx, "stall01", NewLink{URL: "https://go.dev/stall"}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup(ctx, "stall01"); err != nil || got.URL != "https://go.dev/stall" {
		t.Fatalf("lookup through a working replica = %q, %v", got.URL, err)
	}
	if got := testutil.ToFloat64(m.replica.WithLabelValues("hit")); got != 1 {
		t.Fatalf("replica reads hit = %v, want 1 before the stall", got)
	}

	proxy.stall()
	start := time.Now()
	got, err := r.Lookup(ctx, "stall01")
	if took := time.Since(start); err != nil || got.URL != "https://go.dev/stall" || took >= dbTimeout {
		t.Errorf("lookup with the replica stalled = %q, %v after %v; want the link from the primary within DB_TIMEOUT (%v)",
			got.URL, err, took, dbTimeout)
	}
	start = time.Now()
	_, err = r.Lookup(ctx, "nothere")
	if took := time.Since(start); !errors.Is(err, ErrNotFound) || took >= dbTimeout {
		t.Errorf("lookup of an unknown code with the replica stalled: %v after %v; want ErrNotFound within DB_TIMEOUT (%v)",
			err, took, dbTimeout)
	}
	start = time.Now()
	l, err := r.Link(ctx, "stall01")
	if took := time.Since(start); err != nil || l.URL != "https://go.dev/stall" || took >= dbTimeout {
		t.Errorf("link with the replica stalled = %+v, %v after %v; want it from the primary within DB_TIMEOUT (%v)",
			l, err, took, dbTimeout)
	}
	if got := testutil.ToFloat64(m.replica.WithLabelValues("failed")); got != 3 {
		t.Errorf("replica reads failed = %v, want 3", got)
	}
}

// TestHeardChangeIsReadFromThePrimary: an instance that reads from a
// standby hears, through Redis, of an edit made on another instance, and
// serves the edit, though its standby still has the link as it was (a
// second database stands in for a standby that has not yet begun to
// stream from a new primary). Until step 46 it dropped the code from its
// local cache and read it again from that standby: the old link, kept
// for LOCAL_CACHE_TTL. CI's history checker on three hosts saw this
// after the primary's host was removed (docs/46).
func TestHeardChangeIsReadFromThePrimary(t *testing.T) {
	opts, prefix := testRedis(t)
	behindDSN := testDatabase(t)
	openTestStoreOn(t, behindDSN) // the schema, and nothing the primary gets
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"REDIS_URL": fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB), "REDIS_KEY_PREFIX": prefix,
		"LOCAL_CACHE_TTL": "1h", "CREATE_RATE": "0",
	}
	editor, _, editorLogs := startRun(t, env)
	env["DATABASE_REPLICA_URL"] = behindDSN
	reader, _, readerLogs := startRun(t, env)
	for _, l := range []*syncBuffer{editorLogs, readerLogs} {
		m := metricsBase(t, l)
		waitUntil(t, "each instance to subscribe", func() bool { return seriesValue(t, m, "shortener_invalidation_purges_total") >= 1 })
	}
	// The reader's counts.
	m := metricsBase(t, readerLogs)
	received := func() float64 { return seriesValue(t, m, `shortener_invalidations_total{result="received"}`) }
	purges := func() float64 { return seriesValue(t, m, "shortener_invalidation_purges_total") }
	code, token := createVia(t, editor, `{"url":"https://go.dev/v1"}`)
	behind, err := sql.Open("postgres", behindDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer behind.Close()
	if _, err := behind.Exec(`INSERT INTO links (code, url) VALUES ($1, 'https://go.dev/v1')`, code); err != nil {
		t.Fatal(err)
	}
	if status, loc := statusOf(t, reader, code); status != 302 || loc != "https://go.dev/v1" {
		t.Fatalf("before the edit, the reader served %d %q; want 302 v1", status, loc)
	}
	// An edit the reader hears of. A busy machine can make go-redis
	// subscribe again, and the reader then purges its cache instead of
	// hearing the code (and cannot know it changed): edit again until it
	// hears one, at most ten times.
	changed := func() float64 { return seriesValue(t, m, `shortener_link_notifications_total{kind="changed"}`) }
	for i := 2; ; i++ {
		heard, purged, told := received(), purges(), changed()
		want := fmt.Sprintf("https://go.dev/v%d", i)
		if status := send(t, "PATCH", editor+"/api/links/"+code, fmt.Sprintf(`{"url":%q}`, want), token); status != 200 {
			t.Fatalf("PATCH = %d, want 200", status)
		}
		waitUntil(t, "the reader to hear of the edit, or to subscribe again", func() bool { return received() > heard || purges() > purged })
		if received() > heard {
			// Since step 49 the reader also hears of the edit from
			// Postgres and keeps the code as a change to tell Redis
			// again, which sends its lookups to the primary until that
			// is done (a quarter of a second or so): with step 46's mark
			// undone this test then passed (benchmarks/49-unfix-first.txt).
			// The mark is for the 30 s after.
			waitUntil(t, "the reader to hear of the edit from Postgres, and have no change waiting", func() bool {
				return changed() > told && seriesValue(t, m, "shortener_invalidations_pending") == 0
			})
			if status, loc := statusOf(t, reader, code); status != 302 || loc != want {
				t.Errorf("the reader served %d %q after hearing of the edit; want 302 %s (the primary's, not the standby's v1)", status, loc, want)
			}
			return
		}
		if i == 11 {
			t.Fatal("the reader subscribed again at each of ten edits, and heard none")
		}
	}
}
