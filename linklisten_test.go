package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openBehind opens a connection of the test's own to dsn: another client
// of the same database (psql, a script), which the app does not know of.
func openBehind(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close the test's own connection: %v", err)
		}
	})
	return db
}

// insertOld inserts links as psql would, each with a created_at an hour
// old: the mark of a transaction that began long before it committed
// (a psql session left open, an import with a long DB_TIMEOUT), which no
// sweep reads, since it reads only the last DB_TIMEOUT + 5 s.
func insertOld(t *testing.T, db *sql.DB, codes ...string) {
	t.Helper()
	values := make([]string, len(codes))
	args := make([]any, 0, 2*len(codes))
	for i, c := range codes {
		values[i] = fmt.Sprintf("($%d, $%d, now() - interval '1 hour')", 2*i+1, 2*i+2)
		args = append(args, c, "https://go.dev/behind/"+c)
	}
	if _, err := db.Exec(`INSERT INTO links (code, url, created_at) VALUES `+strings.Join(values, ", "), args...); err != nil {
		t.Fatal(err)
	}
}

// waitRedirect waits until base redirects code to its insertOld URL.
func waitRedirect(t *testing.T, base, code string) {
	t.Helper()
	waitUntil(t, "/"+code+" to redirect", func() bool { return get(t, base, code) == http.StatusFound })
	redirectTo(t, base, code, "https://go.dev/behind/"+code)
}

// throughProxy starts a proxy to dsn's server and returns it with dsn
// pointed at it: the app's way to Postgres, which the test can cut,
// refuse or hush.
func throughProxy(t *testing.T, dsn string) (*tcpProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	via := *u
	via.Host = proxy.addr()
	return proxy, via.String()
}

// startTrusted starts an instance on dsn, with the sweep every second
// (so that the old code would have found what a sweep can find), and
// waits for its filter to be trusted.
func startTrusted(t *testing.T, dsn string) (base, mbase string, logs *syncBuffer) {
	t.Helper()
	return startTrustedSweeping(t, dsn, "1s")
}

func startTrustedSweeping(t *testing.T, dsn, sweep string) (base, mbase string, logs *syncBuffer) {
	t.Helper()
	return startTrustedWith(t, dsn, map[string]string{"BLOOM_SWEEP": sweep})
}

// startTrustedWith is startTrusted with settings of the test's own.
func startTrustedWith(t *testing.T, dsn string, env map[string]string) (base, mbase string, logs *syncBuffer) {
	t.Helper()
	env["ADDR"], env["DATABASE_URL"] = "127.0.0.1:0", dsn
	base, _, logs = startRun(t, env)
	mbase = metricsBase(t, logs)
	waitUntil(t, "the filter to be trusted", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 1 })
	return base, mbase, logs
}

// TestLinksFromElsewhereAreFound: rows that psql (or an import) inserts,
// one at a time, hundreds in one statement, ten thousand and one (a bulk
// load), each in a transaction that began an hour before, are found by an instance whose filter is trusted: until
// step 30, each answered 404 there until it restarted (issue 24, item 6).
// A code is not found before its transaction commits.
func TestLinksFromElsewhereAreFound(t *testing.T) {
	dsn := testDatabase(t)
	base, mbase, _ := startTrusted(t, dsn)
	db := openBehind(t, dsn)

	// One row, looked up (404) before it exists.
	one := newCode()
	if got := get(t, base, one); got != http.StatusNotFound {
		t.Fatalf("GET /%s before its insert = %d, want 404", one, got)
	}
	insertOld(t, db, one)
	waitRedirect(t, base, one)

	// Uncommitted, then committed.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	late := newCode()
	if _, err := tx.Exec(`INSERT INTO links (code, url, created_at) VALUES ($1, $2, now() - interval '1 hour')`,
		late, "https://go.dev/behind/"+late); err != nil {
		t.Fatal(err)
	}
	if got := get(t, base, late); got != http.StatusNotFound {
		t.Fatalf("GET /%s before its commit = %d, want 404", late, got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitRedirect(t, base, late)

	// 450 in one statement: three messages of codes.
	many := make([]string, 450)
	for i := range many {
		many[i] = newCode()
	}
	insertOld(t, db, many...)
	for _, c := range many {
		waitRedirect(t, base, c)
	}
	if got := metricValue(t, mbase, `shortener_link_notifications_total{kind="codes"}`); got != 5 {
		t.Errorf(`link_notifications_total{kind="codes"} = %v, want 5 (1 + 1 + 3)`, got)
	}
	// 10,001 in one statement (a bulk load): told as "*", and every code
	// read again.
	prefix := strings.ToLower(newCode())
	if _, err := db.Exec(`INSERT INTO links (code, url, created_at)
SELECT $1 || g, 'https://go.dev/behind/' || $1 || g, now() - interval '1 hour' FROM generate_series(1, 10001) AS g`, prefix); err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{1, 5000, 10001} {
		waitRedirect(t, base, fmt.Sprint(prefix, g))
	}
	if got := metricValue(t, mbase, `shortener_link_notifications_total{kind="all"}`); got != 1 {
		t.Errorf(`link_notifications_total{kind="all"} = %v, want 1`, got)
	}
	// A code never inserted is still answered 404 by the filter.
	waitUntil(t, "the filter to be trusted again", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 1 })
	if got := get(t, base, newCode()); got != http.StatusNotFound {
		t.Errorf("GET of a new code = %d, want 404", got)
	}
}

// TestForgedNotificationsRedirectNowhere: whoever can connect to the
// database can NOTIFY on the channel. A code that is not in links is
// still a 404 (it is only a "maybe" now, which Postgres answers); a
// payload that is not codes is ignored and counted.
func TestForgedNotificationsRedirectNowhere(t *testing.T) {
	dsn := testDatabase(t)
	base, mbase, _ := startTrusted(t, dsn)
	db := openBehind(t, dsn)
	forged := newCode()
	for _, p := range []string{forged, "not a code!", strings.Repeat("x", 40), ""} {
		if _, err := db.Exec(`SELECT pg_notify($1, $2)`, linksChannel, p); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the forged messages to arrive", func() bool {
		return metricValue(t, mbase, `shortener_link_notifications_total{kind="bad"}`) == 3
	})
	if got := metricValue(t, mbase, `shortener_link_notifications_total{kind="codes"}`); got != 1 {
		t.Errorf(`link_notifications_total{kind="codes"} = %v, want 1 (the forged code)`, got)
	}
	if got := get(t, base, forged); got != http.StatusNotFound {
		t.Errorf("GET of a forged code = %d, want 404", got)
	}
}

// TestLinksAddedWhileDeafAreFound: the listener's connection is cut, and
// a link is inserted before it can reconnect: Postgres does not keep
// notifications for a session that is not there, so only a read of every
// code finds it. The filter is not trusted from the cut until that read
// ends, and then the link is found.
func TestLinksAddedWhileDeafAreFound(t *testing.T) {
	dsn := testDatabase(t)
	proxy, via := throughProxy(t, dsn)
	base, mbase, logs := startTrusted(t, via)
	db := openBehind(t, dsn)
	built := strings.Count(logs.String(), `msg="bloom filter built"`)

	proxy.refuse()
	proxy.drop()
	waitUntil(t, "the filter to stop trusting", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 0 })
	code := newCode()
	insertOld(t, db, code)
	proxy.restore()
	waitUntil(t, "the filter to be trusted again", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 1 })
	if got := strings.Count(logs.String(), `msg="bloom filter built"`); got <= built {
		t.Errorf("filter built %d times, %d before the cut: want a build after it", got, built)
	}
	waitRedirect(t, base, code)
	if !strings.Contains(logs.String(), "links listener: connection lost") {
		t.Errorf("log does not say the listener lost its connection:\n%s", logs)
	}
}

// TestSilentListenerIsReplaced: the listener's connection goes silent
// (open, and nothing answered either way: a host gone without a word),
// and a link is inserted. Nothing tells lib/pq: its filter stayed
// trusted and deaf, and the link answered 404 until TCP gave up. An
// unanswered ping now closes that connection; the new one reads every
// code again, and the link is found.
func TestSilentListenerIsReplaced(t *testing.T) {
	dsn := testDatabase(t)
	proxy, via := throughProxy(t, dsn)
	base, _, logs := startTrustedWith(t, via, map[string]string{"BLOOM_SWEEP": "1h", "LISTEN_PING": "300ms"})
	db := openBehind(t, dsn)
	// The listener's session: its last query is its LISTEN, or a ping
	// (an empty query); the pool's are lookups. Its client_port is the
	// proxy's end of that connection.
	var port int
	waitUntil(t, "one listening session", func() bool {
		var n int
		if err := db.QueryRow(`SELECT count(*), coalesce(min(client_port), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND (query LIKE 'LISTEN%' OR query = '')`).Scan(&n, &port); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})

	proxy.hush(port)
	code := newCode()
	insertOld(t, db, code)
	waitRedirect(t, base, code)
	if !strings.Contains(logs.String(), "links listener: no answer to a ping") {
		t.Errorf("log does not say a ping went unanswered:\n%s", logs)
	}
}

// TestListenerStopsWhilePostgresIsSilent: the listener's connection is
// lost, and the new one is taken and never answered (a server that
// accepts and hangs). lib/pq holds its Listener's lock while it connects,
// and its Close waits for that lock: the instance did not stop (run gave up
// 25 s after its cancel). With no
// ping to close it (LISTEN_PING far away), the stop alone must end it.
func TestListenerStopsWhilePostgresIsSilent(t *testing.T) {
	dsn := testDatabase(t)
	proxy, via := throughProxy(t, dsn)
	_, stop, logs := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": via,
		"BLOOM_SWEEP": "1h", "LISTEN_PING": "1m", "DB_TIMEOUT": "1s"})
	waitUntil(t, "the listener to listen", func() bool { return strings.Contains(logs.String(), "links listener: listening") })

	proxy.stall()
	before := proxy.accepted.Load()
	proxy.drop()
	waitUntil(t, "the listener to lose its connection", func() bool { return strings.Contains(logs.String(), "links listener: connection lost") })
	// Nothing else asks for a connection now: the next one is the
	// listener's, held open and unanswered.
	waitUntil(t, "a new connection, held", func() bool { return proxy.accepted.Load() > before })
	// stop fails if run has not returned 25 s after its cancel.
	if err := stop(); err != nil {
		t.Errorf("the instance did not stop, its listener connecting to a server that does not answer: %v", err)
	}
}

// TestImportedLinksAreFound: `shortener import` beside a running instance
// whose sweep is an hour away, so that only the trigger can tell it: every
// imported link redirects there, told by name (a chunk of 5,000 is 25
// messages), with no read of every code again.
func TestImportedLinksAreFound(t *testing.T) {
	dsn := testDatabase(t)
	base, mbase, logs := startTrustedSweeping(t, dsn, "1h")
	built := strings.Count(logs.String(), `msg="bloom filter built"`)
	const n = 2*importChunk + 7
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "https://go.dev/imported/%d\n", i)
	}
	file := filepath.Join(t.TempDir(), "urls.txt")
	if err := os.WriteFile(file, []byte(in.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := runImport(context.Background(), []string{file}, importEnv(dsn), nil, &out, &errOut); err != nil {
		t.Fatalf("import: %v (stderr %q)", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines printed, want %d", len(lines), n)
	}
	for i := 0; i < n; i += 1009 {
		code, _, _ := strings.Cut(lines[i], "\t")
		waitUntil(t, "/"+code+" to redirect", func() bool { return get(t, base, code) == http.StatusFound })
		redirectTo(t, base, code, fmt.Sprintf("https://go.dev/imported/%d", i))
	}
	if got := metricValue(t, mbase, `shortener_link_notifications_total{kind="all"}`); got != 0 {
		t.Errorf(`link_notifications_total{kind="all"} = %v, want 0: chunks of %d are told by name`, got, importChunk)
	}
	if got := strings.Count(logs.String(), `msg="bloom filter built"`); got != built {
		t.Errorf("filter built %d times, %d before the import: want no build", got, built)
	}
}

// TestLongCodesDoNotFailInserts: NOTIFY refuses a message of 8,000 bytes
// or more, and with it the statement whose trigger sent it. Codes longer
// than the app's 32 characters can come from psql or a restore: 200 of
// 40 characters in one statement (a message of 8,199 bytes), and one of
// 9,000, must still go in (each is told as "*").
func TestLongCodesDoNotFailInserts(t *testing.T) {
	s := openTestStore(t)
	if _, err := s.db.Exec(`INSERT INTO links (code, url)
SELECT repeat('L', 37) || lpad(g::text, 3, '0'), 'https://go.dev/long' FROM generate_series(1, 200) AS g`); err != nil {
		t.Fatalf("200 codes of 40 characters: %v", err)
	}
	if _, err := s.db.Exec(`INSERT INTO links (code, url) VALUES (repeat('x', 9000), 'https://go.dev/longer')`); err != nil {
		t.Fatalf("a code of 9,000 characters: %v", err)
	}
}
