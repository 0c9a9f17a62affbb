package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// How far behind a standby may be and still answer (step 47).
//
// A standby is behind the primary by its replication lag: milliseconds
// while it streams, seconds after a failover until it streams from the
// new primary, and without bound while it cannot (its WAL receiver cut
// off, replay stopped by a conflict, its disk full). Steps 36 and 46 send
// a code changed here, or heard of from another instance, to the primary
// for 30 s; past that window, or after a subscription made again (nothing
// heard), nothing asked a standby how far behind it was, and a standby
// stuck behind kept serving links as they were before an edit or a
// delete for as long as it stayed stuck.
//
// So each of the replica's reads carries a bound, and the standby itself
// checks it in the same statement as the read (replicaFenceCond): the
// row comes back only if the statement's snapshot holds every
// transaction the primary had completed when it was asked, by the oldest
// of its answers within replicaMaxLag. A row held back is "not found" there, and a code not
// found on the replica is asked of the primary (replica.go): the answer is
// then the primary's. The check is made by the server that answers,
// whichever it is: behind HAProxy, each connection of the replica's pool
// may reach another standby, so a lag measured on one connection would
// say nothing of the next.
//
// The bound is a transaction id, not a WAL position or a time. Every
// replicaMaxLag/4 the fence asks the primary for its snapshot's xmax: no
// transaction at or above it had completed, so every transaction that
// had (and every change acknowledged to its client before that question
// was sent) lies below it. On the standby, the statement's own
// snapshot's xmin is the oldest transaction it does not see as complete
// (its own xmax when it sees none running): if that is at or past the
// primary's xmax, every transaction the primary had completed is
// complete in the snapshot the row was read with (reasoning from
// Postgres's definitions; TestStandbyBehindIsReadFromThePrimary checks
// it on a real standby). (A standby's snapshot does not list the running
// transactions above its xmin, pg_current_snapshot shows them empty
// there, so xmin is what can be relied on; one transaction left open on
// the primary for longer than replicaMaxLag holds every standby's xmin
// below the bound, and sends the replica's reads to the primary until it
// ends: slower, not wrong.)
//
// The bound asked for is that of the oldest answer within replicaMaxLag,
// so that a standby a few milliseconds behind still answers. While the
// primary has not answered for replicaMaxLag (a failover: nothing can be
// changed there), the reads carry no bound and the standby answers as it
// did before this step: during a failover the standbys are what serves
// the links not in a cache.
type replicaFence struct {
	primary, standby *sql.DB
	maxLag           time.Duration
	now              func() time.Time

	mu      sync.Mutex
	samples []fenceSample // the primary's answers within maxLag, oldest first; mu

	// behind is the standby's state as the last check saw it (metrics.go):
	// fenceHeld, fenceBehind (its snapshot below the bound), or
	// fenceUnbounded (no answer from the primary within maxLag).
	behind  atomic.Int32
	failLog *sampledLog
}

// replicaMaxLag is the most a standby's answer may miss: every change the
// primary acknowledged longer ago than this is in it, while the primary
// answers the fence (docs/47).
const replicaMaxLag = time.Second

// The fence's states (replicaFence.behind).
const (
	fenceHeld = iota
	fenceBehind
	fenceUnbounded
)

// fenceSample is one answer of the primary: when the question was sent,
// and the xmax of its snapshot then.
type fenceSample struct {
	at   time.Time
	xmax uint64
}

// primaryXmaxSQL asks the primary for its snapshot's xmax: every
// transaction that has completed lies below it. standbyHeldSQL asks a
// standby whether its snapshot sees every transaction below a bound as
// complete.
const (
	primaryXmaxSQL = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`
	standbyHeldSQL = `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8`
)

func newReplicaFence(primary, standby *sql.DB, failLog *sampledLog) *replicaFence {
	f := &replicaFence{primary: primary, standby: standby, maxLag: replicaMaxLag, now: time.Now, failLog: failLog}
	f.behind.Store(fenceUnbounded)
	return f
}

// run asks the primary, then the standby, every maxLag/4 until ctx ends.
func (f *replicaFence) run(ctx context.Context) {
	t := time.NewTicker(f.maxLag / 4)
	defer t.Stop()
	for {
		f.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check asks the primary for its xmax and keeps it, then asks the standby
// whether it holds the bound reads carry now (for the metric; each read
// is checked on its own).
func (f *replicaFence) check(ctx context.Context) {
	if err := f.sample(ctx); err != nil && ctx.Err() == nil && f.failLog != nil {
		f.failLog.warn(ctx, "replica fence: the primary did not say which transactions it has completed; reads from the replica carry no bound once its last answer is older than "+f.maxLag.String(), err)
	}
	bound := f.bound()
	if bound == "0" {
		f.behind.Store(fenceUnbounded)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.maxLag)
	defer cancel()
	var held bool
	if err := f.standby.QueryRowContext(ctx, standbyHeldSQL, bound).Scan(&held); err != nil {
		if ctx.Err() == nil && f.failLog != nil {
			f.failLog.warn(ctx, "replica fence: the standby did not say whether it holds the bound", err)
		}
		return
	}
	if held {
		f.behind.Store(fenceHeld)
	} else {
		f.behind.Store(fenceBehind)
	}
}

// sample asks the primary for its snapshot's xmax and keeps it, as of
// the moment the question was sent.
func (f *replicaFence) sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.maxLag)
	defer cancel()
	at := f.now()
	var text string
	if err := f.primary.QueryRowContext(ctx, primaryXmaxSQL).Scan(&text); err != nil {
		return err
	}
	// What comes back is input: an xid8 is a decimal uint64.
	xmax, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return fmt.Errorf("replica fence: the primary's xmax %q: %w", text, err)
	}
	f.add(at, xmax)
	return nil
}

// add keeps a sample and drops the ones that have left the window.
func (f *replicaFence) add(at time.Time, xmax uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.samples = append(f.samples, fenceSample{at: at, xmax: xmax})
	f.samples = f.samples[f.firstWithin(f.now()):]
}

// firstWithin is the index of the oldest sample asked at or after
// now - maxLag (len(samples) when none is); mu held.
func (f *replicaFence) firstWithin(now time.Time) int {
	oldest := now.Add(-f.maxLag)
	for i, s := range f.samples {
		if !s.at.Before(oldest) {
			return i
		}
	}
	return len(f.samples)
}

// bound is what a read from the replica carries ($2 of the fenced
// statements): the xmax of the primary's oldest answer within maxLag, or
// "0" (no bound) when it has given none.
func (f *replicaFence) bound() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.firstWithin(f.now())
	if i == len(f.samples) {
		return "0"
	}
	return strconv.FormatUint(f.samples[i].xmax, 10)
}
