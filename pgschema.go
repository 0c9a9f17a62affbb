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
		stmt, err := s.db.PrepareContext(ctx, lookupSQL)
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
// When the schema is to change (a first start, or a new binary), it is
// applied under a transaction-scoped advisory lock (several copies of the
// app may start at once, and two concurrent CREATE TABLE IF NOT EXISTS
// can still collide) with lock_timeout migrateLockWait: a migration that
// cannot have its lock gives up at once, rather than make every lookup
// wait behind it, and tries again, until migrateTimeout.
func (s *pgStore) migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	want := schemaSHA256()
	if have, err := s.schemaVersion(ctx, s.db); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	} else if have == want {
		return nil
	}
	wait := migrateLockWait
	for attempt := 1; ; attempt++ {
		err := s.applySchema(ctx, want)
		var pqErr *pq.Error
		if err == nil || !errors.As(err, &pqErr) || pqErr.Code != "55P03" { // lock_not_available
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: migrate: no lock within %v (%d attempts): %w", migrateTimeout, attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// migrateLockWait is how long one attempt at the migration waits for a
// lock (lock_timeout), and the first pause between attempts.
const migrateLockWait = 100 * time.Millisecond

// schemaSHA256 is sql/schema.sql's version: the hex SHA-256 of the file.
func schemaSHA256() string {
	sum := sha256.Sum256([]byte(schemaSQL))
	return hex.EncodeToString(sum[:])
}

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

// applySchema runs the schema and records want, in one transaction.
func (s *pgStore) applySchema(ctx context.Context, want string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7306298431)`); err != nil {
		return fmt.Errorf("store: migrate: lock: %w", err)
	}
	// Another instance may have applied it while this one waited.
	if have, err := s.schemaVersion(ctx, tx); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	} else if have == want {
		return nil
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrateLockWait.Milliseconds())); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if _, err := tx.ExecContext(ctx, schemaSQL); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (id, sha256) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET sha256 = excluded.sha256, applied = now()`, want); err != nil {
		return fmt.Errorf("store: migrate: record version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migrate: commit: %w", err)
	}
	return nil
}
