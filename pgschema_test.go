package main

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSchemaIndexesAreBuiltConcurrently: sql/schema.sql's last part holds
// its indexes, each a CREATE INDEX CONCURRENTLY IF NOT EXISTS, and its
// first part, run in one transaction, builds none but links_code_key (the
// constraint every create's ON CONFLICT (code) needs, made with the table
// in step 03).
func TestSchemaIndexesAreBuiltConcurrently(t *testing.T) {
	inTx, indexes := schemaParts()
	if len(indexes) != 2 {
		t.Errorf("the schema's last part has %d statements, want 2: %q", len(indexes), indexes)
	}
	for _, stmt := range indexes {
		if !concurrentIndex.MatchString(stmt) {
			t.Errorf("not a CREATE INDEX CONCURRENTLY IF NOT EXISTS: %q", stmt)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^CREATE (?:UNIQUE )?INDEX[^;]*`).FindAllString(inTx, -1) {
		if !strings.Contains(m, " links_code_key ON links (code)") {
			t.Errorf("an index built in the schema's transaction, holding off writes while it builds: %q", m)
		}
	}
	if !strings.Contains(schemaSQL, "\n"+indexesMarker+"\n") {
		t.Errorf("sql/schema.sql has no line %q", indexesMarker)
	}
}

// TestNewIndexLetsWritesPass: a start that adds an index (a database from
// before it) builds it while creates go on. The build waits, as
// CONCURRENTLY does, for a transaction older than it (a long reader, here
// a repeatable-read transaction that read another table) to end, and a
// create made meanwhile is stored at once. A plain CREATE INDEX would
// have built without waiting, holding off every write to links while it
// built (on 10M links, benchmarks/45-index-build.txt).
func TestNewIndexLetsWritesPass(t *testing.T) {
	dsn := testDatabase(t)
	ctx := context.Background()
	running := openTestStoreAt(t, dsn, testPool)
	// A database from before the index, and a binary that brings it.
	for _, q := range []string{`DROP INDEX links_created_at_brin`, `UPDATE schema_version SET sha256 = 'older'`} {
		if _, err := running.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	reader := oldSnapshot(t, running.db)
	opened := make(chan error, 1)
	go func() {
		s, err := openPostgres(ctx, dsn, testPool) // the new binary's start
		if err == nil {
			err = s.Close()
		}
		opened <- err
	}()
	waitUntil(t, "the start's build to wait for the older reader", func() bool {
		select {
		case err := <-opened:
			t.Fatalf("the start built links_created_at_brin without waiting for the older reader (err %v): not CONCURRENTLY", err)
		default:
		}
		return indexBuildWaits(t, running.db, "links_created_at_brin")
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := running.Save(cctx, "ixw0001", NewLink{URL: "https://go.dev/"}); err != nil {
		t.Fatalf("a create while the index builds: %v", err)
	}
	if !indexBuildWaits(t, running.db, "links_created_at_brin") {
		t.Error("the build stopped waiting while the create was made: the test did not show them side by side")
	}
	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("the start: %v", err)
	}
	checkIndexValid(t, running.db, "links_created_at_brin")
	if have, err := running.schemaVersion(ctx, running.db); err != nil || have != schemaSHA256() {
		t.Errorf("schema version after the start = %q, %v; want %q", have, err, schemaSHA256())
	}
}

// TestInvalidIndexIsBuiltAgain: a build cut short (here cancelled, as a
// start's deadline or a crash would) leaves the index there but INVALID,
// unused by any query and kept as it is by IF NOT EXISTS. The next
// migration drops it and builds it again.
func TestInvalidIndexIsBuiltAgain(t *testing.T) {
	dsn := testDatabase(t)
	ctx := context.Background()
	running := openTestStoreAt(t, dsn, testPool)
	if _, err := running.db.ExecContext(ctx, `DROP INDEX links_created_at_brin`); err != nil {
		t.Fatal(err)
	}
	// A build that waits for an older reader, cancelled while it waits.
	reader := oldSnapshot(t, running.db)
	built := make(chan error, 1)
	go func() {
		_, err := running.db.ExecContext(ctx, `CREATE INDEX CONCURRENTLY links_created_at_brin ON links USING brin (created_at)`)
		built <- err
	}()
	waitUntil(t, "the build to wait for the older reader", func() bool { return indexBuildWaits(t, running.db, "links_created_at_brin") })
	if _, err := running.db.ExecContext(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'CREATE INDEX CONCURRENTLY links_created_at_brin%'`); err != nil {
		t.Fatal(err)
	}
	if err := <-built; err == nil {
		t.Fatal("the cancelled build succeeded")
	}
	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	var valid bool
	if err := running.db.QueryRowContext(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('links_created_at_brin')`).Scan(&valid); err != nil || valid {
		t.Fatalf("after the cancelled build: valid %v, %v; want an invalid index", valid, err)
	}
	if _, err := running.db.ExecContext(ctx, `UPDATE schema_version SET sha256 = 'older'`); err != nil {
		t.Fatal(err)
	}
	openTestStoreAt(t, dsn, testPool) // the start after the cancelled build
	checkIndexValid(t, running.db, "links_created_at_brin")
}

// oldSnapshot opens a repeatable-read transaction that has read a table
// other than links: it holds no lock on links, only a snapshot older than
// anything the test starts after it. The test ends it (Rollback).
func oldSnapshot(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("end the old snapshot: %v", err)
		}
	})
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM click_counts`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return tx
}

// indexBuildWaits says whether a CREATE INDEX CONCURRENTLY of name is
// waiting, in the database db is on, for a lock (the transactions it must
// outlast).
func indexBuildWaits(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND query LIKE 'CREATE INDEX CONCURRENTLY %' AND query LIKE '% ' || $1 || ' ON %' AND wait_event_type = 'Lock'`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// checkIndexValid fails the test unless the index name is there and valid.
func checkIndexValid(t *testing.T, db *sql.DB, name string) {
	t.Helper()
	var valid bool
	if err := db.QueryRow(`SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, name).Scan(&valid); err != nil || !valid {
		t.Errorf("index %s: valid %v, %v; want there and valid", name, valid, err)
	}
}

// TestTriggersPutRightAtStart: the triggers on links fire in every
// replication role (step 50, ENABLE ALWAYS). What pg_restore runs after a
// data-only restore with --disable-triggers (ENABLE TRIGGER ALL) sets them
// back to the default role only, and a DISABLE TRIGGER turns one off;
// either leaves the schema's version as it was, and the next start put
// nothing right until step 50. Now a start runs the file again.
func TestTriggersPutRightAtStart(t *testing.T) {
	dsn := testDatabase(t)
	openTestStoreOn(t, dsn)
	db := openBehind(t, dsn)
	notAlways := func() (names []string) {
		rows, err := db.Query(`SELECT tgname FROM pg_trigger WHERE tgrelid = 'links'::regclass AND NOT tgisinternal AND tgenabled <> 'A' ORDER BY tgname`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	var all int
	if err := db.QueryRow(`SELECT count(*) FROM pg_trigger WHERE tgrelid = 'links'::regclass AND NOT tgisinternal`).Scan(&all); err != nil {
		t.Fatal(err)
	}
	if got := len(alwaysTriggers()); got != all || all < 5 {
		t.Fatalf("the schema enables %d triggers ALWAYS; links has %d (want every one, at least 5)", got, all)
	}
	if off := notAlways(); len(off) > 0 {
		t.Fatalf("after the first start, not ALWAYS: %v", off)
	}
	for _, q := range []string{`ALTER TABLE links ENABLE TRIGGER ALL`, `ALTER TABLE links DISABLE TRIGGER links_announce_change`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
		if off := notAlways(); len(off) == 0 {
			t.Fatalf("%s changed no trigger: the test cannot tell", q)
		}
		openTestStoreOn(t, dsn) // a start
		if off := notAlways(); len(off) > 0 {
			t.Errorf("after %s and a start, not ALWAYS: %v", q, off)
		}
	}
}
