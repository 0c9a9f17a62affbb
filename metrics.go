package main

import (
	"database/sql"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

// metricsNamespace prefixes every metric this program defines, so that on a
// Prometheus shared with other services its series are easy to find.
const metricsNamespace = "shortener"

// durationBuckets are the upper bounds, in seconds, of the request duration
// histogram. Chosen for this service: a redirect from the process's own
// cache takes tens of microseconds, one from Redis a few hundred, one from
// Postgres about a millisecond, a create a few (docs/04 to docs/08); the
// deadlines are 50 ms (REDIS_TIMEOUT), 500 ms (DB_TIMEOUT) and 2 s (a
// create's body), so a bound sits on each of them and a request cut short
// by one shows up in its own bucket. Fourteen bounds, plus +Inf, a sum and
// a count, for each of nine route values (six routes, GET /shorten's
// 405, unmatched and shed) is 153 series: cheap to scrape and store.
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, // cache hits
	0.001, 0.0025, 0.005, 0.01, 0.025, // Redis, Postgres, creates
	0.05,      // REDIS_TIMEOUT
	0.1, 0.25, // a backend struggling
	0.5,  // DB_TIMEOUT
	1, 2, // a create's body deadline
}

// clickBatchBuckets are batch sizes: one click, a trickle, up to
// CLICK_BATCH's default of 1,000 and its greatest, 100,000.
var clickBatchBuckets = []float64{1, 10, 100, 1000, 10_000, 100_000}

// createBatchBuckets are links per group commit, by powers of two up to
// CREATE_BATCH's default, 128, and past it.
var createBatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 512}

// clickFlushBuckets are how long writing a batch takes, in seconds, up to
// its deadline (clickWriteTimeout, 5 s).
var clickFlushBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// lagBuckets are for a probe's round trip through the invalidation
// subscription (lag.go): about a millisecond when it keeps up, and past
// lagBound (1 s) it is behind.
var lagBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// metrics is what the service measures about itself. A nil *metrics means
// instrumentation off (METRICS_ADDR=off): its methods hand out counters
// that count nothing, and the middleware that times requests is left out.
//
// No label ever holds a short code, a URL or a client's address: each
// would make one series per link or per client, and the number of series
// (what Prometheus pays for in memory) would grow without bound. Routes
// are labelled by the pattern that matched ("GET /{code}"), methods and
// statuses by a fixed set of values.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec                      // method, route, status
	duration  *prometheus.HistogramVec                    // route
	inFlight  atomic.Int64                                // requests being served, read by a GaugeFunc at a scrape
	seen      atomic.Pointer[map[seriesKey]requestSeries] // see series
	seenMu    sync.Mutex
	shed      prometheus.Counter // 503: MAX_IN_FLIGHT reached
	limited   prometheus.Counter // 429: CREATE_RATE reached
	cache     *prometheus.CounterVec
	batch     prometheus.Histogram
	flush     prometheus.Histogram
	creates   prometheus.Histogram // links per group commit
	lookupsIn prometheus.Histogram // codes per lookup query (LOOKUP_BATCH)
	replica   *prometheus.CounterVec
	lookups   *prometheus.CounterVec // Postgres lookup queries, by result
	coalesced prometheus.Counter     // lookups answered by another caller's flight
	changes   *prometheus.CounterVec // edits and deletes, by op and result
	inval     *prometheus.CounterVec // invalidations sent and received, by result
	purges    prometheus.Counter     // local cache purged on (re)subscribing
	pending   prometheus.Gauge       // changes not yet told to Redis
	invalLag  prometheus.Histogram   // probes' round trips through the subscription
	bloom     bloomMetrics
	negHits   prometheus.Counter // lookups answered by the negative cache
}

// bloomMetrics are the Bloom filter's and its feed's own series (bloom.go,
// bloomfeed.go).
type bloomMetrics struct {
	lookups         *prometheus.CounterVec // by result: no, maybe, untrusted
	falsePositives  prometheus.Counter
	ackTimeouts     prometheus.Counter
	ackLapsed       prometheus.Counter
	ackUnheard      prometheus.Counter
	ackMoved        prometheus.Counter
	publishFailures prometheus.Counter
	resyncs         prometheus.Counter
	badMessages     prometheus.Counter
	buildSeconds    prometheus.Gauge
	sweeps          *prometheus.CounterVec // by result: ok, failed
	notifications   *prometheus.CounterVec // by kind: codes, all, bad
	sweepCodes      prometheus.Counter
	sweepMissed     prometheus.Counter
}

func newMetrics(reg *prometheus.Registry) *metrics {
	f := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metricsNamespace, Name: name, Help: help}
	}
	m := &metrics{reg: reg}
	m.seen.Store(&map[seriesKey]requestSeries{})
	m.requests = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("http_requests_total",
		"HTTP requests answered, by method, route pattern and status.")),
		[]string{"method", "route", "status"})).(*prometheus.CounterVec)
	m.duration = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace,
		Name: "http_request_duration_seconds", Help: "Time from a request's headers read to its answer written, by route pattern.",
		Buckets: durationBuckets}, []string{"route"})).(*prometheus.HistogramVec)
	// An integer added to on every request, read only when scraped: a
	// Gauge's Inc and Dec are compare-and-swap loops on a float, which
	// two cores serving requests fight over.
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("http_requests_in_flight",
		"Requests being served now.")), func() float64 { return float64(m.inFlight.Load()) }))
	m.shed = f(prometheus.NewCounter(prometheus.CounterOpts(opts("http_requests_shed_total",
		"Requests refused with 503 because MAX_IN_FLIGHT were in flight.")))).(prometheus.Counter)
	m.limited = f(prometheus.NewCounter(prometheus.CounterOpts(opts("creates_rate_limited_total",
		"Creates refused with 429 because the client used up CREATE_RATE.")))).(prometheus.Counter)
	m.cache = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("cache_lookups_total",
		"Cache lookups, by cache (local, redis) and result (hit, miss, error, skipped: breaker open, or a code read from the primary: its change not told to Redis yet, or made or heard of here in the last 30 s, "+
			"refused: a Redis value not sealed with this deployment's key, past its time, too long or not a link, read as a miss and overwritten).")),
		[]string{"cache", "result"})).(*prometheus.CounterVec)
	m.batch = f(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
		Name: "click_batch_size", Help: "Clicks written per batch.", Buckets: clickBatchBuckets})).(prometheus.Histogram)
	m.flush = f(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
		Name: "click_flush_duration_seconds", Help: "Time to write one batch of clicks.", Buckets: clickFlushBuckets})).(prometheus.Histogram)
	m.creates = f(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
		Name: "create_batch_size", Help: "Links saved per transaction (group commit, CREATE_BATCH).",
		Buckets: createBatchBuckets})).(prometheus.Histogram)
	m.lookupsIn = f(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
		Name: "db_lookup_batch_size", Help: "Codes asked for per lookup query, primary and replica (LOOKUP_BATCH; its count is the lookup queries).",
		Buckets: createBatchBuckets})).(prometheus.Histogram)
	m.replica = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("replica_reads_total",
		"Reads sent to the replica (DATABASE_REPLICA_URL), by result: hit; missed (not found there, or held back as behind (step 47), asked of the primary); failed (asked of the primary).")),
		[]string{"result"})).(*prometheus.CounterVec)
	// A query per code, primary and replica alike, whatever a cache in
	// front answered: queries over distinct codes is what a cold start
	// costs Postgres (flight.go keeps it near one).
	m.lookups = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("db_lookups_total",
		"Codes looked up in Postgres, primary and replica, by result (found, not_found, error); with LOOKUP_BATCH above 1 several may share one query (db_lookup_batch_size).")),
		[]string{"result"})).(*prometheus.CounterVec)
	m.coalesced = f(prometheus.NewCounter(prometheus.CounterOpts(opts("lookups_coalesced_total",
		"Lookups that missed the local cache and were answered by another caller's lookup of the same code, already under way.")))).(prometheus.Counter)
	m.changes = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("link_changes_total",
		"Edits (PATCH) and deletes (DELETE) of links, by op (edit, delete) and result (ok, unauthorized, forbidden, not_found, gone, bad_request, error).")),
		[]string{"op", "result"})).(*prometheus.CounterVec)
	m.inval = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("invalidations_total",
		"Cache invalidations: sent (written to Redis and published after an edit, and on REDIS_WAIT_REPLICAS replicas), send_failed (Redis not reached, or too few replicas: retried), "+
			"received (a code from another instance, or this one, dropped from the local cache), bad (a message that is not a code, ignored), "+
			"dropped (a message the Redis client dropped, its channel full: the local cache was purged), "+
			"late (a probe this instance sent itself through the subscription was out for more than 1 s: the subscriber is behind, and the local cache was purged; counted every 250 ms while it is), "+
			"resubscribed (two probes in a row reached no subscription of this instance's on the server its client writes to, as after a Redis failover: it subscribed again).")),
		[]string{"result"})).(*prometheus.CounterVec)
	m.purges = f(prometheus.NewCounter(prometheus.CounterOpts(opts("invalidation_purges_total",
		"Times the whole local cache was emptied because the invalidation subscription was (re)made, a message was dropped, or the subscriber was behind: what was published meanwhile is unknown, or not handled yet.")))).(prometheus.Counter)
	m.invalLag = f(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace,
		Name:    "invalidation_lag_seconds",
		Help:    "How long the probes a subscriber sends itself every 250 ms took to come back through Redis, from their PUBLISH's return: the backlog of invalidations it has not handled yet (step 33). Past 1 s the local cache is purged (invalidations_total{result=\"late\"}).",
		Buckets: lagBuckets})).(prometheus.Histogram)
	m.pending = f(prometheus.NewGauge(prometheus.GaugeOpts(opts("invalidations_pending",
		"Links changed here whose change has not reached Redis yet, and so not the other instances, which may serve them as they were until it does: retried every 250 ms (step 29).")))).(prometheus.Gauge)
	m.bloom.lookups = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("bloom_lookups_total",
		"Lookups the Bloom filter answered, by result: no (unknown for sure, answered 404 with no query), maybe (passed to the store), untrusted (passed to the store because the filter is not built yet, or may be missing codes: see shortener_bloom_trusted).")),
		[]string{"result"})).(*prometheus.CounterVec)
	m.bloom.falsePositives = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_false_positives_total",
		"Lookups the Bloom filter said maybe to that the store then did not find.")))).(prometheus.Counter)
	m.bloom.ackTimeouts = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_ack_timeouts_total",
		"Creates answered before every instance said it had added the new code (BLOOM_ACK_TIMEOUT).")))).(prometheus.Counter)
	m.bloom.ackLapsed = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_ack_lapsed_total",
		"Instances a create stopped waiting for because their registration ended first: each had stopped trusting its filter (step 34).")))).(prometheus.Counter)
	m.bloom.ackUnheard = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_creates_unheard_total",
		"Creates made while this instance's own feed subscription was not up, so that no acknowledgement could reach them: each waited instead until every registered instance renewed its registration from a later probe, or the registration ended (step 43).")))).(prometheus.Counter)
	m.bloom.ackMoved = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_ack_moved_total",
		"Times a create found its client moved to another Redis server while it waited (a failover), and announced its code again there, to wait there (step 43).")))).(prometheus.Counter)
	m.bloom.publishFailures = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_publish_failures_total",
		"New codes that could not be published to the other instances at once (Redis failing); each is published again once Redis answers.")))).(prometheus.Counter)
	m.bloom.resyncs = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_resyncs_total",
		"Times the Bloom filter re-read the codes created while its feed was down, from Postgres.")))).(prometheus.Counter)
	m.bloom.badMessages = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_feed_bad_messages_total",
		"Messages on the code feed's channels that were not what an instance sends, ignored.")))).(prometheus.Counter)
	m.bloom.buildSeconds = f(prometheus.NewGauge(prometheus.GaugeOpts(opts("bloom_build_seconds",
		"How long the last build of the Bloom filter from Postgres took.")))).(prometheus.Gauge)
	m.bloom.sweeps = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("bloom_sweeps_total",
		"Sweeps that read the codes created since the last one from Postgres into the Bloom filter (BLOOM_SWEEP), by result: ok, failed (the next reads from the same moment).")),
		[]string{"result"})).(*prometheus.CounterVec)
	m.bloom.sweepCodes = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_sweep_codes_total",
		"Codes the sweeps read and added to the Bloom filter, most of which it had already (each sweep reads back a margin of DB_TIMEOUT and 5 s).")))).(prometheus.Counter)
	m.bloom.sweepMissed = f(prometheus.NewCounter(prometheus.CounterOpts(opts("bloom_sweep_missed_total",
		"Codes a sweep found that the trusted Bloom filter did not hold, and the feed had not brought by the next sweep: creates the feed failed to deliver, each answerable 404 here until the sweep found it.")))).(prometheus.Counter)
	m.bloom.notifications = f(prometheus.NewCounterVec(prometheus.CounterOpts(opts("link_notifications_total",
		"Messages from Postgres's triggers on links (LISTEN links_created and links_changed), by kind: codes (a statement added these links, up to 200 named in a message), all (a statement added more than 10,000: every code is read again), changed (a statement edited these links: each is dropped from this process's memory and told to Redis again; since step 49), changed_all (a statement edited more than 10,000: the local cache is purged), bad (not codes, ignored in whole or part).")),
		[]string{"kind"})).(*prometheus.CounterVec)
	m.negHits = f(prometheus.NewCounter(prometheus.CounterOpts(opts("negcache_hits_total",
		"Lookups answered not found by the negative cache, with no query.")))).(prometheus.Counter)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Every route answers with a series from the first scrape, so that a
	// rate() over a route that has had no error yet is 0, not absent.
	for _, route := range []string{"GET /{code}", "POST /shorten", "GET /api/links/{code}", "GET /healthz",
		"PATCH /api/links/{code}", "DELETE /api/links/{code}"} {
		m.duration.WithLabelValues(route)
	}
	for _, c := range []string{"local", "redis"} {
		for _, r := range []string{"hit", "miss", "error", "skipped"} {
			m.cache.WithLabelValues(c, r)
		}
	}
	for _, r := range []string{"found", "not_found", "error"} {
		m.lookups.WithLabelValues(r)
	}
	for _, op := range []string{"edit", "delete"} {
		for _, r := range []string{"ok", "unauthorized", "forbidden", "not_found", "gone", "bad_request", "error"} {
			m.changes.WithLabelValues(op, r)
		}
	}
	for _, r := range []string{"sent", "send_failed", "received", "bad"} {
		m.inval.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "failed"} {
		m.bloom.sweeps.WithLabelValues(r)
	}
	for _, r := range []string{"no", "maybe", "untrusted"} {
		m.bloom.lookups.WithLabelValues(r)
	}
	return m
}

// counter is what the code that counts needs of a Prometheus counter, so
// that with metrics off it can be handed one that does nothing.
type counter interface{ Inc() }

// adder is counter for what is counted many at a time.
type adder interface{ Add(float64) }

type noCount struct{}

func (noCount) Inc()        {}
func (noCount) Add(float64) {}

// observer is counter's twin for histograms.
type observer interface{ Observe(float64) }

type noObserve struct{}

func (noObserve) Observe(float64) {}

func (m *metrics) shedCounter() counter {
	if m == nil {
		return noCount{}
	}
	return m.shed
}

func (m *metrics) limitedCounter() counter {
	if m == nil {
		return noCount{}
	}
	return m.limited
}

// cacheResults are the five counters of one cache.
type cacheResults struct{ hit, miss, err, skipped, refused counter }

func (m *metrics) cacheResults(cache string) cacheResults {
	if m == nil {
		return cacheResults{noCount{}, noCount{}, noCount{}, noCount{}, noCount{}}
	}
	return cacheResults{
		hit:     m.cache.WithLabelValues(cache, "hit"),
		miss:    m.cache.WithLabelValues(cache, "miss"),
		err:     m.cache.WithLabelValues(cache, "error"),
		skipped: m.cache.WithLabelValues(cache, "skipped"),
		refused: m.cache.WithLabelValues(cache, "refused"),
	}
}

func (m *metrics) clickObservers() clickObservers {
	if m == nil {
		return clickObservers{}
	}
	return clickObservers{batchSize: m.batch, flushTime: m.flush}
}

func (m *metrics) replicaResults() replicaResults {
	if m == nil {
		return replicaResults{noCount{}, noCount{}, noCount{}}
	}
	return replicaResults{
		hit:    m.replica.WithLabelValues("hit"),
		missed: m.replica.WithLabelValues("missed"),
		failed: m.replica.WithLabelValues("failed"),
	}
}

// dbLookups are the counters of a Postgres store's lookup queries, one
// per result.
type dbLookups struct{ found, notFound, err counter }

// dbLookups hands out the same three series to the primary and the
// replica: what is counted is queries, wherever they went.
func (m *metrics) dbLookups() dbLookups {
	if m == nil {
		return dbLookups{noCount{}, noCount{}, noCount{}}
	}
	return dbLookups{
		found:    m.lookups.WithLabelValues("found"),
		notFound: m.lookups.WithLabelValues("not_found"),
		err:      m.lookups.WithLabelValues("error"),
	}
}

func (m *metrics) coalescedCounter() counter {
	if m == nil {
		return noCount{}
	}
	return m.coalesced
}

// editCounter counts an edit or delete by op and result (editResult's
// fixed set).
func (m *metrics) editCounter() editResults {
	if m == nil {
		return func(string, string) {}
	}
	return func(op, result string) { m.changes.WithLabelValues(op, result).Inc() }
}

// invalidationCounts are the invalidations' counters (invalidate.go), and
// the changes waiting to be told.
type invalidationCounts struct {
	sent, sendFailed, received, bad, dropped, purges counter
	late                                             counter  // ticks behind (lag.go)
	resubscribed                                     counter  // subscribed again: probes reached nobody (step 35)
	lag                                              observer // probes' round trips
	pending                                          gauge
}

func (m *metrics) invalidationCounts() invalidationCounts {
	if m == nil {
		return invalidationCounts{noCount{}, noCount{}, noCount{}, noCount{}, noCount{}, noCount{}, noCount{}, noCount{}, noObserve{}, noGauge{}}
	}
	return invalidationCounts{
		sent:         m.inval.WithLabelValues("sent"),
		sendFailed:   m.inval.WithLabelValues("send_failed"),
		received:     m.inval.WithLabelValues("received"),
		bad:          m.inval.WithLabelValues("bad"),
		dropped:      m.inval.WithLabelValues("dropped"),
		purges:       m.purges,
		late:         m.inval.WithLabelValues("late"),
		resubscribed: m.inval.WithLabelValues("resubscribed"),
		lag:          m.invalLag,
		pending:      m.pending,
	}
}

// bloomCounts are the counters the Bloom filter and its feed count in.
type bloomCounts struct {
	no, maybe, untrusted, falsePositives      counter
	ackTimeouts, publishFailures, badMessages counter
	ackLapsed, ackUnheard, ackMoved           counter
	resyncs                                   counter
	buildSeconds                              gauge
	sweepsOK, sweepsFailed                    counter
	sweepCodes, sweepMissed                   adder
	notifiedCodes, notifiedAll, notifiedBad   counter
	notifiedChanged, notifiedChangedAll       counter
}

// gauge is what the code needs of a Prometheus gauge.
type gauge interface{ Set(float64) }

type noGauge struct{}

func (noGauge) Set(float64) {}

func (m *metrics) bloomCounts() bloomCounts {
	if m == nil {
		n := noCount{}
		return bloomCounts{no: n, maybe: n, untrusted: n, falsePositives: n, ackTimeouts: n, ackLapsed: n, ackUnheard: n, ackMoved: n, publishFailures: n,
			badMessages: n, resyncs: n, buildSeconds: noGauge{}, sweepsOK: n, sweepsFailed: n, sweepCodes: n, sweepMissed: n,
			notifiedCodes: n, notifiedAll: n, notifiedBad: n, notifiedChanged: n, notifiedChangedAll: n}
	}
	return bloomCounts{
		no:              m.bloom.lookups.WithLabelValues("no"),
		maybe:           m.bloom.lookups.WithLabelValues("maybe"),
		untrusted:       m.bloom.lookups.WithLabelValues("untrusted"),
		falsePositives:  m.bloom.falsePositives,
		ackTimeouts:     m.bloom.ackTimeouts,
		ackLapsed:       m.bloom.ackLapsed,
		ackUnheard:      m.bloom.ackUnheard,
		ackMoved:        m.bloom.ackMoved,
		publishFailures: m.bloom.publishFailures,
		badMessages:     m.bloom.badMessages,
		resyncs:         m.bloom.resyncs,
		buildSeconds:    m.bloom.buildSeconds,
		sweepsOK:        m.bloom.sweeps.WithLabelValues("ok"),
		sweepsFailed:    m.bloom.sweeps.WithLabelValues("failed"),
		sweepCodes:      m.bloom.sweepCodes,
		sweepMissed:     m.bloom.sweepMissed,
		notifiedCodes:   m.bloom.notifications.WithLabelValues("codes"),
		notifiedAll:     m.bloom.notifications.WithLabelValues("all"),
		notifiedBad:     m.bloom.notifications.WithLabelValues("bad"),

		notifiedChanged:    m.bloom.notifications.WithLabelValues("changed"),
		notifiedChangedAll: m.bloom.notifications.WithLabelValues("changed_all"),
	}
}

// register adds a component's own collectors (each component lists its
// own: bloomStore, negCache, clickQueue and statsStore have a collectors
// method) to this run's registry; with metrics off, nothing.
func (m *metrics) register(cs ...prometheus.Collector) {
	if m == nil {
		return
	}
	m.reg.MustRegister(cs...)
}

func (m *metrics) negCacheHits() counter {
	if m == nil {
		return noCount{}
	}
	return m.negHits
}

// watchReplica exports the replica's pool, as watchDB the primary's.
func (m *metrics) watchReplica(db *sql.DB) {
	if m == nil {
		return
	}
	m.reg.MustRegister(collectors.NewDBStatsCollector(db, "replica"))
}

// watchFence exports the replica fence's state (step 47): 0 while the
// standby holds every change older than replicaMaxLag, 1 while it is
// behind (its reads go to the primary), 2 while the primary has not said
// within replicaMaxLag which transactions it has completed (reads carry
// no bound).
func (m *metrics) watchFence(f *replicaFence) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "replica_fence",
		Help: "The replica's lag check, as of its last round (every 250 ms): 0 the standby holds every change older than 1 s; 1 it is behind, and its rows go unanswered there and are read from the primary; 2 the primary gave no bound within 1 s, and the standby answers unchecked."},
		func() float64 { return float64(f.behind.Load()) }))
}

func (m *metrics) lookupBatchObserver() observer {
	if m == nil {
		return noObserve{}
	}
	return m.lookupsIn
}

func (m *metrics) createBatchObserver() observer {
	if m == nil {
		return noObserve{}
	}
	return m.creates
}

// watchBackground exports the background pool's (pgStore.bg), as watchDB
// the request pool's.
func (m *metrics) watchBackground(db *sql.DB) {
	if m == nil {
		return
	}
	m.reg.MustRegister(collectors.NewDBStatsCollector(db, "background"))
}

// watchLookupPool exports the lookups' pool's (pgStore.reads, step 42), as
// watchDB the request pool's.
func (m *metrics) watchLookupPool(db *sql.DB) {
	if m == nil {
		return
	}
	m.reg.MustRegister(collectors.NewDBStatsCollector(db, "lookups"))
}

// watchDB exports database/sql's pool statistics (open, in use, idle,
// waits and time waited for a connection).
func (m *metrics) watchDB(db *sql.DB) {
	if m == nil {
		return
	}
	m.reg.MustRegister(collectors.NewDBStatsCollector(db, metricsNamespace))
}

// watchRedis exports go-redis's pool statistics.
func (m *metrics) watchRedis(rdb *redis.Client) {
	if m == nil {
		return
	}
	m.reg.MustRegister(redisPoolCollector{rdb: rdb})
}

// redisPoolCollector reads go-redis's PoolStats at each scrape. go-redis
// has no Prometheus collector of its own (its instrumentation is
// OpenTelemetry), hence this one.
type redisPoolCollector struct{ rdb *redis.Client }

var redisPoolDescs = struct {
	hits, misses, timeouts, total, idle, stale *prometheus.Desc
}{
	hits: prometheus.NewDesc(metricsNamespace+"_redis_pool_hits_total",
		"Times a free connection was found in the pool.", nil, nil),
	misses: prometheus.NewDesc(metricsNamespace+"_redis_pool_misses_total",
		"Times no free connection was in the pool (one was dialled or waited for).", nil, nil),
	timeouts: prometheus.NewDesc(metricsNamespace+"_redis_pool_timeouts_total",
		"Times waiting for a free connection timed out (PoolTimeout).", nil, nil),
	total: prometheus.NewDesc(metricsNamespace+"_redis_pool_connections",
		"Connections in the pool.", nil, nil),
	idle: prometheus.NewDesc(metricsNamespace+"_redis_pool_idle_connections",
		"Idle connections in the pool.", nil, nil),
	stale: prometheus.NewDesc(metricsNamespace+"_redis_pool_stale_connections_total",
		"Connections closed because they were too old or idle too long.", nil, nil),
}

func (c redisPoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- redisPoolDescs.hits
	ch <- redisPoolDescs.misses
	ch <- redisPoolDescs.timeouts
	ch <- redisPoolDescs.total
	ch <- redisPoolDescs.idle
	ch <- redisPoolDescs.stale
}

func (c redisPoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.rdb.PoolStats()
	ch <- prometheus.MustNewConstMetric(redisPoolDescs.hits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(redisPoolDescs.misses, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(redisPoolDescs.timeouts, prometheus.CounterValue, float64(s.Timeouts))
	ch <- prometheus.MustNewConstMetric(redisPoolDescs.total, prometheus.GaugeValue, float64(s.TotalConns))
	ch <- prometheus.MustNewConstMetric(redisPoolDescs.idle, prometheus.GaugeValue, float64(s.IdleConns))
	ch <- prometheus.MustNewConstMetric(redisPoolDescs.stale, prometheus.CounterValue, float64(s.StaleConns))
}
