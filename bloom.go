package main

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// A flood of unknown codes (a scanner, a typo in a mail campaign, links
// deleted long ago) costs a Redis GET and a Postgres query each. A Bloom
// filter of every code answers most of them from memory: it is a bit
// array and k hash functions; adding a code sets k bits, and a code
// whose k bits are not all set was never added. So "no" is certain and
// "maybe" is wrong for a share of unknown codes that the array's size
// decides (BLOOM_FP_RATE: 1% costs about 9.6 bits a code, whatever the
// codes' length). github.com/bits-and-blooms/bloom/v3 sizes the array and
// picks k from the count and the rate (NewWithEstimates); the standard
// library has no Bloom filter.
//
// Its "no" is only as good as its knowledge of every code, on every
// instance: a create on another instance that this one's filter has not
// heard of would be a 404 for a link that exists. So the filter is
// trusted only while it is known complete (see bloomfeed.go): built from
// Postgres, then told of every create here and elsewhere through Redis.
// While it is not (not built yet, or its feed is down), every lookup
// passes through to the store, as before this filter existed. And since a
// feed can fail on the sender's side without the receivers knowing, a
// sweep of Postgres every BLOOM_SWEEP backs it up (bloomsweep.go).

// bloomBatch is how many codes the build reads per query: keyset
// pagination (WHERE code > $last ORDER BY code LIMIT n), which walks the
// unique index on code and costs the same for the last batch as for the
// first, unlike OFFSET; and no statement holds a snapshot, or a
// connection, for the whole scan.
const bloomBatch = 10_000

// bloomMinCapacity is the fewest codes a filter is sized for (1.2 MB at
// 1%): a new deployment's first million creates then need no rebuild.
const bloomMinCapacity = 1_000_000

// resyncMargin is how far before the feed's last healthy moment a resync
// reads: created_at is Postgres's clock at the create's transaction start
// and the last healthy moment is this host's clock; two minutes covers a
// create's transaction (DB_TIMEOUT bounds it) and clocks kept by NTP.
const resyncMargin = 2 * time.Minute

// The deadlines of the filter's own queries (none is on a request's path):
// the count and each batch of the build; the resync's read of recent
// codes, which may be many after a long outage; and the wait before a
// failed build or resync is tried again.
const (
	bloomQueryTimeout  = 30 * time.Second
	bloomResyncTimeout = time.Minute
	bloomRetry         = 5 * time.Second
)

// bloomFeedWait is how long the first build waits for the feed to come up
// before it starts anyway. Started with the feed up, the build needs no
// resync; started without, it needs one afterwards, from its own start
// (less resyncMargin), which on a table filled in the last minutes reads
// it all a second time.
const bloomFeedWait = 2 * time.Second

// The statements of the build, the resync and the sweep. created_at has
// a BRIN index (sql/schema.sql): rows are appended in created_at order,
// so a summary of each range of pages finds the recent ones without a
// B-tree's size. The count reads Postgres's clock too: every code
// committed before it is read by the batches after, so the first sweep
// can start from there.
const (
	bloomCountSQL  = `SELECT count(*), now() FROM links`
	bloomBatchSQL  = `SELECT code FROM links WHERE code > $1 ORDER BY code LIMIT $2`
	bloomRecentSQL = `SELECT code FROM links WHERE created_at >= $1`
)

// bloomStore is a Store in front of another Store that answers a lookup of
// a code its filter has never seen with ErrNotFound at once.
type bloomStore struct {
	Store
	// db is the primary, which holds every code (a replica may lag): its
	// background pool (pgStore.bg), whose reply deadline is as long as
	// these calls' own deadlines (docs/40).
	db     *sql.DB
	fpRate float64
	counts bloomCounts
	log    *slog.Logger

	// Tests set these before run: the smallest size, the build's batch,
	// and a hook the build calls after each batch with its last code.
	minCapacity uint
	batch       int
	afterBatch  func(last string)
	retry       time.Duration
	feedWait    time.Duration

	// The sweep (bloomsweep.go): every sweepEvery (0 = never), the
	// codes created since the last one, less sweepMargin, are read from
	// Postgres, added, and dropped from neg (nil: no negative cache).
	// sweepTicks, if set, stands in for the ticker (tests). sweepWarns
	// samples the failures logged.
	sweepEvery  time.Duration
	sweepMargin time.Duration
	sweepTicks  <-chan time.Time
	neg         *negCache
	sweepWarns  *sampledLog

	kick chan struct{} // wakes run: a build or a resync may be due

	// mu guards everything below. The filter is not safe for concurrent
	// use (its README says so: a write and a read of one word race), so
	// lookups take the read lock, adds the write lock.
	mu       sync.RWMutex
	filter   *bloom.BloomFilter // nil until the first build ends
	capacity uint               // codes filter was sized for
	codes    uint               // codes added to it (every row a build read, then each add that set a bit: a code added twice counts once; one held already by a false positive, not at all)
	trusted  bool               // filter != nil && feedUp && gapFrom.IsZero()
	// building is set while run scans Postgres into a new filter; codes
	// added meanwhile are kept in pending too, and added to the new
	// filter at the end. (Also kept while there is no filter at all.)
	building bool
	pending  []string
	grow     bool // the filter is past its capacity: build a bigger one
	// feedUp says the feed of creates is delivering (always, with no
	// Redis: this instance sees every create itself). gapFrom, when not
	// zero, is the earliest moment from which creates may be missing
	// from the filter: run reads them from Postgres once the feed is up
	// again. epoch counts the feed's failures, so that a resync that
	// raced with a new one does not clear the gap.
	feedUp bool
	// feedUntil, when not zero, is when the feed's registration ends
	// (live.go): past it the filter answers nothing, whatever run has
	// heard yet, so that a timer firing late cannot stretch the trust.
	feedUntil time.Time
	gapFrom   time.Time
	epoch     uint64
	// sweptTo is a moment on Postgres's clock before which every
	// committed code is in the filter (or in pending): the start of the
	// last build or sweep that read them. Zero until the first build.
	// unconfirmed are the codes the last sweep found missing from the
	// trusted filter that the feed has not brought since.
	sweptTo     time.Time
	unconfirmed map[string]struct{}
	// Postgres's own word on new links (linklisten.go), when listens:
	// listenUp says the LISTEN is in place; listenEpoch counts the moments
	// from which the filter must be read again whole (each (re)connect,
	// since what was sent while down is lost, and each "*"); builtEpoch
	// is the epoch the last complete build started in. The filter is
	// trusted only while builtEpoch == listenEpoch.
	listens     bool
	listenUp    bool
	listenEpoch uint64
	builtEpoch  uint64
}

// bloomSweep is how the filter's sweep runs (bloomsweep.go): every every
// (0 = never), over the codes created since the last one less margin
// (sweepMarginFor: the store's DB_TIMEOUT and some slack), dropping what
// it finds from neg (nil: no negative cache).
type bloomSweep struct {
	every, margin time.Duration
	neg           *negCache
}

// noSweep is a filter that is never swept (the tests' usual one).
var noSweep = bloomSweep{margin: sweepMarginFor(defaultDBTimeout)}

// newBloomStore puts a filter in front of store, to be built from db by
// run. alone says there is no feed (no Redis): this instance sees every
// create itself, and trusts its filter once built.
func newBloomStore(store Store, db *sql.DB, fpRate float64, alone bool, sweep bloomSweep, counts bloomCounts, log *slog.Logger) *bloomStore {
	return &bloomStore{
		Store: store, db: db, fpRate: fpRate, counts: counts, log: log,
		minCapacity: bloomMinCapacity, batch: bloomBatch, retry: bloomRetry, feedWait: bloomFeedWait,
		sweepEvery: sweep.every, sweepMargin: sweep.margin, neg: sweep.neg,
		sweepWarns:  &sampledLog{every: time.Minute}, // logs through b.log (warnTo)
		kick:        make(chan struct{}, 1),
		feedUp:      alone,
		unconfirmed: make(map[string]struct{}),
	}
}

// Lookup answers ErrNotFound for a code the filter has never seen, and
// asks the store behind for the others. A "maybe" the store does not
// find is a false positive, counted.
func (b *bloomStore) Lookup(ctx context.Context, code string) (Target, error) {
	if !b.check(code) {
		return Target{}, ErrNotFound
	}
	t, err := b.Store.Lookup(ctx, code)
	if errors.Is(err, ErrNotFound) {
		b.counts.falsePositives.Inc()
	}
	return t, err
}

// Link is Lookup's twin for GET /api/links/{code}, which a flood can aim
// at too.
func (b *bloomStore) Link(ctx context.Context, code string) (Link, error) {
	if !b.check(code) {
		return Link{}, ErrNotFound
	}
	l, err := b.Store.Link(ctx, code)
	if errors.Is(err, ErrNotFound) {
		b.counts.falsePositives.Inc()
	}
	return l, err
}

// check reports whether code may exist: false only when the filter is
// trusted and has never seen it.
func (b *bloomStore) check(code string) bool {
	b.mu.RLock()
	trusted := b.trusted && (b.feedUntil.IsZero() || time.Now().Before(b.feedUntil))
	maybe := !trusted || b.filter.TestString(code)
	b.mu.RUnlock()
	switch {
	case !trusted:
		b.counts.untrusted.Inc()
	case maybe:
		b.counts.maybe.Inc()
	default:
		b.counts.no.Inc()
	}
	return maybe
}

// added records codes that exist: created here, or announced by another
// instance. Each is in Postgres already (a code is added after its
// commit), which is what lets a build drop what pending held when it
// starts.
func (b *bloomStore) added(codes ...string) { b.add(codes, fromFeed) }

// addSource says where the codes given to add come from: a create here
// or the feed, a resync, or a sweep.
type addSource int

const (
	fromFeed addSource = iota
	fromResync
	fromSweep
	fromListener // Postgres's NOTIFY (linklisten.go)
)

// add is added, from any source. A code new to the trusted filter that a
// sweep found is kept in unconfirmed, until the feed brings it too (it
// was on its way) or the next sweep counts it missed (see bloomsweep.go).
func (b *bloomStore) add(codes []string, from addSource) {
	b.mu.Lock()
	for _, c := range codes {
		fresh := b.filter != nil && !b.filter.TestOrAddString(c)
		if fresh {
			b.codes++
		}
		switch {
		case (from == fromFeed || from == fromListener) && len(b.unconfirmed) > 0:
			delete(b.unconfirmed, c)
		case from == fromSweep && fresh && b.trusted:
			b.unconfirmed[c] = struct{}{}
		}
		if b.filter == nil || b.building {
			b.pending = append(b.pending, c)
		}
	}
	grow := b.filter != nil && b.codes > b.capacity && !b.grow && !b.building
	if grow {
		b.grow = true
	}
	n, capacity := b.codes, b.capacity
	b.mu.Unlock()
	if grow {
		b.log.Info("bloom filter past its capacity; rebuilding a bigger one in the background",
			"codes", n, "capacity", capacity)
		b.signal()
	}
}

// feedDown says the feed may have missed creates since lastHealthy, the
// last moment it was known to deliver: the filter is not trusted until a
// resync has read them.
func (b *bloomStore) feedDown(lastHealthy time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.feedUp = false
	b.epoch++
	b.gapFrom = earliest(b.gapFrom, lastHealthy)
	b.setTrust()
}

// feedUp says the feed delivers again: every create from now on arrives,
// and run reads those of the gap from Postgres.
func (b *bloomStore) feedIsUp() {
	b.mu.Lock()
	b.feedUp = true
	b.setTrust()
	b.mu.Unlock()
	b.signal()
}

// feedTrustUntil says until when the feed's word holds (live.go).
func (b *bloomStore) feedTrustUntil(t time.Time) {
	b.mu.Lock()
	b.feedUntil = t
	b.mu.Unlock()
}

// expectListener says a listener (linklisten.go) will tell this filter
// of every link Postgres adds: it is not trusted until that listener is
// up and a build has read every code since. Called before run.
func (b *bloomStore) expectListener() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listens = true
	b.setTrust()
}

// listening says the listener's LISTEN is in place, from a first
// connection or a new one: every link committed from now on is told,
// and those committed before are read by a build that starts after this.
func (b *bloomStore) listening() { b.readAgain(true) }

// readAll says links were added that the listener was not told of one by
// one (a statement that added more than 10,000): the filter is read
// again whole, and not trusted until then.
func (b *bloomStore) readAll() { b.readAgain(false) }

func (b *bloomStore) readAgain(up bool) {
	b.mu.Lock()
	if up {
		b.listenUp = true
	}
	b.listenEpoch++
	b.setTrust()
	b.mu.Unlock()
	b.signal()
}

// listenDown says the listener lost its connection: links added from now
// on are not told, so the filter is not trusted until the listener is
// back and a build has read them.
func (b *bloomStore) listenDown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listenUp = false
	b.setTrust()
}

// stale reports whether the listener asks for a build: it is up, and no
// build has started since it last asked. b.mu must be held.
func (b *bloomStore) stale() bool {
	return b.listens && b.listenUp && b.builtEpoch != b.listenEpoch
}

// setTrust recomputes trusted, and logs a change. b.mu must be held.
func (b *bloomStore) setTrust() {
	t := b.filter != nil && b.feedUp && b.gapFrom.IsZero() && (!b.listens || b.listenUp && b.builtEpoch == b.listenEpoch)
	if t == b.trusted {
		return
	}
	b.trusted = t
	if t {
		b.log.Info("bloom filter trusted: unknown codes answered without a query", "codes", b.codes)
	} else {
		b.log.Warn("bloom filter not trusted: every lookup goes to the store until its feed is back and resynced, and its listener is up and it has read every code since",
			"feed_up", b.feedUp, "listener_up", !b.listens || b.listenUp)
	}
}

// earliest returns the earlier of two moments, a zero one meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (b *bloomStore) signal() {
	select {
	case b.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// bloomStats is what the metrics read.
type bloomStats struct {
	codes, capacity uint
	trusted         bool
}

func (b *bloomStore) stats() bloomStats {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return bloomStats{codes: b.codes, capacity: b.capacity, trusted: b.trusted}
}

// run builds the filter, rebuilds it bigger when it fills, and reads the
// creates a feed outage may have missed, one at a time, until ctx ends;
// and sweeps beside them. The server serves meanwhile: until the filter
// is trusted, every lookup passes through.
func (b *bloomStore) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { b.sweepLoop(ctx) })
	waited := false
	for {
		var err error
		b.mu.RLock()
		resync := b.filter != nil && b.feedUp && !b.gapFrom.IsZero()
		build := b.filter == nil || b.grow || b.stale()
		waitFeed := b.filter == nil && (!b.feedUp || b.listens && !b.listenUp) && !waited
		b.mu.RUnlock()
		switch {
		case resync: // first: it restores trust
			err = b.resync(ctx)
		case waitFeed:
			waited = true
			b.waitForFeeds(ctx)
			continue
		case build:
			err = b.build(ctx)
		default:
			select {
			case <-b.kick:
				continue
			case <-ctx.Done():
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			b.log.Error("bloom filter: will try again", "err", err, "in", b.retry)
			t := time.NewTimer(b.retry)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// waitForFeeds waits, up to feedWait, until the feed and the listener (if
// any) are both up, so that the first build need not be followed by
// another: a build that starts before either is up leaves a gap to read
// again (a resync, or a second build).
func (b *bloomStore) waitForFeeds(ctx context.Context) {
	t := time.NewTimer(b.feedWait)
	defer t.Stop()
	for {
		select {
		case <-b.kick: // one of them is up, or something else: look again
			b.mu.RLock()
			ready := b.feedUp && (!b.listens || b.listenUp)
			b.mu.RUnlock()
			if ready {
				return
			}
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// collectors export the filter's state, read at each scrape: how many
// codes it holds, how many it was sized for, and whether its "no" is
// believed now.
func (b *bloomStore) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "bloom_codes",
			Help: "Codes added to the Bloom filter (0 until it is built)."}, func() float64 { return float64(b.stats().codes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "bloom_capacity",
			Help: "Codes the Bloom filter was sized for at BLOOM_FP_RATE; past it, it is rebuilt bigger."}, func() float64 { return float64(b.stats().capacity) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "bloom_trusted",
			Help: "1 if the Bloom filter's no is believed (built, and its feed of new codes healthy), 0 if every lookup passes through."},
			func() float64 {
				if b.stats().trusted {
					return 1
				}
				return 0
			}),
	}
}
