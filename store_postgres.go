package main

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	// The driver registers itself with database/sql under the name
	// "postgres"; nothing else in this package names it.
	_ "github.com/lib/pq"
)

// dbTimeout bounds every call to Postgres: a slow or stuck database costs a
// request this much at most, then an error.
const dbTimeout = 3 * time.Second

// migrateTimeout bounds creating the schema at start.
const migrateTimeout = 30 * time.Second

//go:embed sql/schema.sql
var schemaSQL string

// pgStore keeps links in Postgres. database/sql's *sql.DB is not one
// connection but a pool of them, safe for concurrent use; this step leaves
// the pool at its defaults.
type pgStore struct {
	db *sql.DB
}

// openPostgres connects to dsn and creates the schema if it is not there.
func openPostgres(ctx context.Context, dsn string) (*pgStore, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	s := &pgStore{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close() //nolint:errcheck // the migrate error is the one worth returning
		return nil, err
	}
	return s, nil
}

// migrate runs sql/schema.sql. Several copies of the app may start at once
// (step 06), and two concurrent CREATE TABLE IF NOT EXISTS can still collide,
// so the schema is applied under a transaction-scoped advisory lock.
func (s *pgStore) migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7306298431)`); err != nil {
		return fmt.Errorf("store: migrate: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, schemaSQL); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migrate: commit: %w", err)
	}
	return nil
}

// Save stores url under code, or returns ErrCodeTaken. There is no index on
// code in this step, so nothing in the database stops a duplicate: Save
// checks first, then inserts. Two requests that draw the same code at the
// same moment can both pass the check; step 03's unique index closes that.
func (s *pgStore) Save(ctx context.Context, code, url string) error {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	var taken bool
	err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM links WHERE code = $1)`, code).Scan(&taken)
	if err != nil {
		return fmt.Errorf("store: save %q: check: %w", code, deadline(ctx, err))
	}
	if taken {
		return ErrCodeTaken
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO links (code, url) VALUES ($1, $2)`, code, url); err != nil {
		return fmt.Errorf("store: save %q: %w", code, deadline(ctx, err))
	}
	return nil
}

// Lookup returns the URL stored under code, or ErrNotFound.
func (s *pgStore) Lookup(ctx context.Context, code string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	var url string
	err := s.db.QueryRowContext(ctx, `SELECT url FROM links WHERE code = $1`, code).Scan(&url)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: lookup %q: %w", code, deadline(ctx, err))
	}
	return url, nil
}

// deadline returns err, marked as context.DeadlineExceeded if ctx ran out:
// lib/pq reports a query it cancelled at the deadline as its own error
// ("canceling statement due to user request"), which says nothing of why.
func deadline(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
	return err
}

// Close closes the pool's connections.
func (s *pgStore) Close() error {
	return s.db.Close()
}
