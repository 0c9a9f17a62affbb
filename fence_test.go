package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// startTestStandby starts a throwaway primary (initdb) and a hot standby
// streaming from it (pg_basebackup), both on 127.0.0.1, both stopped and
// deleted when the test ends; it returns their admin URLs. No mock: what
// a standby's snapshot says is what this tests. It needs the server's
// programs (initdb, pg_basebackup, postgres: PG_BIN, PATH, or where Debian
// and Homebrew put them), and fails without them.
func startTestStandby(t *testing.T) (primary, standby string) {
	t.Helper()
	bin := findPostgresBin()
	if bin == "" || !executable(filepath.Join(bin, "pg_basebackup")) {
		t.Fatal("this test runs a Postgres primary and a standby of its own: it needs initdb, postgres and pg_basebackup " +
			"(Debian/Ubuntu: sudo apt-get install postgresql; or set PG_BIN to their folder)")
	}
	primary, stopPrimary, err := startTestPostgres(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stopPrimary(); err != nil {
			t.Errorf("stop the primary: %v", err)
		}
	})
	dir, err := makeTestFolder("standby")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = userCredential("postgres"); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	_, primaryPort, err := hostPort(primary)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	// -R: standby.signal and primary_conninfo, so that the copy starts as
	// a standby streaming from the primary; -X stream: the WAL made during
	// the copy, so that it is consistent.
	backup := exec.Command(filepath.Join(bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", primaryPort,
		"-U", "postgres", "-D", data, "-R", "-X", "stream", "-c", "fast")
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	backup.Dir = dir
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "hot_standby=on")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = dir
	srv, err := startServer("standby", filepath.Join(dir, "log"), cmd)
	if err != nil {
		t.Fatal(err)
	}
	standby = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("postgres", standby)
	if err != nil {
		t.Fatal(errors.Join(err, srv.stop(os.Kill)))
	}
	if err := errors.Join(srv.waitReady(db.PingContext), db.Close()); err != nil {
		t.Fatal(errors.Join(err, srv.stop(os.Kill)))
	}
	t.Cleanup(func() {
		if err := srv.stop(os.Interrupt); err != nil {
			t.Errorf("stop the standby: %v", err)
		}
	})
	return primary, standby
}

// hostPort is the host and port of a postgres:// URL.
func hostPort(dsn string) (host, port string, err error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return "", "", err
	}
	err = db.QueryRow(`SELECT host(inet_server_addr()), inet_server_port()::text`).Scan(&host, &port)
	return host, port, errors.Join(err, db.Close())
}

// onDatabase is dsn with its database replaced by name.
func onDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err) // the URLs here are the test's own
	}
	u.Path = "/" + name
	return u.String()
}

// TestStandbyBehindIsReadFromThePrimary runs a real standby, stops its
// replay (pg_wal_replay_pause: a standby stuck behind), and edits a link
// on the primary. Once the fence's oldest answer from the primary within
// replicaMaxLag is from after the edit, the standby must hold its row
// back, in each fenced statement (a lookup, one through a batch, a batch
// of several codes, a link's read), and the read must be the primary's; when replay goes on and the
// standby catches up, it answers again. Until step 47 nothing asked a
// standby how far behind it was: a read that reached it served the link
// as it was before the edit, for as long as it stayed behind.
func TestStandbyBehindIsReadFromThePrimary(t *testing.T) {
	primaryAdmin, standbyAdmin := startTestStandby(t)
	admin, err := sql.Open("postgres", primaryAdmin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.Close(); err != nil {
			t.Errorf("close admin: %v", err)
		}
	})
	if _, err := admin.Exec(`CREATE DATABASE fence`); err != nil {
		t.Fatal(err)
	}
	primary := openTestStoreAt(t, onDatabase(primaryAdmin, "fence"), testPool)
	ctx := context.Background()
	if err := primary.Save(ctx, "fenced1", NewLink{URL: "https://go.dev/before"}); err != nil {
		t.Fatal(err)
	}
	standbyDSN := onDatabase(standbyAdmin, "fence")
	// openReplicaOn waits for the database and the schema to be replayed.
	plain := openReplicaOn(t, standbyDSN)
	batched := openReplicaOn(t, standbyDSN)

	clock := time.Now()
	fence := newReplicaFence(primary.db, plain.db, nil)
	fence.now = func() time.Time { return clock }
	plain.fence.bound, batched.fence.bound = fence.bound, fence.bound
	if err := batched.startLookupBatch(ctx, 8, 2, noObserve{}); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(prometheus.NewRegistry())
	readers := map[string]*replicaReads{}
	for name, s := range map[string]*pgStore{"plain": plain, "batched": batched} {
		// Far above what a read takes on a busy machine: this is about
		// which server answers, not how fast.
		readers[name] = &replicaReads{Store: primary, replica: s, counts: m.replicaResults(), replicaWait: 10 * time.Second}
	}
	standby, err := sql.Open("postgres", standbyDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := standby.Close(); err != nil {
			t.Errorf("close standby: %v", err)
		}
	})
	onStandby := func() string {
		var url string
		if err := standby.QueryRow(`SELECT url FROM links WHERE code = 'fenced1'`).Scan(&url); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return url
	}
	waitUntil(t, "the standby to replay the link", func() bool { return onStandby() == "https://go.dev/before" })
	hits := func() float64 { return testutil.ToFloat64(m.replica.WithLabelValues("hit")) }
	// read checks each reader's Lookup and Link, and whether the standby
	// answered (a hit) or the primary (not a hit).
	read := func(when, want string, fromStandby bool) {
		t.Helper()
		// A batch of several codes (lookupBatchFencedSQL), sent as the
		// batch's workers send one: the row comes back from the standby
		// only when it may answer. (Lookups from one goroutine never
		// queue behind each other, so Lookup sends one code at a time.)
		many, err := batched.batch.queryMany(ctx, []*pendingLookup{{code: "fenced1"}, {code: "nothere"}})
		if err != nil {
			t.Fatalf("%s: batch of two on the standby: %v", when, err)
		}
		if got, ok := many["fenced1"]; ok != fromStandby || (ok && got.URL != want) {
			t.Errorf("%s: batch of two on the standby: fenced1 %q (answered: %v); want answered %v with %s", when, got.URL, ok, fromStandby, want)
		}
		for name, r := range readers {
			before := hits()
			got, err := r.Lookup(ctx, "fenced1")
			if err != nil || got.URL != want {
				t.Errorf("%s: %s: lookup = %q, %v; want %s", name, when, got.URL, err, want)
			}
			l, err := r.Link(ctx, "fenced1")
			if err != nil || l.URL != want {
				t.Errorf("%s: %s: link = %q, %v; want %s", name, when, l.URL, err, want)
			}
			if got := hits() - before; (got == 2) != fromStandby {
				t.Errorf("%s: %s: %v of 2 reads answered by the standby; want all of them %v", name, when, got, fromStandby)
			}
		}
	}

	fence.check(ctx)
	if got := fence.behind.Load(); got != fenceHeld {
		t.Fatalf("a standby that has caught up: fence state %d, want %d (held)", got, fenceHeld)
	}
	read("caught up", "https://go.dev/before", true)

	// Stop the standby's replay, and wait until it has stopped.
	if _, err := standby.Exec(`SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the standby's replay to pause", func() bool {
		var state string
		if err := standby.QueryRow(`SELECT pg_get_wal_replay_pause_state()`).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state == "paused"
	})
	if _, err := primary.db.Exec(`UPDATE links SET url = 'https://go.dev/after', version = version + 1 WHERE code = 'fenced1'`); err != nil {
		t.Fatal(err)
	}
	// Within replicaMaxLag of the edit the bound is the fence's answer
	// from before it: the standby may still answer (steps 36 and 46 send
	// the codes an instance changed or heard of to the primary then).
	read("paused, the bound from before the edit", "https://go.dev/before", true)
	// Past it, the oldest answer within the window is from after the edit.
	clock = clock.Add(2 * fence.maxLag)
	fence.check(ctx)
	if got := fence.behind.Load(); got != fenceBehind {
		t.Errorf("a standby paused behind the bound: fence state %d, want %d (behind)", got, fenceBehind)
	}
	if got := onStandby(); got != "https://go.dev/before" {
		t.Fatalf("the paused standby has %q; the test needs it behind", got)
	}
	read("paused, past the bound", "https://go.dev/after", false)

	// No answer from the primary within the window (a failover): no bound,
	// and the standby answers as it is.
	clock = clock.Add(2 * fence.maxLag)
	if got := fence.bound(); got != "0" {
		t.Errorf("no answer from the primary within %v: bound %q, want 0", fence.maxLag, got)
	}
	read("paused, no answer from the primary", "https://go.dev/before", true)

	// Replay goes on: once the standby holds the bound, it answers again.
	if _, err := standby.Exec(`SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	fence.check(ctx)
	waitUntil(t, "the standby to catch up with the bound", func() bool {
		fence.check(ctx)
		return fence.behind.Load() == fenceHeld
	})
	read("resumed", "https://go.dev/after", true)
}
