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
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	// The driver registers itself with database/sql under the name
	// "postgres"; pq.Array passes a Go slice as a Postgres array.
	"github.com/lib/pq"
)

// clickWriteTimeout bounds writing one batch of clicks. No request waits
// for it, so it can be longer than DB_TIMEOUT: a batch that fails is lost.
const clickWriteTimeout = 5 * time.Second

// migrateTimeout bounds creating the schema at start.
const migrateTimeout = 30 * time.Second

//go:embed sql/schema.sql
var schemaSQL string

// The two statements the app runs on every request. A lookup reads what a
// redirect needs (Target): a deleted link is found too, as a tombstone.
const (
	lookupSQL = `SELECT url, redirect, expires_at, max_clicks IS NOT NULL, deleted_at IS NOT NULL, version
FROM links WHERE code = $1`
	insertSQL = `INSERT INTO links (code, url, expires_at, max_clicks, redirect, token_hash)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (code) DO NOTHING`
)

// Edits, deletes and limited clicks (links.go). An edit runs in a
// transaction: the row is locked (FOR UPDATE), its token compared here,
// in Go, in constant time, and only then changed, so that two edits of
// one link, or an edit and a delete, take turns.
const (
	lockLinkSQL = `SELECT token_hash, deleted_at IS NOT NULL FROM links WHERE code = $1 FOR UPDATE`
	// linkColumns is what an edit returns: the link as linkSQL reads it.
	linkColumns = `url, created_at, redirect, expires_at, max_clicks, deleted_at, version,
       coalesce((SELECT c.clicks FROM click_counts c WHERE c.code = links.code), 0)
       + (SELECT count(*) FROM click_events e WHERE e.code = links.code)`
	// takeClickSQL counts a click of a link with max_clicks, if it has
	// one left, in one statement: the click_counts row is locked by ON
	// CONFLICT DO UPDATE, and its WHERE is checked against the row as
	// it is once locked, so concurrent clicks take turns and the count
	// never passes max_clicks. No row back means no click left (or the
	// link deleted): nothing was counted. A link whose max_clicks was
	// cleared since the cache read it is counted here too, with no limit.
	takeClickSQL = `INSERT INTO click_counts AS c (code, clicks)
SELECT l.code, 1 FROM links l WHERE l.code = $1 AND l.deleted_at IS NULL
ON CONFLICT (code) DO UPDATE SET clicks = c.clicks + 1
WHERE (SELECT l.max_clicks IS NULL OR c.clicks < l.max_clicks FROM links l WHERE l.code = c.code)
RETURNING c.clicks`
	// clickLeftSQL is takeClickSQL's question without the click, for a
	// HEAD.
	clickLeftSQL = `SELECT l.max_clicks IS NULL OR coalesce(c.clicks, 0) < l.max_clicks
FROM links l LEFT JOIN click_counts c ON c.code = l.code
WHERE l.code = $1 AND l.deleted_at IS NULL`
)

// Clicks, written by the click queue in batches (see clicks.go).
const (
	// addClicksSQL adds a batch of counts, summed per code by the app,
	// in one statement: one row written per distinct code.
	addClicksSQL = `INSERT INTO click_counts (code, clicks)
SELECT * FROM unnest($1::text[], $2::bigint[])
ON CONFLICT (code) DO UPDATE SET clicks = click_counts.clicks + EXCLUDED.clicks`
	// addClickRowsSQL writes one row per click (CLICK_STORAGE=rows).
	addClickRowsSQL = `INSERT INTO click_events (code) SELECT unnest($1::text[])`
	// linkSQL reads a link and its clicks, however they were stored.
	linkSQL = `SELECT ` + linkColumns + ` FROM links WHERE code = $1`
)

// pgStore keeps links in Postgres. database/sql's *sql.DB is not one
// connection but a pool of them, safe for concurrent use.
type pgStore struct {
	db *sql.DB
	// lookup and insert are prepared statements, or nil when DB_PREPARE is
	// off. A *sql.Stmt is prepared once per pooled connection, on first
	// use there; after that a query is one round trip, with no parsing.
	lookup, insert *sql.Stmt
	// timeout bounds every call made for a request (DB_TIMEOUT): a slow
	// or stuck database costs a request this much at most, then a 503.
	timeout time.Duration
	// group, when not nil, saves links in batches, one commit each
	// (CREATE_BATCH, groupcommit.go).
	group *groupCommit
	// batch, when not nil, sends concurrent lookups in one query
	// (LOOKUP_BATCH, lookupbatch.go).
	batch *lookupBatch
	// lookups counts Lookup's queries by result: here, where the query
	// is made, so that every cache and flight in front is seen through.
	// Counting nothing until run hands it the metrics' counters.
	lookups dbLookups
}

// poolConfig sizes database/sql's connection pool (see loadConfig for the
// defaults and the variables that set them).
type poolConfig struct {
	maxOpen     int           // connections open at most, busy or idle; 0 = no limit
	maxIdle     int           // idle connections kept for reuse; database/sql's default is 2
	maxIdleTime time.Duration // close a connection idle this long; 0 = never
	maxLifetime time.Duration // close a connection this old; 0 = never
	prepare     bool          // use prepared statements
	timeout     time.Duration // DB_TIMEOUT: each request's calls give up after this
	// readOnly opens a streaming replica (DATABASE_REPLICA_URL): the schema
	// is the primary's to make, and only the lookup is prepared.
	readOnly bool
	// replyTimeout is how long a connection waits for Postgres to answer
	// before it is dropped (see replyDeadlineConn); 0 = the longest
	// deadline of a request's calls and the click writes, plus a second.
	// It also cuts the background calls whose own deadline is longer
	// (the Bloom filter's build, sweep and resync, the stats' flush):
	// docs/39.
	replyTimeout time.Duration
	// clientCheck is DB_CLIENT_CHECK: how often Postgres checks, while a
	// statement runs, that the app is still connected (see
	// clientCheckConnector); 0 = never (Postgres's own default).
	clientCheck time.Duration
}

// openPostgres connects to dsn, sizes the pool, and creates the schema if it
// is not there. Its errors never carry the password dsn may hold: they
// are printed at start-up, into logs that more people read than the
// deployment's secrets.
func openPostgres(ctx context.Context, dsn string, pool poolConfig) (*pgStore, error) {
	return openCountedPostgres(ctx, dsn, pool, (*metrics)(nil).dbLookups())
}

// openCountedPostgres is openPostgres with each lookup's outcome counted
// in lookups (the app's shortener_db_lookups_total).
func openCountedPostgres(ctx context.Context, dsn string, pool poolConfig, lookups dbLookups) (*pgStore, error) {
	s, err := connectPostgres(ctx, dsn, pool, lookups)
	if err != nil {
		return nil, redactDSN(err, dsn)
	}
	return s, nil
}

func connectPostgres(ctx context.Context, dsn string, pool poolConfig, lookups dbLookups) (*pgStore, error) {
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	// While the schema is made and the statements prepared, which may
	// wait on another instance's migration, Postgres gets as long to
	// answer as those steps' own deadline; then as long as the longest
	// call of a request or a click write (see replyDeadlineConn; not the
	// background calls' longer deadlines, docs/39).
	replyTimeout := pool.replyTimeout
	if replyTimeout == 0 {
		replyTimeout = max(pool.timeout, clickWriteTimeout) + time.Second
	}
	dialer := replyDeadlineDialer{limit: new(atomic.Int64)}
	dialer.limit.Store(int64(migrateTimeout + time.Second))
	connector.Dialer(dialer)
	db := sql.OpenDB(clientCheckConnector{Connector: connector, interval: pool.clientCheck})
	db.SetMaxOpenConns(pool.maxOpen)
	db.SetMaxIdleConns(pool.maxIdle)
	db.SetConnMaxIdleTime(pool.maxIdleTime)
	db.SetConnMaxLifetime(pool.maxLifetime)
	s := &pgStore{db: db, timeout: pool.timeout, lookups: lookups}
	if !pool.readOnly {
		if err := s.migrate(ctx); err != nil {
			db.Close() //nolint:errcheck // the migrate error is the one worth returning
			return nil, err
		}
	}
	if pool.prepare {
		if err := s.prepare(ctx, pool.readOnly); err != nil {
			db.Close() //nolint:errcheck // the prepare error is the one worth returning
			return nil, err
		}
	}
	dialer.limit.Store(int64(replyTimeout))
	return s, nil
}

// redactedError is an error whose text had a connection string's secrets
// taken out; errors.Is and errors.As still see the error beneath.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// kvPassword finds the password in a key=value connection string
// ("host=db password=s3cret" or password='s 3cret').
var kvPassword = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// redactDSN takes the password in dsn (a URL or key=value pairs) out of
// err's text, in every form it may be printed: as written, decoded, and
// inside the whole connection string, which url.Parse's errors quote.
func redactDSN(err error, dsn string) error {
	var secrets []string
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
				secrets = append(secrets, pw)
				if dec, err := url.PathUnescape(pw); err == nil && dec != pw {
					secrets = append(secrets, dec)
				}
			}
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		secrets = append(secrets, m[1])
		if uq := strings.Trim(m[1], "'"); uq != m[1] && uq != "" {
			secrets = append(secrets, uq)
		}
	}
	msg := err.Error()
	redacted := msg
	for _, s := range secrets {
		redacted = strings.ReplaceAll(redacted, s, "xxxxx")
		// url.Error quotes the URL, escaping what it must.
		if q := strconv.Quote(s); q[1:len(q)-1] != s {
			redacted = strings.ReplaceAll(redacted, q[1:len(q)-1], "xxxxx")
		}
	}
	if redacted == msg {
		return err
	}
	return &redactedError{msg: redacted, err: err}
}

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

// Save stores url under code, or returns ErrCodeTaken. The unique index on
// code decides, in one statement: if the code is taken the insert does
// nothing and reports no row affected. There is no window between a check
// and an insert for another request to slip into.
func (s *pgStore) Save(ctx context.Context, code string, l NewLink) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if l.Redirect == 0 {
		l.Redirect = defaultRedirect
	}
	if s.group != nil {
		err := s.group.save(ctx, code, l)
		switch {
		case err == nil, errors.Is(err, ErrCodeTaken):
			return err
		default:
			return fmt.Errorf("store: save %q: %w", code, deadline(ctx, err))
		}
	}
	err := bounded(ctx, func() error {
		var res sql.Result
		var err error
		// Unset fields go in as NULL.
		var expires, maxClicks, token any
		if !l.ExpiresAt.IsZero() {
			expires = l.ExpiresAt
		}
		if l.MaxClicks > 0 {
			maxClicks = l.MaxClicks
		}
		if len(l.TokenHash) > 0 {
			token = l.TokenHash
		}
		if s.insert != nil {
			res, err = s.insert.ExecContext(ctx, code, l.URL, expires, maxClicks, l.Redirect, token)
		} else {
			res, err = s.db.ExecContext(ctx, insertSQL, code, l.URL, expires, maxClicks, l.Redirect, token)
		}
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("rows affected: %w", err)
		}
		if n == 0 {
			return ErrCodeTaken
		}
		return nil
	})
	switch {
	case err == nil, errors.Is(err, ErrCodeTaken):
		return err
	default:
		return fmt.Errorf("store: save %q: %w", code, deadline(ctx, err))
	}
}

// Lookup returns what a redirect needs of code, or ErrNotFound.
func (s *pgStore) Lookup(ctx context.Context, code string) (Target, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.batch != nil {
		t, err := s.batch.lookup(ctx, code)
		switch {
		case err == nil:
			s.lookups.found.Inc()
		case errors.Is(err, ErrNotFound):
			s.lookups.notFound.Inc()
		default:
			s.lookups.err.Inc()
			err = fmt.Errorf("store: lookup %q: %w", code, deadline(ctx, err))
		}
		return t, err
	}
	var t Target // written by the call; read only if it returned
	err := bounded(ctx, func() error {
		var row *sql.Row
		if s.lookup != nil {
			row = s.lookup.QueryRowContext(ctx, code)
		} else {
			row = s.db.QueryRowContext(ctx, lookupSQL, code)
		}
		var expires sql.NullTime
		if err := row.Scan(&t.URL, &t.Status, &expires, &t.Limited, &t.Deleted, &t.Version); err != nil {
			return err
		}
		if expires.Valid {
			t.ExpiresAt = expires.Time.UTC()
		}
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		s.lookups.notFound.Inc()
		return Target{}, ErrNotFound
	}
	if err != nil {
		s.lookups.err.Inc()
		return Target{}, fmt.Errorf("store: lookup %q: %w", code, deadline(ctx, err))
	}
	s.lookups.found.Inc()
	return t, nil
}

// pgUnreachable reports whether err says that Postgres could not be reached,
// or could not take the statement now, rather than that it refused it: the
// connection failed or was closed (a proxy in front with no server to send
// it to accepts and closes: EOF), the server is shutting down or starting
// (57P01, 57P02, 57P03), the connection broke (08000, 08003, 08006, 08001,
// 08004, 08007: class 08 but for 08P01, a protocol violation, which is a
// bug), or the server has become a standby and is read-only (25006: a
// demoted primary). Such an error is an outage to wait out, answered 503,
// not a bug, answered 500.
func pgUnreachable(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case "57P01", "57P02", "57P03", "25006",
			"08000", "08003", "08006", "08001", "08004", "08007":
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.As(err, &netErr)
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

// replyDeadlineDialer makes lib/pq's connections replyDeadlineConns, all
// reading their limit from one place, so that it can change after start.
type replyDeadlineDialer struct {
	limit *atomic.Int64 // a time.Duration
}

func (d replyDeadlineDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d replyDeadlineDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, addr)
}

func (d replyDeadlineDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &replyDeadlineConn{Conn: c, limit: d.limit}, nil
}

// replyDeadlineConn gives Postgres limit to answer each thing sent to it.
// lib/pq honours a context's deadline by asking Postgres, on a second
// connection, to cancel the statement; a Postgres that is alive but slow
// (a lock, a long query) does, and the call fails at its deadline. But a
// Postgres that does not answer at all (a frozen process, a network that
// drops packets) never reads the cancel, and lib/pq sets no deadline on
// the socket: the call would wait forever, holding a pooled connection.
// So every write here moves the socket's deadline to limit from now; if
// no reply comes by then, the read fails, and database/sql drops the
// connection. (The request that made the call does not wait for that:
// see bounded.)
type replyDeadlineConn struct {
	net.Conn
	limit *atomic.Int64
}

func (c *replyDeadlineConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetDeadline(time.Now().Add(time.Duration(c.limit.Load()))); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// clientCheckConnector is lib/pq's connector with one more step for each
// new connection: it asks Postgres to check every interval, while a
// statement runs, that the app is still at the other end, and to end the
// statement if not. A call the app gives up on (a frozen or slow Postgres
// past its reply deadline, see replyDeadlineConn) drops its connection,
// but Postgres notices a dropped client only when it next writes to it:
// a scan that finds nothing, or a wait for a lock, ran on to its end,
// holding a backend, while the app tried again on a new connection
// (docs/39). client_connection_check_interval is Postgres 14's; 0 leaves
// it unset.
type clientCheckConnector struct {
	*pq.Connector
	interval time.Duration
}

func (c clientCheckConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil || c.interval <= 0 {
		return cn, err
	}
	set := fmt.Sprintf("SET client_connection_check_interval = %d", c.interval.Milliseconds())
	ex, ok := cn.(driver.ExecerContext)
	if !ok {
		cn.Close() //nolint:errcheck // the missing method is the error worth returning
		return nil, fmt.Errorf("store: %T cannot run %s", cn, set)
	}
	if _, err := ex.ExecContext(ctx, set, nil); err != nil {
		cn.Close() //nolint:errcheck // the SET's error is the one worth returning
		return nil, fmt.Errorf("store: %s (DB_CLIENT_CHECK; 0 for Postgres before 14): %w", set, err)
	}
	return cn, nil
}

// bounded runs call, which talks to Postgres, and returns its error; or, if
// ctx ends first, ctx's error at once, leaving call to finish in the
// background (against a frozen Postgres, at its connection's reply
// deadline). Without it a request's wait would be bounded by the socket
// deadline, seconds, rather than by its own. call must not write to
// anything the caller reads after bounded returns early.
func bounded(ctx context.Context, call func() error) error {
	done := make(chan error, 1) // buffered: an abandoned call can still send, and end
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startGroupCommit makes Save go through a group commit of up to maxBatch
// links per transaction; sizes observes each batch's size. Call it once,
// before the store is used.
func (s *pgStore) startGroupCommit(ctx context.Context, maxBatch int, sizes observer) error {
	var insert *sql.Stmt
	if s.insert != nil { // DB_PREPARE: prepare the batch insert too
		ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
		defer cancel()
		var err error
		if insert, err = s.db.PrepareContext(ctx, insertBatchSQL); err != nil {
			return fmt.Errorf("store: prepare batch insert: %w", err)
		}
	}
	s.group = newGroupCommit(s.db, insert, maxBatch, s.timeout, sizes)
	return nil
}

// startLookupBatch makes Lookup go through batches of up to maxBatch
// codes per query, with workers queries in flight at most
// (lookupbatch.go); sizes observes each query's codes. Call it once,
// before the store is used.
func (s *pgStore) startLookupBatch(ctx context.Context, maxBatch, workers int, sizes observer) error {
	var many *sql.Stmt
	if s.lookup != nil { // DB_PREPARE: prepare the batch lookup too
		ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
		defer cancel()
		var err error
		if many, err = s.db.PrepareContext(ctx, lookupBatchSQL); err != nil {
			return fmt.Errorf("store: prepare batch lookup: %w", err)
		}
	}
	s.batch = newLookupBatch(s.db, s.lookup, many, maxBatch, workers, s.timeout, sizes)
	return nil
}

// Close writes the links still waiting for a batch, then closes the
// statements and the pool's connections.
func (s *pgStore) Close() error {
	var errs []error
	if s.group != nil {
		s.group.close()
		if s.group.insert != nil {
			errs = append(errs, s.group.insert.Close())
		}
	}
	if s.batch != nil {
		s.batch.close()
		if s.batch.many != nil {
			errs = append(errs, s.batch.many.Close())
		}
	}
	for _, st := range []*sql.Stmt{s.lookup, s.insert} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	errs = append(errs, s.db.Close())
	return errors.Join(errs...)
}

// Link returns a link with its creation time and clicks, or ErrNotFound.
func (s *pgStore) Link(ctx context.Context, code string) (Link, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var l Link // written by the call; read only if it returned
	err := bounded(ctx, func() error {
		var err error
		l, err = scanLink(s.db.QueryRowContext(ctx, linkSQL, code), code)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Link{}, ErrNotFound
	}
	if err != nil {
		return Link{}, fmt.Errorf("store: link %q: %w", code, deadline(ctx, err))
	}
	return l, nil
}

// scanLink reads linkColumns into a Link, NULLs as zero values.
func scanLink(row *sql.Row, code string) (Link, error) {
	l := Link{Code: code}
	var expires, deleted sql.NullTime
	var maxClicks sql.NullInt64
	if err := row.Scan(&l.URL, &l.CreatedAt, &l.Redirect, &expires, &maxClicks, &deleted, &l.Version, &l.Clicks); err != nil {
		return Link{}, err
	}
	l.CreatedAt = l.CreatedAt.UTC()
	if expires.Valid {
		l.ExpiresAt = expires.Time.UTC()
	}
	if deleted.Valid {
		l.DeletedAt = deleted.Time.UTC()
	}
	l.MaxClicks = maxClicks.Int64 // 0 when NULL
	return l, nil
}

// Change edits or deletes code, in a transaction that locks its row,
// checks the token against the stored hash, and changes the row only if
// it matches. Every change adds one to version. A delete blanks the URL
// and keeps the row (the code is never reused).
func (s *pgStore) Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var l Link // written by the call; read only if it returned
	err := bounded(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
		var stored []byte
		var deleted bool
		switch err := tx.QueryRowContext(ctx, lockLinkSQL, code).Scan(&stored, &deleted); {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return fmt.Errorf("lock: %w", err)
		case deleted:
			return ErrGone
		case !tokenMatches(stored, tokenHash):
			return ErrForbidden
		}
		// Only the columns the change names are set; each value is a
		// parameter, never text in the statement.
		set := "version = version + 1"
		args := []any{code}
		param := func(column string, v any) {
			args = append(args, v)
			set += fmt.Sprintf(", %s = $%d", column, len(args))
		}
		if ch.Delete {
			set += ", url = '', deleted_at = now()"
		}
		if ch.URL != "" {
			param("url", ch.URL)
		}
		if ch.Redirect != 0 {
			param("redirect", ch.Redirect)
		}
		if ch.SetExpiry {
			var v any // NULL clears it
			if !ch.ExpiresAt.IsZero() {
				v = ch.ExpiresAt
			}
			param("expires_at", v)
		}
		if ch.SetMax {
			var v any
			if ch.MaxClicks > 0 {
				v = ch.MaxClicks
			}
			param("max_clicks", v)
		}
		row := tx.QueryRowContext(ctx, "UPDATE links SET "+set+" WHERE code = $1 RETURNING "+linkColumns, args...)
		if l, err = scanLink(row, code); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrGone), errors.Is(err, ErrForbidden):
		return Link{}, err
	default:
		return Link{}, fmt.Errorf("store: change %q: %w", code, deadline(ctx, err))
	}
}

// TakeClick counts a click of a link with max_clicks if it has one left
// (takeClickSQL), or, for a HEAD (count false), only says whether it has.
// This is a write to Postgres on the request's path, for every click of
// such a link: the price of a limit that holds exactly.
//
// The click's statement does not end with the request: a deadline that
// passed, or a client that hung up, as its row came back would leave a
// click used up and the client told 503, then 410 on its retry (issue
// 24, item 7). So it runs on a context of its own, given DB_TIMEOUT
// twice over from now, and its answer counts however late it comes
// within that: a row back is a redirect. The wait for a limited link's
// click is bounded by 2 × DB_TIMEOUT, not DB_TIMEOUT. Only when that
// passes too is the outcome unknown (the 503 may have used a click).
func (s *pgStore) TakeClick(ctx context.Context, code string, count bool) (bool, error) {
	if !count {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		var left bool // written by the call; read only if it returned
		err := bounded(ctx, func() error {
			return s.db.QueryRowContext(ctx, clickLeftSQL, code).Scan(&left)
		})
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("store: click left %q: %w", code, deadline(ctx, err))
		}
		return left, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.timeout)
	defer cancel()
	var clicks int64 // written by the call; read only if it returned
	err := bounded(ctx, func() error {
		return s.db.QueryRowContext(ctx, takeClickSQL, code).Scan(&clicks)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: take click %q: %w", code, deadline(ctx, err))
	}
	return true, nil
}

// AddClicks sums codes per code and adds the sums in one statement. The
// codes go in sorted, so that two instances adding to the same codes at once
// lock their rows in the same order and cannot deadlock.
func (s *pgStore) AddClicks(ctx context.Context, codes []string) error {
	if err := addClicks(ctx, s.db, codes); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// AddClickRows writes one row per click (CLICK_STORAGE=rows).
func (s *pgStore) AddClickRows(ctx context.Context, codes []string) error {
	if err := addClickRows(ctx, s.db, codes); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// addClicks adds one to a code's count in click_counts for each time it
// is in codes, in one statement. The codes go in sorted, so that two
// instances lock rows in the same order and cannot deadlock. The stats'
// writer (statsStore.writeCounts) uses it too.
func addClicks(ctx context.Context, db *sql.DB, codes []string) error {
	counts := make(map[string]int64, len(codes))
	for _, c := range codes {
		counts[c]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	sums := make([]int64, len(keys))
	for i, k := range keys {
		sums[i] = counts[k]
	}
	if _, err := db.ExecContext(ctx, addClicksSQL, pq.Array(keys), pq.Array(sums)); err != nil {
		return fmt.Errorf("add clicks for %d codes: %w", len(keys), deadline(ctx, err))
	}
	return nil
}

// addClickRows writes one row per click in codes (CLICK_STORAGE=rows).
func addClickRows(ctx context.Context, db *sql.DB, codes []string) error {
	if _, err := db.ExecContext(ctx, addClickRowsSQL, pq.Array(codes)); err != nil {
		return fmt.Errorf("add %d click rows: %w", len(codes), deadline(ctx, err))
	}
	return nil
}
