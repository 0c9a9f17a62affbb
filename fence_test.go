package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// standbyDatabase starts a primary and a standby of the test's own
// (startTestStandby), makes the database name on the primary, and
// returns its URL on each.
func standbyDatabase(t *testing.T, name string) (primary, standby string) {
	t.Helper()
	primaryAdmin, standbyAdmin := startTestStandby(t)
	admin, err := sql.Open("postgres", primaryAdmin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(`CREATE DATABASE ` + name)
	if err := errors.Join(err, admin.Close()); err != nil {
		t.Fatal(err)
	}
	return onDatabase(primaryAdmin, name), onDatabase(standbyAdmin, name)
}

// urlOn is code's URL as db has it ("" for no row).
func urlOn(t *testing.T, db *sql.DB, code string) string {
	t.Helper()
	var url string
	if err := db.QueryRow(`SELECT url FROM links WHERE code = $1`, code).Scan(&url); err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return url
}

// pauseReplay stops the standby's replay (a standby stuck behind), waits
// until it has stopped, and lets it go on when the test ends.
func pauseReplay(t *testing.T, standby *sql.DB) {
	t.Helper()
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
	t.Cleanup(func() {
		if _, err := standby.Exec(`SELECT pg_wal_replay_resume()`); err != nil {
			t.Errorf("resume the standby's replay: %v", err)
		}
	})
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
	primaryDSN, standbyDSN := standbyDatabase(t, "fence")
	primary := openTestStoreAt(t, primaryDSN, testPool)
	ctx := context.Background()
	if err := primary.Save(ctx, "fenced1", NewLink{URL: "https://go.dev/before"}); err != nil {
		t.Fatal(err)
	}
	// openReplicaOn waits for the database and the schema to be replayed.
	plain := openReplicaOn(t, standbyDSN)
	batched := openReplicaOn(t, standbyDSN)

	clock := time.Now()
	fence := newReplicaFence(primary.db, plain.db, replicaMaxLag, nil)
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
	onStandby := func() string { return urlOn(t, standby, "fenced1") }
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

	pauseReplay(t, standby)
	if _, err := primary.db.Exec(`UPDATE links SET url = 'https://go.dev/after', version = version + 1 WHERE code = 'fenced1'`); err != nil {
		t.Fatal(err)
	}
	// Within replicaMaxLag of the edit the bound is the fence's answer
	// from before it: the standby may still answer (steps 36 and 46 send
	// the codes an instance changed or heard of to the primary then).
	read("paused, the bound from before the edit", "https://go.dev/before", true)
	// A purge raises the fence (step 48): until the primary's next
	// answer no standby holds the bound, and after it the standby must
	// hold that answer's, which the paused one does not.
	fence.raise()
	read("paused, raised, no answer since", "https://go.dev/after", false)
	fence.check(ctx)
	read("paused, raised, answered since", "https://go.dev/after", false)
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

// TestFenceRaise: the bound after a raise, on the fence's own clock. No
// Postgres: the bound is arithmetic on the primary's answers, added here
// as sample would add them (the standby test above checks what a real
// standby makes of it).
func TestFenceRaise(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	clock := t0
	at := func(d time.Duration) { clock = t0.Add(d) }
	f := newReplicaFence(nil, nil, time.Second, nil)
	f.now = func() time.Time { return clock }
	want := func(when, bound string) {
		t.Helper()
		if got := f.bound(); got != bound {
			t.Errorf("%s: bound %s, want %s", when, got, bound)
		}
	}
	answer := func(xmax uint64) { f.add(fenceSample{at: clock, raises: f.raises, xmax: xmax}) }
	answer(100)
	at(300 * time.Millisecond)
	answer(110)
	want("two answers", "100")

	// The raise at the same time as an answer asked before it (a
	// clock's tick can hold both): that answer does not count.
	at(400 * time.Millisecond)
	answer(115)
	f.raise()
	select {
	case <-f.wake:
	default:
		t.Error("raise did not ask run for an answer now")
	}
	f.raise() // a second raise while one is asked for must not block
	f.raise()
	want("raised, no answer since", fenceAll)
	at(450 * time.Millisecond)
	answer(120)
	want("raised, an answer since", "120")
	// The window's oldest answer (110) is from before the raise: the
	// answer after it still decides.
	at(1200 * time.Millisecond)
	want("the window's oldest from before the raise", "120")
	// Past maxLag after the raise, the window starts after it: its
	// oldest answer decides, as without a raise.
	at(1401 * time.Millisecond)
	want("the window past the raise", "120")
	at(1500 * time.Millisecond)
	answer(130)
	want("the window past the raise, a newer answer", "130")

	// A raise, and no answer from the primary within maxLag (a failover):
	// every read is the primary's until then, and after it no bound, as
	// without the raise.
	at(2000 * time.Millisecond)
	f.raise()
	want("raised again, no answer since", fenceAll)
	at(3000 * time.Millisecond)
	want("raised again, maxLag and no answer since", fenceAll)
	at(3001 * time.Millisecond)
	want("raised again, past maxLag and no answer since", "0")
}

// TestUnheardChangeAfterAPurgeIsReadFromThePrimary: an instance that
// reads from a standby misses a change (made on the primary and never
// published, as one published while it was not subscribed would be),
// and its subscription breaks and is made again, which purges its local
// cache. The next lookup must not read the link from the standby as it
// was: step 47 left a standby that lags by less than REPLICA_MAX_LAG
// free to answer it then, and the local cache kept that answer for
// LOCAL_CACHE_TTL (docs/47). Here REPLICA_MAX_LAG is an hour, so that
// without step 48's raise the bound stays the one from before the change
// however slow the machine; Redis is out of lookups, so that the
// standby's answer is the one the lookup gets.
func TestUnheardChangeAfterAPurgeIsReadFromThePrimary(t *testing.T) {
	primaryDSN, standbyDSN := standbyDatabase(t, "unheard")
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	base, _, logs := startRun(t, map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": primaryDSN, "DATABASE_REPLICA_URL": standbyDSN,
		"REDIS_URL": fmt.Sprintf("redis://%s/%d", proxy.addr(), opts.DB), "REDIS_KEY_PREFIX": prefix,
		"REDIS_LOOKUPS": "false", "LOCAL_CACHE_TTL": "1h", "REPLICA_MAX_LAG": "1h", "CREATE_RATE": "0",
	})
	m := metricsBase(t, logs)
	purges := func() float64 { return seriesValue(t, m, "shortener_invalidation_purges_total") }
	waitUntil(t, "the instance to subscribe", func() bool { return purges() >= 1 })

	primary, err := sql.Open("postgres", primaryDSN)
	if err != nil {
		t.Fatal(err)
	}
	standby, err := sql.Open("postgres", standbyDSN)
	if err != nil {
		t.Fatal(errors.Join(err, primary.Close()))
	}
	t.Cleanup(func() {
		if err := errors.Join(primary.Close(), standby.Close()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	const code = "unheard1"
	if _, err := primary.Exec(`INSERT INTO links (code, url) VALUES ($1, 'https://go.dev/v1')`, code); err != nil {
		t.Fatal(err)
	}
	onStandby := func() string { return urlOn(t, standby, code) }
	waitUntil(t, "the standby to replay the link", func() bool { return onStandby() == "https://go.dev/v1" })
	// Until the instance hears of the new link from Postgres (step 30's
	// listener), its Bloom filter may answer 404.
	waitUntil(t, "the instance to serve the link", func() bool {
		status, loc := statusOf(t, base, code)
		return status == 302 && loc == "https://go.dev/v1"
	})

	// The standby stops replaying, behind by less than REPLICA_MAX_LAG;
	// then the change, on the primary alone, and never published.
	pauseReplay(t, standby)
	// Unheard: since step 49 Postgres tells every instance of an edit,
	// whoever makes it (linklisten.go), unless its trigger is off, as
	// for an edit made while no instance listened. Since step 50 only the
	// table's owner turns it off (session_replication_role no longer
	// does): here, for this transaction alone.
	unheard, err := primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE links DISABLE TRIGGER links_announce_change`,
		`UPDATE links SET url = 'https://go.dev/v2', version = version + 1 WHERE code = '` + code + `'`,
		`ALTER TABLE links ENABLE ALWAYS TRIGGER links_announce_change`} {
		if _, err := unheard.Exec(q); err != nil {
			t.Fatal(errors.Join(err, unheard.Rollback()))
		}
	}
	if err := unheard.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := onStandby(); got != "https://go.dev/v1" {
		t.Fatalf("the paused standby has %q; the test needs it behind", got)
	}
	if status, loc := statusOf(t, base, code); status != 302 || loc != "https://go.dev/v1" {
		t.Fatalf("a change not heard: %d %q, want 302 v1 still, from the local cache", status, loc)
	}

	// The subscription breaks and is made again: the local cache is purged.
	before := purges()
	proxy.drop()
	waitUntil(t, "the subscription to be made again", func() bool { return purges() > before })
	if status, loc := statusOf(t, base, code); status != 302 || loc != "https://go.dev/v2" {
		t.Errorf("after the purge: %d %q, want 302 v2 (the primary's; v1 is the paused standby's)", status, loc)
	}
}

// TestFenceRaiseIsAnsweredSoon: a raise's question goes to the primary
// at once, and when it fails it is asked again soon, not at the window's
// next quarter; and a question to the standby that hangs does not hold
// it up. The window is an hour here, so that its ticks never come during
// the test: without the retry, or with one loop asking both servers in
// turn (step 48's first version), every read would stay the primary's
// for 15 minutes.
func TestFenceRaiseIsAnsweredSoon(t *testing.T) {
	dsn := testDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.addr()
	primary, err := sql.Open("postgres", viaProxy.String())
	if err != nil {
		t.Fatal(err)
	}
	standby, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(errors.Join(err, primary.Close()))
	}
	// The standby's only connection, held by the test: the fence's
	// question to the standby waits for it until the test ends.
	standby.SetMaxOpenConns(1)
	held, err := standby.Conn(context.Background())
	if err != nil {
		t.Fatal(errors.Join(err, primary.Close(), standby.Close()))
	}
	logs := &syncBuffer{}
	f := newReplicaFence(primary, standby, time.Hour, &sampledLog{log: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := errors.Join(held.Close(), primary.Close(), standby.Close()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	waitUntil(t, "the primary's first answer", func() bool { return f.bound() != "0" })

	proxy.refuse()
	f.raise()
	if got := f.bound(); got != fenceAll {
		t.Fatalf("raised, the primary refusing: bound %s, want %s", got, fenceAll)
	}
	waitUntil(t, "the raise's question to fail", func() bool {
		return strings.Contains(logs.String(), "replica fence: the primary did not say")
	})
	if got := f.bound(); got != fenceAll {
		t.Fatalf("raised, the question failed: bound %s, want %s", got, fenceAll)
	}
	proxy.restore()
	waitUntil(t, "an answer asked after the raise", func() bool { return f.bound() != fenceAll })
	if got := f.bound(); got == "0" {
		t.Errorf("answered after the raise: bound %s, want the answer's xmax", got)
	}
}

// TestHeardWithoutRedisIsReadFromThePrimary: an instance with a standby
// and no Redis hears of a psql edit from Postgres (step 49), drops the
// code, and must read it from the primary, not from its standby, which
// has stopped replaying before the edit. Until step 50 the mark that
// sends such a read to the primary for 30 s (step 46, heard.go) lived in
// Redis's layer alone: this instance read the link as it was from its
// standby and kept it for LOCAL_CACHE_TTL (an hour here). REPLICA_MAX_LAG
// is an hour, so that the fence's bound stays older than the edit
// however slow the machine, and the paused standby answers.
func TestHeardWithoutRedisIsReadFromThePrimary(t *testing.T) {
	primaryDSN, standbyDSN := standbyDatabase(t, "heardnoredis")
	base, _, logs := startRun(t, map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": primaryDSN, "DATABASE_REPLICA_URL": standbyDSN,
		"LOCAL_CACHE_TTL": "1h", "REPLICA_MAX_LAG": "1h", "CREATE_RATE": "0",
	})
	m := metricsBase(t, logs)
	primary, standby := openBehind(t, primaryDSN), openBehind(t, standbyDSN)
	const code = "heardnr1"
	if _, err := primary.Exec(`INSERT INTO links (code, url) VALUES ($1, 'https://go.dev/v1')`, code); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the standby to replay the link", func() bool { return urlOn(t, standby, code) == "https://go.dev/v1" })
	waitUntil(t, "the instance to serve the link", func() bool { return redirectsTo(t, base, code, "https://go.dev/v1") })

	pauseReplay(t, standby)
	changed := func() float64 { return metricValue(t, m, `shortener_link_notifications_total{kind="changed"}`) }
	told := changed()
	if _, err := primary.Exec(`UPDATE links SET url = 'https://go.dev/v2' WHERE code = $1`, code); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the instance to hear of the edit from Postgres", func() bool { return changed() > told })
	if got := urlOn(t, standby, code); got != "https://go.dev/v1" {
		t.Fatalf("the paused standby has %q; the test needs it behind", got)
	}
	if status, loc := statusOf(t, base, code); status != 302 || loc != "https://go.dev/v2" {
		t.Errorf("after hearing of the edit: %d %q, want 302 v2 (the primary's, not the paused standby's v1)", status, loc)
	}
}
