package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

// lookupSQL is the app's lookup, copied from store_postgres.go as it is
// written there: the same text is the same statement to Postgres.
const lookupSQL = `SELECT url FROM links WHERE code = $1`

// The app's pool (config.go's defaults, sized by the measurements in
// docs/03), given to every variant.
const (
	maxOpenConns    = 8
	maxIdleConns    = maxOpenConns
	connMaxIdleTime = 5 * time.Minute
	connMaxLifetime = 30 * time.Minute
	// dbTimeout is DB_TIMEOUT's default: the deadline of each lookup.
	dbTimeout = 500 * time.Millisecond
	// replyTimeout is the app's reply deadline on lib/pq's sockets with
	// the defaults: max(DB_TIMEOUT, clickWriteTimeout) + 1 s.
	replyTimeout = 5*time.Second + time.Second
)

// lookuper runs the app's lookup through one driver.
type lookuper interface {
	// lookup returns the URL stored under code and true, or false if no
	// link has code.
	lookup(ctx context.Context, code string) (string, bool, error)
	Close() error
}

// variant is one way to run the lookup.
type variant struct {
	name string
	what string // for the output's header
	open func(ctx context.Context, dsn string) (lookuper, error)
}

// variants, in the order a round runs them (reversed in every other
// round). The first is the one the others are divided by.
var variants = []variant{
	{"pq", "lib/pq through database/sql, opened as the app opens it: pq.NewConnector with the app's reply-deadline dialer (store_postgres.go)", openPQ(true)},
	{"pgx", "pgx/v5/stdlib through database/sql: stdlib.OpenDB with pgx.ParseConfig's defaults", openPGXStdlib},
	{"pgxpool", "pgx's own interface and pool (pgxpool), for the reader's information: pool.QueryRow, its per-connection statement cache preparing the query", openPGXPool},
	{"pq-bare", "lib/pq through database/sql without the app's dialer: what the dialer itself costs, beside pq", openPQ(false)},
}

func variantNamed(name string) (variant, bool) {
	for _, v := range variants {
		if v.name == name {
			return v, true
		}
	}
	return variant{}, false
}

// sqlLookup is the lookup as the app's pgStore makes it through
// database/sql: a statement prepared once, which database/sql prepares
// again on each pooled connection at its first use there.
type sqlLookup struct {
	db   *sql.DB
	stmt *sql.Stmt
}

func newSQLLookup(ctx context.Context, db *sql.DB) (*sqlLookup, error) {
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxIdleTime(connMaxIdleTime)
	db.SetConnMaxLifetime(connMaxLifetime)
	stmt, err := db.PrepareContext(ctx, lookupSQL)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare lookup: %w", err)
	}
	return &sqlLookup{db: db, stmt: stmt}, nil
}

func (s *sqlLookup) lookup(ctx context.Context, code string) (string, bool, error) {
	var url string
	err := s.stmt.QueryRowContext(ctx, code).Scan(&url)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return url, true, nil
}

func (s *sqlLookup) Close() error {
	return errors.Join(s.stmt.Close(), s.db.Close())
}

// openPQ opens lib/pq as the app does, with its dialer or without.
func openPQ(withDialer bool) func(context.Context, string) (lookuper, error) {
	return func(ctx context.Context, dsn string) (lookuper, error) {
		connector, err := pq.NewConnector(dsn)
		if err != nil {
			return nil, fmt.Errorf("pq: %w", err)
		}
		if withDialer {
			dialer := replyDeadlineDialer{limit: new(atomic.Int64)}
			dialer.limit.Store(int64(replyTimeout))
			connector.Dialer(dialer)
		}
		return newSQLLookup(ctx, sql.OpenDB(connector))
	}
}

func openPGXStdlib(ctx context.Context, dsn string) (lookuper, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgx: %w", err)
	}
	return newSQLLookup(ctx, stdlib.OpenDB(*cfg))
}

// poolLookup is the lookup through pgx's own pool. pgx prepares the query
// on each connection at its first use and keeps it in a cache there
// (QueryExecModeCacheStatement, the default): a prepared statement, as
// with database/sql.
type poolLookup struct {
	pool *pgxpool.Pool
}

func openPGXPool(ctx context.Context, dsn string) (lookuper, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgxpool: %w", err)
	}
	cfg.MaxConns = maxOpenConns
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = connMaxIdleTime
	cfg.MaxConnLifetime = connMaxLifetime
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgxpool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgxpool: ping: %w", err)
	}
	return poolLookup{pool: pool}, nil
}

func (p poolLookup) lookup(ctx context.Context, code string) (string, bool, error) {
	var url string
	err := p.pool.QueryRow(ctx, lookupSQL, code).Scan(&url)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return url, true, nil
}

func (p poolLookup) Close() error {
	p.pool.Close()
	return nil
}

// replyDeadlineDialer and replyDeadlineConn are the app's (see
// store_postgres.go for why lib/pq needs them: it sets no deadline on its
// socket, so a Postgres that stops answering would hold a call forever).
// pgx needs no such wrapper: when a query's context ends, it sets the
// socket's deadline itself.
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
