package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lib/pq"
)

// lookupBatchSQL reads many codes in one statement (step 37): the lookup's
// columns and the code, for each code of $1 that has a row. A code with
// no row is missing from the answer: not found.
const lookupBatchSQL = `SELECT code, url, redirect, expires_at, max_clicks IS NOT NULL, deleted_at IS NOT NULL, version
FROM links WHERE code = ANY($1::text[])`

var errLookupBatchClosed = errors.New("store: lookups closed")

// lookupBatch answers the lookups that reach Postgres in batches. Each of
// its workers (LOOKUP_WORKERS, one connection each when busy) takes one
// lookup, then every other one already queued: a lookup that finds a
// worker free is sent at once, alone, with the one-code statement it had
// before step 37, and the ones that arrive while every worker has a query
// in flight wait together, and go in the next query as one
// `code = ANY($1)`, each answered from its rows. Group commit
// (groupcommit.go) does the same for creates. Nothing waits on purpose to
// make a batch bigger.
type lookupBatch struct {
	db        *sql.DB
	one, many *sql.Stmt // prepared lookupSQL and lookupBatchSQL, or nil (DB_PREPARE=false)
	queue     chan *pendingLookup
	maxBatch  int
	workers   int
	timeout   time.Duration // a batch's deadline when a waiter has none: DB_TIMEOUT
	sizes     observer      // codes per query (metrics.go)
	fence     readFence     // on a replica: the fenced statements (replicafence.go)

	// As in groupCommit: closed, under mu, refuses new lookups once close
	// has begun; a lookup holds mu's read lock while it queues.
	mu       sync.RWMutex
	closed   bool
	stopOnce sync.Once
	stop     chan struct{}
	done     sync.WaitGroup
}

// pendingLookup is one lookup waiting for its batch.
type pendingLookup struct {
	code     string
	deadline time.Time         // the waiter's; zero if it has none
	done     chan lookupResult // buffered: the worker never waits for a lookup that gave up
}

type lookupResult struct {
	t   Target
	err error
}

func newLookupBatch(db *sql.DB, one, many *sql.Stmt, maxBatch, workers int, timeout time.Duration, sizes observer) *lookupBatch {
	if sizes == nil {
		sizes = noObserve{}
	}
	b := &lookupBatch{
		db: db, one: one, many: many,
		queue:    make(chan *pendingLookup, maxBatch*workers),
		maxBatch: maxBatch,
		workers:  workers,
		timeout:  timeout,
		sizes:    sizes,
		stop:     make(chan struct{}),
	}
	for range workers {
		b.done.Go(b.run)
	}
	return b
}

// lookup queues code and waits for its batch's answer, or for ctx. A
// lookup that gives up leaves its batch as it is: the others in it are
// answered all the same.
func (b *lookupBatch) lookup(ctx context.Context, code string) (Target, error) {
	p := &pendingLookup{code: code, done: make(chan lookupResult, 1)}
	p.deadline, _ = ctx.Deadline()
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return Target{}, errLookupBatchClosed
	}
	select {
	case b.queue <- p:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return Target{}, ctx.Err()
	}
	select {
	case r := <-p.done:
		return r.t, r.err
	case <-ctx.Done():
		return Target{}, ctx.Err()
	}
}

// run takes the first lookup waiting, then every other one already
// queued, up to maxBatch, answers them, and starts again. Once close has
// begun, what is queued is answered by drain.
func (b *lookupBatch) run() {
	batch := make([]*pendingLookup, 0, b.maxBatch)
	for {
		select {
		case <-b.stop:
			b.drain(batch)
			return
		default:
		}
		select {
		case p := <-b.queue:
			batch = collect(batch[:0], b.queue, p, b.maxBatch)
			b.answer(batch)
		case <-b.stop:
			b.drain(batch)
			return
		}
	}
}

func (b *lookupBatch) drain(batch []*pendingLookup) {
	for {
		select {
		case p := <-b.queue:
			batch = collect(batch[:0], b.queue, p, b.maxBatch)
			b.answer(batch)
		default:
			return
		}
	}
}

// close answers what is queued, then stops the workers; lookups after it
// get errLookupBatchClosed.
func (b *lookupBatch) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.stopOnce.Do(func() { close(b.stop) })
	b.done.Wait()
}

// answer runs one query for batch and sends each waiter its own code's
// result (pgStore.Lookup counts it, as the waiter got it: a waiter that
// gave up first counts as an error, as before step 37): its row, ErrNotFound if the rows have none for it, or the
// query's error. The query's deadline is the latest of its waiters' (a
// waiter with none counts as DB_TIMEOUT from now): a replica's lookups,
// which give up after 100 ms (replica.go), are not kept on a stuck
// replica for DB_TIMEOUT, and no waiter's own deadline is cut short.
func (b *lookupBatch) answer(batch []*pendingLookup) {
	now := time.Now()
	live := batch[:0]
	for _, p := range batch {
		if !p.deadline.IsZero() && !p.deadline.After(now) {
			// It has given up already (its lookup returned at its
			// deadline): no query for it.
			p.done <- lookupResult{err: context.DeadlineExceeded}
			continue
		}
		live = append(live, p)
	}
	if batch = live; len(batch) == 0 {
		return
	}
	b.sizes.Observe(float64(len(batch)))
	end := time.Time{}
	for _, p := range batch {
		d := p.deadline
		if d.IsZero() {
			d = now.Add(b.timeout)
		}
		if d.After(end) {
			end = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var found map[string]Target
	var err error
	if len(batch) == 1 {
		var t Target
		if t, err = b.queryOne(ctx, batch[0].code); err == nil {
			found = map[string]Target{batch[0].code: t}
		} else if errors.Is(err, sql.ErrNoRows) {
			found, err = nil, nil
		}
	} else {
		found, err = b.queryMany(ctx, batch)
	}
	if err != nil {
		err = deadline(ctx, err)
		if len(batch) > 1 {
			err = fmt.Errorf("batch of %d: %w", len(batch), err)
		}
	}
	for _, p := range batch {
		t, ok := found[p.code]
		switch {
		case err != nil:
			p.done <- lookupResult{err: err}
		case !ok:
			p.done <- lookupResult{err: ErrNotFound}
		default:
			p.done <- lookupResult{t: t}
		}
	}
}

// queryOne is the lookup of one code, as each lookup was before step 37.
func (b *lookupBatch) queryOne(ctx context.Context, code string) (Target, error) {
	var row *sql.Row
	if b.one != nil {
		row = b.one.QueryRowContext(ctx, b.fence.args(code)...)
	} else {
		row = b.db.QueryRowContext(ctx, b.fence.sql(lookupSQL, lookupFencedSQL), b.fence.args(code)...)
	}
	var t Target
	var expires sql.NullTime
	if err := row.Scan(&t.URL, &t.Status, &expires, &t.Limited, &t.Deleted, &t.Version); err != nil {
		return Target{}, err
	}
	if expires.Valid {
		t.ExpiresAt = expires.Time.UTC()
	}
	return t, nil
}

// queryMany looks up every code of batch in one query. A code asked for
// twice (two waiters, one code) is sent once.
func (b *lookupBatch) queryMany(ctx context.Context, batch []*pendingLookup) (map[string]Target, error) {
	codes := make([]string, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	for _, p := range batch {
		if !seen[p.code] {
			seen[p.code] = true
			codes = append(codes, p.code)
		}
	}
	var rows *sql.Rows
	var err error
	if b.many != nil {
		rows, err = b.many.QueryContext(ctx, b.fence.args(pq.Array(codes))...)
	} else {
		rows, err = b.db.QueryContext(ctx, b.fence.sql(lookupBatchSQL, lookupBatchFencedSQL), b.fence.args(pq.Array(codes))...)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]Target, len(codes))
	for rows.Next() {
		var code string
		var t Target
		var expires sql.NullTime
		if err := rows.Scan(&code, &t.URL, &t.Status, &expires, &t.Limited, &t.Deleted, &t.Version); err != nil {
			return nil, err
		}
		if expires.Valid {
			t.ExpiresAt = expires.Time.UTC()
		}
		found[code] = t
	}
	return found, rows.Err()
}
