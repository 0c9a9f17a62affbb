package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"

	// pq.Error carries Postgres's error codes.
	"github.com/lib/pq"
)

//go:embed sql/schema.sql
var schemaSQL string

// prepare prepares the lookup and the insert (once here, to check them; then
// database/sql prepares them again on each connection as it first uses them).
func (s *pgStore) prepare(ctx context.Context, lookupOnly bool) error {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	var err error
	if s.lookup, err = s.prepareLookup(ctx, lookupOnly); err != nil {
		return fmt.Errorf("store: prepare lookup: %w", err)
	}
	if lookupOnly {
		return nil
	}
	if s.insert, err = s.db.PrepareContext(ctx, insertSQL); err != nil {
		return fmt.Errorf("store: prepare insert: %w", err)
	}
	return nil
}

// schemaRetry is how often a replica that is not ready is asked again;
// onSchemaWait is called before each wait (tests set it).
const schemaRetry = 250 * time.Millisecond

var onSchemaWait = func() {}

// prepareLookup prepares the lookup. A replica (lookupOnly) may not be
// ready when an instance starts, and that is waited out, asked again
// every schemaRetry until ctx ends, not a reason to exit: beside a fresh
// primary (three hosts started at once) it may not have replayed the
// schema yet (step 23); on a host brought back after a failover, Patroni
// may be rewinding and restarting it, and it cuts the connection or says
// it is starting up (step 24, replicaNotReady). The primary has just
// migrated, so there any error is an error at once.
func (s *pgStore) prepareLookup(ctx context.Context, lookupOnly bool) (*sql.Stmt, error) {
	for {
		stmt, err := s.db.PrepareContext(ctx, s.fence.sql(lookupSQL, lookupFencedSQL))
		if err == nil || !lookupOnly || !replicaNotReady(err) || ctx.Err() != nil {
			return stmt, err
		}
		onSchemaWait()
		t := time.NewTimer(schemaRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("the replica was not ready (waited for it): %w", err)
		case <-t.C:
		}
	}
}

// replicaNotReady says whether err is what a replica answers while it is
// not ready yet: no database of that name (3D000: the CREATE DATABASE not
// replayed yet, step 27), no links table (42P01: the schema not replayed
// yet), the server starting up or shutting down (class 57:
// cannot_connect_now, admin_shutdown), a connection failing (class 08),
// cut (EOF) or refused. Anything else (a wrong password, a bad statement)
// is an error at once.
func replicaNotReady(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code == "3D000" || pqErr.Code == "42P01" ||
			pqErr.Code.Class() == "57" || pqErr.Code.Class() == "08"
	}
	var opErr *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.As(err, &opErr)
}

// migrate brings the database's schema to sql/schema.sql's, and does
// nothing when it is there already.
//
// Every start used to run the file (steps 02 to 26). Its statements
// change nothing the second time, but they still take their locks: an
// ALTER TABLE ... IF NOT EXISTS queues for an exclusive lock on links
// behind any long reader (pg_dump, a report), and every lookup and create
// of every instance queues behind it, for as long as the reader runs
// (issue 24, item 8: a 6 s reader made lookups time out). Now the file's
// SHA-256 is recorded in schema_version once it is applied, and a start
// that finds its own reads one row and takes no lock on links.
//
// When the schema is to change (a first start, or a new binary), one
// instance applies it, under a session advisory lock that the others poll
// for (several copies of the app may start at once, and two concurrent
// CREATE TABLE IF NOT EXISTS can still collide). The file's first part
// runs in one transaction with lock_timeout migrateLockWait: a migration
// that cannot have its lock gives up at once, rather than make every
// lookup wait behind it, and tries again, until migrateTimeout. Its last
// part, the indexes, is built CONCURRENTLY, each on its own, after the
// first part has committed (step 45, buildIndex): a plain CREATE INDEX
// holds off every insert into its table for as long as it builds. The
// version is recorded last, so a migration cut short is done again.
func (s *pgStore) migrate(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	want := schemaSHA256()
	if ok, err := s.schemaCurrent(ctx, s.db, want); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	} else if ok {
		return nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	// The advisory lock is the session's: the connection is closed when
	// the migration is done, which releases it, never pooled holding it.
	defer func() {
		if cerr := discardConn(conn); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := migrationLock(ctx, conn); err != nil {
		return err
	}
	// Another instance may have applied it while this one waited.
	if ok, err := s.schemaCurrent(ctx, conn, want); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	} else if ok {
		return nil
	}
	inTx, indexes := schemaParts()
	wait := migrateLockWait
	for attempt := 1; ; attempt++ {
		err := applySchema(ctx, conn, inTx)
		var pqErr *pq.Error
		if err == nil {
			break
		}
		if !errors.As(err, &pqErr) || pqErr.Code != "55P03" { // lock_not_available
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: migrate: no lock within %v (%d attempts): %w", migrateTimeout, attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	for _, stmt := range indexes {
		if err := buildIndex(ctx, conn, stmt); err != nil {
			return err
		}
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO schema_version (id, sha256) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET sha256 = excluded.sha256, applied = now()`, want); err != nil {
		return fmt.Errorf("store: migrate: record version: %w", err)
	}
	return nil
}

// migrationKey is the advisory lock the migration holds (steps 27 to 44
// took it for a transaction, pg_advisory_xact_lock; the two conflict).
const migrationKey = 7306298431

// migrationLock takes migrationKey for conn's session, asking again every
// migrateLockWait until ctx ends. It never waits inside Postgres: a
// statement waiting there would hold a snapshot, and buildIndex's
// CREATE INDEX CONCURRENTLY, on the instance holding the lock, waits for
// every older snapshot to end.
func migrationLock(ctx context.Context, conn *sql.Conn) error {
	for {
		var got bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, int64(migrationKey)).Scan(&got); err != nil {
			return fmt.Errorf("store: migrate: lock: %w", err)
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: migrate: another instance held the migration for %v: %w", migrateTimeout, ctx.Err())
		case <-time.After(migrateLockWait):
		}
	}
}

// discardConn closes conn's connection to Postgres, so that what its
// session holds (the migration's advisory lock) goes with it.
func discardConn(conn *sql.Conn) error {
	// Raw returning driver.ErrBadConn is how database/sql is told to close
	// a connection rather than pool it (and to release conn): that error
	// is the point. Any other is a failure to close it.
	if err := conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		return fmt.Errorf("store: migrate: close the migration's connection: %w", err)
	}
	return nil
}

// migrateLockWait is how long one attempt at the migration waits for a
// lock (lock_timeout), and the first pause between attempts.
const migrateLockWait = 100 * time.Millisecond

// schemaSHA256 is sql/schema.sql's version: the hex SHA-256 of the file.
func schemaSHA256() string {
	sum := sha256.Sum256([]byte(schemaSQL))
	return hex.EncodeToString(sum[:])
}

// schemaCurrent says whether the database has sql/schema.sql's version
// (want) applied, with its triggers on links as the file leaves them:
// since step 50 each fires in every replication role (ENABLE ALWAYS).
// ALTER TABLE links ENABLE TRIGGER ALL, which pg_restore runs after a
// data-only restore with --disable-triggers, sets them back to the
// default role only, and a DISABLE TRIGGER left in place turns one off;
// either is put right by running the file again, as for a new version.
// Reading pg_trigger takes no lock on links.
func (s *pgStore) schemaCurrent(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, want string) (bool, error) {
	have, err := s.schemaVersion(ctx, q)
	if err != nil || have != want {
		return false, err
	}
	var off int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM unnest($1::text[]) AS t(name)
WHERE NOT EXISTS (SELECT 1 FROM pg_trigger
                  WHERE tgrelid = to_regclass('links') AND tgname = t.name AND tgenabled = 'A')`,
		pq.Array(alwaysTriggers())).Scan(&off); err != nil {
		return false, fmt.Errorf("schema triggers: %w", err)
	}
	return off == 0, nil
}

// alwaysTriggers are the triggers sql/schema.sql enables ALWAYS, read
// from the file so that the list cannot drift from it.
func alwaysTriggers() []string {
	var names []string
	for _, m := range alwaysTriggerRE.FindAllStringSubmatch(schemaSQL, -1) {
		names = append(names, m[1])
	}
	return names
}

var alwaysTriggerRE = regexp.MustCompile(`(?m)^ALTER TABLE links ENABLE ALWAYS TRIGGER (\w+);$`)

// schemaVersion is the SHA-256 recorded in schema_version, or "" when
// there is none (a database this program never migrated, or one older
// than step 27).
func (s *pgStore) schemaVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (string, error) {
	var exists bool
	if err := q.QueryRowContext(ctx, `SELECT to_regclass('schema_version') IS NOT NULL`).Scan(&exists); err != nil {
		return "", fmt.Errorf("schema version: %w", err)
	}
	if !exists {
		return "", nil
	}
	var have string
	switch err := q.QueryRowContext(ctx, `SELECT sha256 FROM schema_version WHERE id = 1`).Scan(&have); {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("schema version: %w", err)
	}
	return have, nil
}

// applySchema runs stmts, the schema's first part, in one transaction on
// conn, with lock_timeout migrateLockWait.
func applySchema(ctx context.Context, conn *sql.Conn, stmts string) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrateLockWait.Milliseconds())); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if _, err := tx.ExecContext(ctx, stmts); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migrate: commit: %w", err)
	}
	return nil
}

// indexesMarker is the line of sql/schema.sql after which every statement
// is a CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS, run on its own.
const indexesMarker = "-- Built CONCURRENTLY, each on its own, after the statements above have committed."

// schemaParts splits sql/schema.sql at indexesMarker: what runs in one
// transaction, and the index statements after it, comments dropped.
func schemaParts() (inTx string, indexes []string) {
	at := strings.Index(schemaSQL, "\n"+indexesMarker+"\n")
	if at < 0 {
		return schemaSQL, nil
	}
	for _, stmt := range strings.Split(schemaSQL[at+1:], ";\n") {
		var lines []string
		for _, line := range strings.Split(stmt, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
				lines = append(lines, line)
			}
		}
		if len(lines) > 0 {
			indexes = append(indexes, strings.TrimSuffix(strings.Join(lines, " "), ";"))
		}
	}
	return schemaSQL[:at+1], indexes
}

// concurrentIndex matches an index statement of the schema's last part;
// its group is the index's name.
var concurrentIndex = regexp.MustCompile(`^CREATE (?:UNIQUE )?INDEX CONCURRENTLY IF NOT EXISTS ([a-z_][a-z0-9_]*) ON `)

// buildIndex runs stmt, a CREATE INDEX CONCURRENTLY IF NOT EXISTS, on
// conn, outside any transaction. A plain CREATE INDEX takes a SHARE lock
// on its table, which every INSERT, UPDATE and DELETE waits behind for as
// long as the index builds (a B-tree on 10M links: seconds); CONCURRENTLY
// takes a lock that writes pass, and waits instead for the transactions
// that could not see the new index to end, which on this service's own
// traffic is at most a DB_TIMEOUT (a pg_dump or a report makes it wait for
// as long as they run, and the start fails at migrateTimeout; then build
// the index by hand, docs/45). A build cut short (a deadline, a crash, a
// cancel) leaves the index there but INVALID, which IF NOT EXISTS would
// keep as it is forever: such an index is dropped and built again.
func buildIndex(ctx context.Context, conn *sql.Conn, stmt string) error {
	m := concurrentIndex.FindStringSubmatch(stmt)
	if m == nil {
		return fmt.Errorf("store: migrate: not a CREATE INDEX CONCURRENTLY IF NOT EXISTS: %.80q", stmt)
	}
	name := m[1]
	var valid bool
	switch err := conn.QueryRowContext(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, name).Scan(&valid); {
	case errors.Is(err, sql.ErrNoRows): // not there yet
	case err != nil:
		return fmt.Errorf("store: migrate: index %s: %w", name, err)
	case !valid:
		if _, err := conn.ExecContext(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+pq.QuoteIdentifier(name)); err != nil {
			return fmt.Errorf("store: migrate: drop the invalid index %s: %w", name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("store: migrate: build index %s: %w", name, err)
	}
	return nil
}
