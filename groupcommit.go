package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/lib/pq"
)

// insertBatchSQL inserts many links in one statement: an array per
// column, unnested into rows. A code already taken is skipped (ON
// CONFLICT DO NOTHING), and RETURNING names the codes that were
// inserted, so that each create learns whether its own code was. An
// array cannot hold a NULL from a plain Go slice, so an unset field goes
// in as a value no real one has, turned into NULL here: expiry 0 (in
// microseconds since 1970, which keeps Postgres's precision exactly),
// max_clicks 0, an empty token hash.
const insertBatchSQL = `INSERT INTO links (code, url, expires_at, max_clicks, redirect, token_hash)
SELECT c, u, CASE WHEN e = 0 THEN NULL ELSE timestamptz 'epoch' + e * interval '1 microsecond' END,
       nullif(m, 0), r, nullif(h, ''::bytea)
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::smallint[], $6::bytea[]) AS t(c, u, e, m, r, h)
ON CONFLICT (code) DO NOTHING
RETURNING code`

// groupCommitWorkers is how many batches can be in flight at once. Step 10
// had two, so that one batch is gathered while the other commits; step 18
// measured one against two, with the rate limit's workers likewise, and
// one made more creates a second in each of five rounds (1.05 to 1.26
// times, benchmarks/18-drafts/workers.txt): its batches are bigger, and a
// batch costs about as much whatever its size. The creates that arrive
// while it commits still wait together, for the next.
const groupCommitWorkers = 1

// groupCommit saves links in batches: the creates that arrive while a
// batch is being written wait together, and go in the next one, as one
// INSERT in one transaction, so that one commit (one WAL flush, one round
// trip) serves them all. Each create is answered only after the commit of
// its batch has returned: a 201 means the link is on disk, as it did when
// each create was its own transaction. Nothing waits on purpose to make a
// batch bigger: with one create at a time, a batch holds one.
type groupCommit struct {
	db       *sql.DB
	insert   *sql.Stmt // prepared insertBatchSQL, or nil (DB_PREPARE=false)
	queue    chan *pendingSave
	maxBatch int
	timeout  time.Duration // each batch's deadline: DB_TIMEOUT
	sizes    observer      // links per batch (metrics.go)

	// closed, under mu, refuses new creates once close has begun; a
	// create holds mu's read lock while it queues, so that none can slip
	// into the queue after the workers have drained it.
	mu       sync.RWMutex
	closed   bool
	stopOnce sync.Once
	stop     chan struct{}
	done     sync.WaitGroup
}

// pendingSave is one create waiting for its batch's commit.
type pendingSave struct {
	code string
	link NewLink
	done chan error // buffered: the worker never waits for a create that gave up
}

func newGroupCommit(db *sql.DB, insert *sql.Stmt, maxBatch int, timeout time.Duration, sizes observer) *groupCommit {
	if sizes == nil {
		sizes = noObserve{}
	}
	g := &groupCommit{
		db:       db,
		insert:   insert,
		queue:    make(chan *pendingSave, maxBatch*groupCommitWorkers),
		maxBatch: maxBatch,
		timeout:  timeout,
		sizes:    sizes,
		stop:     make(chan struct{}),
	}
	for range groupCommitWorkers {
		g.done.Go(g.run)
	}
	return g
}

// save queues code and url for the next batch and waits for its commit.
// It returns nil once the link is committed, ErrCodeTaken if the code was
// taken, or an error if the batch failed or ctx ended first. A create that
// gave up (ctx) may still be committed a moment later: that link is never
// announced to anyone, and costs a row.
func (g *groupCommit) save(ctx context.Context, code string, link NewLink) error {
	p := &pendingSave{code: code, link: link, done: make(chan error, 1)}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return errGroupCommitClosed
	}
	select {
	case g.queue <- p:
		g.mu.RUnlock()
	case <-ctx.Done():
		g.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run takes the first create waiting, then every other one already
// queued, up to maxBatch, writes them, and starts again. Once close has
// begun, stopping comes first, so that what is queued is written by drain.
func (g *groupCommit) run() {
	batch := make([]*pendingSave, 0, g.maxBatch)
	for {
		select {
		case <-g.stop:
			g.drain()
			return
		default:
		}
		select {
		case p := <-g.queue:
			batch = collect(batch[:0], g.queue, p, g.maxBatch)
			g.write(batch)
		case <-g.stop:
			g.drain()
			return
		}
	}
}

// drain writes what is still queued when the store closes (the HTTP
// server has stopped by then, so no more arrives).
func (g *groupCommit) drain() {
	batch := make([]*pendingSave, 0, g.maxBatch)
	for {
		select {
		case p := <-g.queue:
			batch = collect(batch[:0], g.queue, p, g.maxBatch)
			g.write(batch)
		default:
			return
		}
	}
}

// write inserts batch in one transaction and answers each create: nil if
// its link was inserted, ErrCodeTaken if its code was in use (before, or
// earlier in this same batch), the batch's error if the transaction failed.
func (g *groupCommit) write(batch []*pendingSave) {
	g.sizes.Observe(float64(len(batch)))
	var cols batchColumns
	first := make(map[string]*pendingSave, len(batch))
	for _, p := range batch {
		if _, dup := first[p.code]; dup {
			continue // answered ErrCodeTaken below: the first one with the code has it
		}
		first[p.code] = p
		cols.add(p.code, p.link)
	}
	codes := cols.codes
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	inserted, err := g.insertAll(ctx, cols)
	if err != nil {
		// Save adds "store: save <code>": one prefix, not two.
		err = fmt.Errorf("batch of %d: %w", len(codes), deadline(ctx, err))
	}
	for _, p := range batch {
		switch {
		case err != nil:
			p.done <- err
		case first[p.code] == p && inserted[p.code]:
			p.done <- nil
		default:
			p.done <- ErrCodeTaken
		}
	}
}

// insertAll runs the batch's INSERT and returns the codes inserted once
// it has committed. bounded keeps a Postgres that stopped answering from
// holding the worker past ctx.
//
// Step 18: the INSERT is its own transaction. A statement sent outside
// BEGIN is committed by Postgres before it says it is ready for the
// next (with synchronous_commit on, after the WAL flush), and lib/pq
// reads up to that point before rows.Close returns: the same guarantee
// as BEGIN, INSERT, COMMIT, in one round trip instead of three (with
// DB_PREPARE; without, lib/pq prepares it first, a second one).
func (g *groupCommit) insertAll(ctx context.Context, cols batchColumns) (map[string]bool, error) {
	inserted := make(map[string]bool, len(cols.codes))
	args := []any{pq.Array(cols.codes), pq.Array(cols.urls), pq.Array(cols.expires),
		pq.Array(cols.maxClicks), pq.Array(cols.redirects), pq.Array(cols.tokens)}
	err := bounded(ctx, func() error {
		var rows *sql.Rows
		var err error
		if g.insert != nil {
			rows, err = g.insert.QueryContext(ctx, args...)
		} else {
			rows, err = g.db.QueryContext(ctx, insertBatchSQL, args...)
		}
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		for rows.Next() {
			var code string
			if err := rows.Scan(&code); err != nil {
				rows.Close() //nolint:errcheck // the scan error is the one worth returning
				return fmt.Errorf("insert: scan: %w", err)
			}
			inserted[code] = true
		}
		// Close reads to the end; a commit that fails comes after the
		// rows, and is an error from Close or Err.
		if err := rows.Close(); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}

// batchColumns are a batch's links, a slice per column (insertBatchSQL).
type batchColumns struct {
	codes, urls        []string
	expires, maxClicks []int64 // 0: NULL
	redirects          []int64
	tokens             [][]byte // empty: NULL
}

func (b *batchColumns) add(code string, l NewLink) {
	var expires int64
	if !l.ExpiresAt.IsZero() {
		expires = l.ExpiresAt.UnixMicro()
	}
	redirect := l.Redirect
	if redirect == 0 {
		redirect = defaultRedirect
	}
	b.codes = append(b.codes, code)
	b.urls = append(b.urls, l.URL)
	b.expires = append(b.expires, expires)
	b.maxClicks = append(b.maxClicks, l.MaxClicks)
	b.redirects = append(b.redirects, int64(redirect))
	b.tokens = append(b.tokens, l.TokenHash)
}

// close stops taking creates, writes those already queued, and waits for
// the workers.
func (g *groupCommit) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.stopOnce.Do(func() { close(g.stop) })
	g.done.Wait()
}
