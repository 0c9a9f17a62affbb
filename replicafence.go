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
	// raises counts the calls of raise, and raisedAt is when the last
	// was made, until the bound covers it (zero then); mu. wake asks run
	// for an answer now.
	raises   uint64
	raisedAt time.Time
	wake     chan struct{}

	// behind is the standby's state as the last check saw it (metrics.go):
	// fenceHeld, fenceBehind (its snapshot below the bound), or
	// fenceUnbounded (no answer from the primary within maxLag).
	behind  atomic.Int32
	failLog *sampledLog
}

// replicaMaxLag is the most a standby's answer may miss by default
// (REPLICA_MAX_LAG, step 48): every change the primary acknowledged
// longer ago than this is in it, while the primary answers the fence
// (docs/47).
const replicaMaxLag = time.Second

// fenceAll is the bound no standby holds (the largest xid8): while a
// raise waits for the primary's next answer, every read from the
// replica is held back, and made on the primary.
const fenceAll = "18446744073709551615"

// The fence's states (replicaFence.behind).
const (
	fenceHeld = iota
	fenceBehind
	fenceUnbounded
)

// fenceSample is one answer of the primary: when the question was sent,
// how many raises had been made then, and the xmax of its snapshot.
// Whether it was asked after a raise is told by the count, not by the
// clock, which may give the raise and a question sent just before it the
// same time.
type fenceSample struct {
	at     time.Time
	raises uint64
	xmax   uint64
}

// primaryXmaxSQL asks the primary for its snapshot's xmax: every
// transaction that has completed lies below it. standbyHeldSQL asks a
// standby whether its snapshot sees every transaction below a bound as
// complete.
const (
	primaryXmaxSQL = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`
	standbyHeldSQL = `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8`
)

func newReplicaFence(primary, standby *sql.DB, maxLag time.Duration, failLog *sampledLog) *replicaFence {
	f := &replicaFence{primary: primary, standby: standby, maxLag: maxLag, now: time.Now, failLog: failLog,
		wake: make(chan struct{}, 1)}
	f.behind.Store(fenceUnbounded)
	return f
}

// run asks the primary every maxLag/4 until ctx ends, at once after
// each raise, and again after fenceRetry while a raise waits on a
// question that failed; and, in a loop of its own, the standby. Until
// step 48 one loop asked both in turn, and a raise's question could wait
// behind the standby's (up to maxLag) until the raise ran out.
func (f *replicaFence) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { f.runStandby(ctx) })
	t := time.NewTicker(f.maxLag / 4)
	defer t.Stop()
	for {
		var again <-chan time.Time
		if err := f.askPrimary(ctx); err != nil && f.raisePending() {
			again = time.After(min(fenceRetry, f.maxLag/4))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.wake:
		case <-again:
		}
	}
}

// runStandby asks the standby whether it holds the bound, at once and
// then every maxLag/4 until ctx ends (for the gauge).
func (f *replicaFence) runStandby(ctx context.Context) {
	t := time.NewTicker(f.maxLag / 4)
	defer t.Stop()
	for {
		f.askStandby(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fenceRetry is how soon a raise's question is asked again when it
// failed (at most maxLag/4): until one is answered, every read from the
// replica is the primary's.
const fenceRetry = 50 * time.Millisecond

// raisePending says whether a raise waits for an answer asked after it.
func (f *replicaFence) raisePending() bool { return f.bound() == fenceAll }

// raise makes every read from the replica from now on carry a bound
// the primary gave to a question asked after now (step 48). The
// subscriber calls it first at each purge: when it subscribes again, a
// message was dropped, or it is behind (a probe late), a change whose
// message it missed may have been made an instant before, and the bound
// in force, from an answer up to maxLag old, need not hold it. A standby
// that lags by less than maxLag could then serve the link as it was to
// the lookup after the purge, which the local cache would keep for
// LOCAL_CACHE_TTL (docs/47 left this open). Until the primary answers a
// question asked after the raise (run asks one at once), no standby
// holds the bound (fenceAll) and every read is the primary's; if none is
// answered within maxLag, the bound is what it would have been without
// the raise (no answer within maxLag: none).
func (f *replicaFence) raise() {
	f.mu.Lock()
	f.raises++
	f.raisedAt = f.now()
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default: // one is asked for already
	}
}

// check asks the primary for its xmax and keeps it, then asks the standby
// whether it holds the bound reads carry now (for the metric; each read
// is checked on its own).
func (f *replicaFence) check(ctx context.Context) {
	f.askPrimary(ctx) //nolint:errcheck // logged there; the standby is asked all the same
	f.askStandby(ctx)
}

// askPrimary asks the primary for its xmax and keeps it; a failure is
// logged (sampled) and returned.
func (f *replicaFence) askPrimary(ctx context.Context) error {
	err := f.sample(ctx)
	if err != nil && ctx.Err() == nil && f.failLog != nil {
		f.failLog.warn(ctx, "replica fence: the primary did not say which transactions it has completed; reads from the replica carry no bound once its last answer is older than "+f.maxLag.String(), err)
	}
	return err
}

// askStandby asks the standby whether it holds the bound reads carry now,
// for the gauge.
func (f *replicaFence) askStandby(ctx context.Context) {
	bound := f.bound()
	switch bound {
	case "0":
		f.behind.Store(fenceUnbounded)
		return
	case fenceAll:
		return // raised, and no answer since: the state stays as last seen
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
	f.mu.Lock()
	asked := fenceSample{at: f.now(), raises: f.raises}
	f.mu.Unlock()
	var text string
	if err := f.primary.QueryRowContext(ctx, primaryXmaxSQL).Scan(&text); err != nil {
		return err
	}
	// What comes back is input: an xid8 is a decimal uint64.
	xmax, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return fmt.Errorf("replica fence: the primary's xmax %q: %w", text, err)
	}
	asked.xmax = xmax
	f.add(asked)
	return nil
}

// add keeps a sample and drops the ones that have left the window.
func (f *replicaFence) add(s fenceSample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.samples = append(f.samples, s)
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

// firstRaised is the index of the oldest sample asked after the last
// raise (len(samples) when none is); mu held.
func (f *replicaFence) firstRaised() int {
	for i, s := range f.samples {
		if s.raises == f.raises {
			return i
		}
	}
	return len(f.samples)
}

// bound is what a read from the replica carries ($2 of the fenced
// statements): the xmax of the primary's oldest answer within maxLag, or
// "0" (no bound) when it has given none. Within maxLag of a raise, it is
// at least the xmax of the primary's first answer asked after the raise,
// and fenceAll until there is one.
func (f *replicaFence) bound() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	i := f.firstWithin(now)
	if !f.raisedAt.IsZero() {
		if now.Sub(f.raisedAt) > f.maxLag || (i < len(f.samples) && f.samples[i].raises == f.raises) {
			// The window starts after the raise: the oldest answer
			// within it holds what the raise asked for (or, if there is
			// none, the primary has not answered since).
			f.raisedAt = time.Time{}
		} else if j := f.firstRaised(); j < len(f.samples) {
			// The oldest answer within the window was asked before the
			// raise, and this one after it: i < j.
			return strconv.FormatUint(max(f.samples[i].xmax, f.samples[j].xmax), 10)
		} else {
			return fenceAll
		}
	}
	if i == len(f.samples) {
		return "0"
	}
	return strconv.FormatUint(f.samples[i].xmax, 10)
}
