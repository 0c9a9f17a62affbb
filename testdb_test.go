package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// testDatabase makes a new, empty database for the calling test on the
// server TEST_DATABASE_URL names, drops it when the test ends, and returns
// its URL. Unset, the test is skipped, unless CI is set: CI must run every
// test. Set but unreachable, the test fails.
func testDatabase(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("TEST_DATABASE_URL")
	if admin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("TEST_DATABASE_URL is not set, and CI must run every test against Postgres")
		}
		t.Skip("TEST_DATABASE_URL is not set; skipping a test that needs Postgres " +
			"(e.g. TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("TEST_DATABASE_URL %q is not a postgres:// URL", admin)
	}
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatalf("open TEST_DATABASE_URL: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close admin connection: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("TEST_DATABASE_URL is set but Postgres does not answer: %v", err)
	}
	name := "shortener_test_" + strings.ToLower(rand.Text()[:12])
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// testPool is the pool the app uses by default, but with deadlines far
// above what any call takes on a slow, busy machine: a test of a deadline
// sets its own. (With the default 500 ms, a test run beside other work
// failed with 503s now and then.)
var testPool = func() poolConfig {
	p := defaultConfig().pool
	p.timeout, p.replyTimeout = 10*time.Second, 15*time.Second
	return p
}()

// openTestStore returns a pgStore on a fresh database, closed at the end.
func openTestStore(t testing.TB) *pgStore {
	t.Helper()
	return openTestStoreWith(t, testPool)
}

func openTestStoreWith(t testing.TB, pool poolConfig) *pgStore {
	t.Helper()
	return openTestStoreAt(t, testDatabase(t), pool)
}

// openTestStoreAt returns a pgStore on dsn, closed at the end: for a test
// that opens more than one store, or clients of its own, on one database.
func openTestStoreAt(t testing.TB, dsn string, pool poolConfig) *pgStore {
	t.Helper()
	s, err := openPostgres(context.Background(), dsn, pool)
	if err != nil {
		t.Fatalf("openPostgres: %v", err)
	}
	closeOnCleanup(t, s)
	return s
}

// closeOnCleanup closes s when the test ends, failing the test if that fails.
func closeOnCleanup(t testing.TB, s *pgStore) {
	t.Helper()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
}

// forEachStore runs fn as a subtest against each Store: the handlers must
// behave the same whichever holds the links.
func forEachStore(t *testing.T, fn func(t *testing.T, store Store)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) { fn(t, newMemoryStore()) })
	t.Run("postgres", func(t *testing.T) { fn(t, openTestStore(t)) })
	t.Run("postgres unprepared", func(t *testing.T) {
		pool := testPool
		pool.prepare = false
		fn(t, openTestStoreWith(t, pool))
	})
	t.Run("postgres, group commit", func(t *testing.T) {
		s := openTestStore(t)
		if err := s.startGroupCommit(context.Background(), defaultCreateBatch, nil); err != nil {
			t.Fatal(err)
		}
		fn(t, s)
	})
	t.Run("postgres, lookups in batches", func(t *testing.T) {
		s := openTestStore(t)
		if err := s.startLookupBatch(context.Background(), defaultLookupBatch, defaultLookupWorkers, nil); err != nil {
			t.Fatal(err)
		}
		fn(t, s)
	})
	t.Run("postgres, lookups in batches, from a replica", func(t *testing.T) {
		// As openStore wires LOOKUP_BATCH with a replica: both batched.
		dsn := testDatabase(t)
		primary, replica := openTestStoreOn(t, dsn), openReplicaOn(t, dsn)
		for _, s := range []*pgStore{primary, replica} {
			if err := s.startLookupBatch(context.Background(), defaultLookupBatch, defaultLookupWorkers, nil); err != nil {
				t.Fatal(err)
			}
		}
		fn(t, &replicaReads{Store: primary, replica: replica, counts: (*metrics)(nil).replicaResults()})
	})
	t.Run("postgres, reads from a replica", func(t *testing.T) {
		// The same database opened as a replica is: read-only, lookup
		// prepared only. (replica_test.go has a replica that is behind.)
		dsn := testDatabase(t)
		fn(t, &replicaReads{Store: openTestStoreOn(t, dsn), replica: openReplicaOn(t, dsn), counts: (*metrics)(nil).replicaResults()})
	})
	t.Run("postgres+redis, coalesced", func(t *testing.T) {
		opts, prefix := testRedis(t)
		c, _ := newTestCache(t, openTestStore(t), opts, prefix, discardLog)
		fn(t, newFlightStore(c, noCount{}, nil))
	})
	t.Run("postgres+redis", func(t *testing.T) {
		opts, prefix := testRedis(t)
		c, _ := newTestCache(t, openTestStore(t), opts, prefix, discardLog)
		fn(t, c)
	})
	t.Run("postgres, negative cache, bloom filter", func(t *testing.T) {
		// As run wires them with no Redis: one instance, its filter built
		// before the test begins.
		pg := openTestStore(t)
		neg := newNegCache(pg, 1000, defaultNegCacheTTL, true, noCount{})
		tb := &testBloom{bloomStore: newBloomStore(newFlightStore(neg, noCount{}, nil), pg.db, defaultBloomFPRate, true, noSweep,
			(*metrics)(nil).bloomCounts(), discardLog)}
		tb.start(t)
		waitTrusted(t, tb.bloomStore, true)
		feed := newCodeFeed(nil, nil, "", defaultBloomAckTimeout, tb.bloomStore, neg, (*metrics)(nil).bloomCounts(), discardLog)
		fn(t, &announcingStore{Store: tb.bloomStore, feed: feed})
	})
	t.Run("postgres+redis+local", func(t *testing.T) {
		opts, prefix := testRedis(t)
		c, _ := newTestCache(t, openTestStore(t), opts, prefix, discardLog)
		l, err := newLocalCache(c, minLocalCacheBytes, defaultLocalCacheTTL, (*metrics)(nil).cacheResults("local"), nil)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, l)
	})
}

// countLinks returns how many links the store holds.
func countLinks(t *testing.T, store Store) int {
	t.Helper()
	if a, ok := store.(*announcingStore); ok {
		store = a.Store
	}
	if b, ok := store.(*bloomStore); ok {
		store = b.Store
	}
	if c, ok := store.(*localCache); ok {
		store = c.Store
	}
	if f, ok := store.(*flightStore); ok {
		store = f.Store
	}
	if n, ok := store.(*negCache); ok {
		store = n.Store
	}
	if c, ok := store.(*cachedStore); ok {
		store = c.Store
	}
	if r, ok := store.(*replicaReads); ok {
		store = r.Store
	}
	switch s := store.(type) {
	case *memoryStore:
		s.mu.RLock()
		defer s.mu.RUnlock()
		return len(s.links)
	case *pgStore:
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM links`).Scan(&n); err != nil {
			t.Fatalf("count links: %v", err)
		}
		return n
	default:
		panic(fmt.Sprintf("countLinks: unknown store %T", store))
	}
}
