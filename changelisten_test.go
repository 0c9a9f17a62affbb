package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lib/pq"
)

// Step 49: edits that no instance made, or that no instance published,
// heard from Postgres (linklisten.go, changesChannel).

// redirectsTo says whether base answers code with a 302 to want now.
func redirectsTo(t *testing.T, base, code, want string) bool {
	t.Helper()
	status, loc := statusOf(t, base, code)
	return status == http.StatusFound && loc == want
}

// TestEditsFromElsewhereReachEveryCache: an edit made in psql (an
// operator taking a phishing link down), never published, reaches every
// instance's memory and Redis. Until step 49 each instance served the
// link as it was for LOCAL_CACHE_TTL (an hour here) and Redis for
// CACHE_TTL: the edit reached no cache. Redis is checked by an instance
// started after the edit, whose first lookup reads it (REDIS_LOOKUPS).
// Then a delete, made the same way, and a DELETE, which is refused.
func TestEditsFromElsewhereReachEveryCache(t *testing.T) {
	dsn := testDatabase(t)
	opts, prefix := testRedis(t)
	env := func() map[string]string {
		return map[string]string{
			"REDIS_URL": fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB), "REDIS_KEY_PREFIX": prefix,
			"REDIS_LOOKUPS": "true", "LOCAL_CACHE_TTL": "1h", "CACHE_TTL": "1h", "BLOOM_SWEEP": "1h",
		}
	}
	a, _, _ := startTrustedWith(t, dsn, env())
	b, mb, _ := startTrustedWith(t, dsn, env())
	db := openBehind(t, dsn)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	code := newCode()
	insertOld(t, db, code)
	for _, base := range []string{a, b} {
		waitRedirect(t, base, code) // now in its memory
	}
	key := prefix + cacheKeyPrefix + code
	waitUntil(t, "Redis to hold the link", func() bool {
		n, err := rdb.Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})

	edited := "https://go.dev/edited/" + code
	if _, err := db.Exec(`UPDATE links SET url = $2 WHERE code = $1`, code, edited); err != nil {
		t.Fatal(err)
	}
	for name, base := range map[string]string{"a": a, "b": b} {
		waitUntil(t, "instance "+name+" to serve the edit", func() bool { return redirectsTo(t, base, code, edited) })
	}
	waitUntil(t, "instance b to count the notification", func() bool {
		return metricValue(t, mb, `shortener_link_notifications_total{kind="changed"}`) >= 1
	})
	c, _, _ := startTrustedWith(t, dsn, env())
	waitUntil(t, "an instance started after the edit to serve it (from Redis, then its memory)", func() bool {
		return redirectsTo(t, c, code, edited)
	})
	var version int64
	if err := db.QueryRow(`SELECT version FROM links WHERE code = $1`, code).Scan(&version); err != nil || version != 2 {
		t.Errorf("version after an UPDATE that set none = %d, %v; want 2 (the trigger's)", version, err)
	}

	// Deleted as the app deletes: marked, never removed.
	if _, err := db.Exec(`UPDATE links SET url = '', deleted_at = now() WHERE code = $1`, code); err != nil {
		t.Fatal(err)
	}
	for name, base := range map[string]string{"a": a, "b": b, "c": c} {
		waitUntil(t, "instance "+name+" to answer the deleted link 410", func() bool { return get(t, base, code) == http.StatusGone })
	}
	// Renamed: the old code stops answering (the trigger names the codes
	// before the statement too).
	renamed := newCode()
	insertOld(t, db, renamed)
	waitRedirect(t, a, renamed)
	if _, err := db.Exec(`UPDATE links SET code = $2 WHERE code = $1`, renamed, renamed+"r"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old code to stop answering after a rename", func() bool { return get(t, a, renamed) == http.StatusNotFound })

	_, err := db.Exec(`DELETE FROM links WHERE code = $1`, code)
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code.Name() != "restrict_violation" || !strings.Contains(pqErr.Hint, "deleted_at = now()") {
		t.Errorf("DELETE FROM links: %v; want it refused (restrict_violation) with a hint to mark the rows instead", err)
	}
}

// TestManyEditsPurge: one statement that edits more than 10,000 links is
// told as "*", and every instance forgets every link it holds.
func TestManyEditsPurge(t *testing.T) {
	dsn := testDatabase(t)
	base, mbase, _ := startTrustedWith(t, dsn, map[string]string{"LOCAL_CACHE_TTL": "1h", "BLOOM_SWEEP": "1h"})
	db := openBehind(t, dsn)
	p := strings.ToLower(newCode())
	if _, err := db.Exec(`INSERT INTO links (code, url)
SELECT $1 || g, 'https://go.dev/many/' || $1 || g FROM generate_series(1, 10001) AS g`, p); err != nil {
		t.Fatal(err)
	}
	code := p + "5000"
	waitUntil(t, "the link to redirect", func() bool { return redirectsTo(t, base, code, "https://go.dev/many/"+code) })
	if _, err := db.Exec(`UPDATE links SET url = url || '?2' WHERE code LIKE $1 || '%'`, p); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the edit to be served", func() bool { return redirectsTo(t, base, code, "https://go.dev/many/"+code+"?2") })
	if got := metricValue(t, mbase, `shortener_link_notifications_total{kind="changed_all"}`); got != 1 {
		t.Errorf(`link_notifications_total{kind="changed_all"} = %v, want 1`, got)
	}
}

// TestEditsWhileDeafArePurged: the listener's connection is cut, and a
// link edited before it can reconnect: Postgres keeps no notification
// for a session that is not there, so the new LISTEN purges the local
// cache, and the edit is served. One instance, no Redis: nothing else
// could tell it.
func TestEditsWhileDeafArePurged(t *testing.T) {
	dsn := testDatabase(t)
	proxy, via := throughProxy(t, dsn)
	base, mbase, _ := startTrustedWith(t, via, map[string]string{"LOCAL_CACHE_TTL": "1h", "BLOOM_SWEEP": "1h"})
	db := openBehind(t, dsn)
	code := newCode()
	insertOld(t, db, code)
	waitRedirect(t, base, code)

	proxy.refuse()
	waitUntil(t, "the listener to lose its connection", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 0 })
	edited := "https://go.dev/edited/" + code
	if _, err := db.Exec(`UPDATE links SET url = $2 WHERE code = $1`, code, edited); err != nil {
		t.Fatal(err)
	}
	proxy.restore()
	waitUntil(t, "the listener to be back", func() bool { return metricValue(t, mbase, "shortener_bloom_trusted") == 1 })
	if status, loc := statusOf(t, base, code); status != http.StatusFound || loc != edited {
		t.Errorf("after the LISTEN is back: %d %q, want 302 %s (the local cache purged)", status, loc, edited)
	}
}

// TestEditReachesOthersWhileRedisIsDown: an edit made through the app
// while Redis cannot be reached reaches the other instance from
// Postgres. Until step 49 nothing could tell it: it served the link as
// it was for LOCAL_CACHE_TTL (an hour here).
func TestEditReachesOthersWhileRedisIsDown(t *testing.T) {
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)
	env := map[string]string{
		"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"REDIS_URL": fmt.Sprintf("redis://%s/%d", proxy.addr(), opts.DB), "REDIS_KEY_PREFIX": prefix,
		"LOCAL_CACHE_TTL": "1h", "CREATE_RATE": "0",
	}
	a, _, la := startRun(t, env)
	b, _, lb := startRun(t, env)
	for _, l := range []*syncBuffer{la, lb} {
		m := metricsBase(t, l)
		waitUntil(t, "each instance to subscribe", func() bool { return seriesValue(t, m, "shortener_invalidation_purges_total") >= 1 })
	}
	code, token := createVia(t, a, `{"url":"https://go.dev/v1"}`)
	for _, base := range []string{a, b} {
		waitUntil(t, "the link to redirect", func() bool { return redirectsTo(t, base, code, "https://go.dev/v1") })
	}

	proxy.refuse()
	if status := send(t, "PATCH", a+"/api/links/"+code, `{"url":"https://go.dev/v2"}`, token); status != http.StatusOK {
		t.Fatalf("PATCH with Redis down = %d, want 200 (Postgres has it)", status)
	}
	waitUntil(t, "the other instance to serve the edit, Redis down", func() bool { return redirectsTo(t, b, code, "https://go.dev/v2") })
}

// TestTriggersFireInEveryRole: a session whose session_replication_role
// is replica (a logical replication's apply, a superuser's data-loading
// script) ran none of the triggers on
// links until step 50: its insert answered 404 on an instance whose Bloom
// filter was trusted (no sweep reads a row an hour old), its edit reached
// no cache and added no version, and its DELETE went through. Now each
// fires in every role, and a TRUNCATE, which fires no DELETE trigger, is
// refused too.
func TestTriggersFireInEveryRole(t *testing.T) {
	dsn := testDatabase(t)
	base, _, _ := startTrustedWith(t, dsn, map[string]string{"LOCAL_CACHE_TTL": "1h", "BLOOM_SWEEP": "1h"})
	db := openBehind(t, dsn)
	ctx := context.Background()
	conn, err := db.Conn(ctx) // one session: SET holds for it
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := conn.Close(); err != nil {
			t.Errorf("close the replica-role session: %v", err)
		}
	}()
	if _, err := conn.ExecContext(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	code := newCode()
	if _, err := conn.ExecContext(ctx, `INSERT INTO links (code, url, created_at) VALUES ($1, $2, now() - interval '1 hour')`,
		code, "https://go.dev/behind/"+code); err != nil {
		t.Fatal(err)
	}
	waitRedirect(t, base, code) // heard, and now in the instance's memory

	edited := "https://go.dev/edited/" + code
	if _, err := conn.ExecContext(ctx, `UPDATE links SET url = $2 WHERE code = $1`, code, edited); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the instance to serve an edit made in the replica role", func() bool { return redirectsTo(t, base, code, edited) })
	var version int64
	if err := db.QueryRow(`SELECT version FROM links WHERE code = $1`, code).Scan(&version); err != nil || version != 2 {
		t.Errorf("version after an UPDATE in the replica role that set none = %d, %v; want 2 (the trigger's)", version, err)
	}

	refused := func(role string, err error, q string) {
		var pqErr *pq.Error
		if !errors.As(err, &pqErr) || pqErr.Code.Name() != "restrict_violation" {
			t.Errorf("%s in the %s role: %v; want it refused (restrict_violation)", q, role, err)
		}
	}
	for _, q := range []string{`DELETE FROM links WHERE code = '` + code + `'`, `TRUNCATE links CASCADE`} {
		_, err := conn.ExecContext(ctx, q)
		refused("replica", err, q)
	}
	_, err = db.Exec(`TRUNCATE links`)
	refused("default", err, "TRUNCATE links")
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM links WHERE code = $1`, code).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows of %s after the refused DELETE and TRUNCATEs = %d, %v; want 1", code, n, err)
	}
}
