package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	// pq.NewConnector opens the connections; pq.Error carries
	// Postgres's error codes.
	"github.com/lib/pq"
)

// bgReplyTimeout is how long the background pool's connections (pgStore.bg)
// wait for Postgres to answer: the longest deadline of the calls made on
// it, plus a second, so that each call ends at its own deadline, with a
// cancel that Postgres reads, and not at the socket's (docs/40).
const bgReplyTimeout = max(bloomQueryTimeout, bloomResyncTimeout) + time.Second

// bgPoolConns is the background pool's size: the Bloom filter's run loop
// (a build, a rebuild or a resync, one at a time) and its sweep beside it.
const bgPoolConns = 2

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
	// It also cuts the stats' flush, whose own deadline is longer
	// (docs/39); the Bloom filter's build, sweep and resync have a pool
	// of their own (pgStore.bg, docs/40).
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
	// call of a request or a click write (see replyDeadlineConn; the
	// Bloom filter's calls, whose deadlines are longer, go to bg).
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
	s := &pgStore{db: db, timeout: pool.timeout, lookups: lookups, fence: readFence{on: pool.readOnly}}
	if !pool.readOnly {
		// The side pools of a primary (a replica takes only lookups): no
		// connection until a call needs one. openSide is kept for the
		// lookups' pool, which startLookupBatch sizes and opens.
		s.openSide = func(reply time.Duration, maxOpen, maxIdle int) (*sql.DB, error) {
			return openSidePool(dsn, reply, pool, maxOpen, maxIdle)
		}
		s.replyTimeout = replyTimeout
		if s.bg, err = s.openSide(bgReplyTimeout, bgPoolConns, 1); err != nil {
			db.Close() //nolint:errcheck // the connector's error is the one worth returning
			return nil, fmt.Errorf("store: open background pool: %w", err)
		}
	}
	fail := func(err error) (*pgStore, error) {
		db.Close() //nolint:errcheck // err is the one worth returning
		if s.bg != nil {
			s.bg.Close() //nolint:errcheck // err is the one worth returning
		}
		return nil, err
	}
	if !pool.readOnly {
		if err := s.migrate(ctx); err != nil {
			return fail(err)
		}
	}
	if pool.prepare {
		if err := s.prepare(ctx, pool.readOnly); err != nil {
			return fail(err)
		}
	}
	dialer.limit.Store(int64(replyTimeout))
	return s, nil
}

// openSidePool opens a pool of its own beside the request pool, to the
// same dsn with the same client check, idle time and lifetime, whose
// connections wait reply for Postgres's answers (replyDeadlineConn). It
// opens no connection until a call needs one.
func openSidePool(dsn string, reply time.Duration, pool poolConfig, maxOpen, maxIdle int) (*sql.DB, error) {
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	dialer := replyDeadlineDialer{limit: new(atomic.Int64)}
	dialer.limit.Store(int64(reply))
	connector.Dialer(dialer)
	db := sql.OpenDB(clientCheckConnector{Connector: connector, interval: pool.clientCheck})
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxIdle)
	db.SetConnMaxIdleTime(pool.maxIdleTime)
	db.SetConnMaxLifetime(pool.maxLifetime)
	return db, nil
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
