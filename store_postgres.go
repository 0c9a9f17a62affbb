package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// A replica's reads (step 47, replicafence.go): the same statements, and
// a row only if the snapshot it is read with holds every transaction the
// primary had completed when the fence asked it, by the oldest of its
// answers within replicaMaxLag ($2; "0" bounds nothing). A row held back is "not found"
// on the replica, and asked of the primary.
const (
	replicaFenceCond     = ` AND pg_snapshot_xmin(pg_current_snapshot()) >= $2::xid8`
	lookupFencedSQL      = lookupSQL + replicaFenceCond
	lookupBatchFencedSQL = lookupBatchSQL + replicaFenceCond
	linkFencedSQL        = linkSQL + replicaFenceCond
)

// pgStore keeps links in Postgres. database/sql's *sql.DB is not one
// connection but a pool of them, safe for concurrent use.
type pgStore struct {
	db *sql.DB
	// bg is a pool of its own for the background calls whose deadline is
	// longer than a request's: the Bloom filter's build, sweep and
	// resync. On db each of them was cut at db's reply deadline (6 s by
	// default), whatever its own (docs/40).
	bg *sql.DB
	// reads is a pool of its own for the lookups of LOOKUP_BATCH (one
	// connection per lookup worker), on a primary: on db they can wait
	// for a connection behind writes (TestLookupsDoNotWaitForWrites).
	// That they did in the hosts runs, where a synchronous standby was
	// gone, every write held its connection until its deadline and
	// redirects that needed Postgres answered 503, is docs/42's reading
	// of the counters, not measured directly. nil on a replica, whose
	// pool takes only lookups, and until startLookupBatch.
	reads *sql.DB
	// openSide opens a side pool to the same database (openSidePool), and
	// replyTimeout is db's reply deadline; both nil/0 on a replica.
	openSide     func(reply time.Duration, maxOpen, maxIdle int) (*sql.DB, error)
	replyTimeout time.Duration
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
	// fence, on a replica, has reads made with the fenced statements
	// and its bound (replicafence.go); off on a primary.
	fence readFence
}

// readFence picks a read's statement and arguments: on a primary the
// plain ones; on a replica the fenced ones, with bound's answer as $2
// (nil: "0", no bound).
type readFence struct {
	on    bool
	bound func() string
}

func (f readFence) sql(plain, fenced string) string {
	if f.on {
		return fenced
	}
	return plain
}

func (f readFence) args(first any) []any {
	if !f.on {
		return []any{first}
	}
	if f.bound == nil {
		return []any{first, "0"}
	}
	return []any{first, f.bound()}
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
			row = s.lookup.QueryRowContext(ctx, s.fence.args(code)...)
		} else {
			row = s.db.QueryRowContext(ctx, s.fence.sql(lookupSQL, lookupFencedSQL), s.fence.args(code)...)
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
//
// On a primary the batches have a pool of their own (pgStore.reads), one
// connection per worker, so that a lookup never waits for a connection
// behind writes; a replica's pool has nothing else to do.
func (s *pgStore) startLookupBatch(ctx context.Context, maxBatch, workers int, sizes observer) error {
	db, one := s.db, s.lookup
	if s.openSide != nil {
		reads, err := s.openSide(s.replyTimeout, workers, workers)
		if err != nil {
			return fmt.Errorf("store: open the lookups' pool: %w", err)
		}
		s.reads, db, one = reads, reads, nil
	}
	var many *sql.Stmt
	if s.lookup != nil { // DB_PREPARE: prepare the batch lookup too, and the single one on reads
		ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
		defer cancel()
		var err error
		if db != s.db {
			if one, err = db.PrepareContext(ctx, s.fence.sql(lookupSQL, lookupFencedSQL)); err != nil {
				return fmt.Errorf("store: prepare lookup on the lookups' pool: %w", err)
			}
		}
		if many, err = db.PrepareContext(ctx, s.fence.sql(lookupBatchSQL, lookupBatchFencedSQL)); err != nil {
			return fmt.Errorf("store: prepare batch lookup: %w", err)
		}
	}
	s.batch = newLookupBatch(db, one, many, maxBatch, workers, s.timeout, sizes)
	s.batch.fence = s.fence // set before: a replica's bound (main.go)
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
		if s.batch.one != nil && s.batch.one != s.lookup {
			errs = append(errs, s.batch.one.Close())
		}
	}
	for _, st := range []*sql.Stmt{s.lookup, s.insert} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	errs = append(errs, s.db.Close())
	if s.bg != nil {
		errs = append(errs, s.bg.Close())
	}
	if s.reads != nil {
		errs = append(errs, s.reads.Close())
	}
	return errors.Join(errs...)
}

// Link returns a link with its creation time and clicks, or ErrNotFound.
func (s *pgStore) Link(ctx context.Context, code string) (Link, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var l Link // written by the call; read only if it returned
	err := bounded(ctx, func() error {
		var err error
		l, err = scanLink(s.db.QueryRowContext(ctx, s.fence.sql(linkSQL, linkFencedSQL), s.fence.args(code)...), code)
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
