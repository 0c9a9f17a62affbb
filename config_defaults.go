package main

import "time"

// The pool's defaults, chosen by the measurements in docs/03: as many open
// connections as Postgres can run at once on this machine with a margin, all
// of them kept idle between requests, and recycled slowly.
const (
	defaultMaxOpenConns    = 8
	defaultMaxIdleConns    = defaultMaxOpenConns
	defaultConnMaxIdleTime = 5 * time.Minute
	defaultConnMaxLifetime = 30 * time.Minute
	defaultPrepare         = true
)

// defaultCacheTTL is how long a link stays in Redis after it was last
// filled. Links never change, so the TTL only decides how long an unpopular
// link takes memory; an hour keeps anything clicked more than hourly warm.
const defaultCacheTTL = time.Hour

// The range CACHE_TTL may take.
const (
	minCacheTTL = time.Second
	maxCacheTTL = 30 * 24 * time.Hour
)

// maxRedisConns bounds the pool sizes a REDIS_URL may ask for
// (?pool_size=…): go-redis panics on a negative one and allocates a huge
// one before it dials.
const maxRedisConns = 1000

// The limits' defaults. MAX_IN_FLIGHT: this machine serves about 10,000
// requests a second (docs/07), so 512 in flight is about 50 ms of work
// queued; a request that would wait longer than that is better refused at
// once. CREATE_RATE and CREATE_BURST: ten links a second, twenty at once,
// is more than a person pasting links by hand can make, and than most
// offices behind one address do; a script creating thousands is what it
// stops.
const (
	defaultMaxInFlight = 512
	defaultCreateRate  = 10
	defaultCreateBurst = 20
)

// The deadlines of backend calls on a request's path. Redis is a cache (or
// a shared counter with a fallback): if it does not answer within tens of
// milliseconds, the request is better off without it. Postgres holds the
// truth: half a second is a hundred times its usual answer here (docs/04),
// and a create that cannot commit by then gets a 503 while the client is
// still there to retry.
const (
	defaultRedisTimeout = 50 * time.Millisecond
	defaultDBTimeout    = 500 * time.Millisecond
)

// defaultDBClientCheck is DB_CLIENT_CHECK's default: a statement whose
// caller has gone ends in Postgres within about a second (docs/39), at
// the cost of one poll of its socket a second while it runs.
const defaultDBClientCheck = time.Second

// localCacheAuto is localCacheBytes when LOCAL_CACHE_BYTES is not set.
const localCacheAuto = -1

// LOCAL_CACHE_BYTES may be 0 (no local cache) or from minLocalCacheBytes
// (about 6,000 links) to maxLocalCacheBytes, past the memory of any machine
// this runs on: a figure beyond that is a typo.
const (
	minLocalCacheBytes = 1 << 20
	maxLocalCacheBytes = 1 << 40
)

// Unset, LOCAL_CACHE_BYTES is 1/localCacheShare of the memory the process
// may use (see processMemory), kept from minDefaultLocalCacheBytes to
// maxDefaultLocalCacheBytes. Why a sixteenth: the cache is live heap, and
// Go's collector lets the heap grow to twice the live heap before it
// collects (GOGC=100), so the cache may cost twice its size; several
// copies of the app may share a machine with Postgres and Redis (docs/06,
// docs/11); and the rest of the process (connections, requests, the click
// queue) needs room. The floor is about what the cache held when it was
// bounded by a count (10,000 links, 2 MB); the ceiling holds about 1.6
// million of the seed's links (163 bytes each, as benchmarks/cachesim
// measured), the head of a Zipf curve over ten million: more is for an
// operator to ask for. With no figure to go on (no /proc, as on macOS),
// it is fallbackLocalCacheBytes.
const (
	localCacheShare           = 16
	minDefaultLocalCacheBytes = 2 << 20
	maxDefaultLocalCacheBytes = 256 << 20
	fallbackLocalCacheBytes   = 32 << 20
)

// defaultLocalCacheTTL bounds how long a link is served from a process's
// memory without asking Redis or Postgres again (LOCAL_CACHE_TTL). Links do
// not change, but one can be deleted, or a bad value can get into Redis and
// from there into memory: without a bound, each process would go on
// serving it until it restarts. The cost is one miss per link per process
// per TTL: for a hot link, nothing to speak of. The range: below a second
// the local cache would hardly hit; past a day a bad entry outlives anyone
// watching for it.
const (
	defaultLocalCacheTTL = time.Minute
	minLocalCacheTTL     = time.Second
	maxLocalCacheTTL     = 24 * time.Hour
)

// The range of REPLICA_MAX_LAG (the default is replicaMaxLag, 1 s): the
// fence asks the primary every quarter of it, so at 100 ms it asks 40
// times a second; past an hour a read could miss an hour of
// changes, which no cache here keeps a link for.
const (
	minReplicaMaxLag = 100 * time.Millisecond
	maxReplicaMaxLag = time.Hour
)

// defaultRedisPrefix namespaces every key the service writes, so that two
// deployments sharing one Redis (or a Redis shared with other programs) do
// not read each other's links and counters.
const defaultRedisPrefix = "shortener:"

// defaultIdleConnsMax bounds the keep-alive connections one instance keeps
// open between requests. Each costs about 20 KB (6,000 idle connections
// took a process from 20 to 138 MB); 1,024 of them is 20 MB at most, far
// more than nginx's upstream keepalive pools need.
const (
	defaultIdleConnsMax = 1024
	maxIdleConnsMax     = 1_000_000
)

// maxDBConns bounds DB_MAX_OPEN_CONNS and DB_MAX_IDLE_CONNS: Postgres's
// own max_connections is 100 by default, and each connection is a process
// on its side; ten thousand is already past any server's sense.
const maxDBConns = 10_000

// minConnLifetime is the shortest DB_CONN_MAX_LIFETIME or
// DB_CONN_MAX_IDLE_TIME allowed (0 aside, which means never): below it the
// pool would open a connection for nearly every query.
const minConnLifetime = time.Second

// defaultMetricsAddr is where /metrics and the profiler listen unless
// METRICS_ADDR says otherwise: the loopback address only, so that nothing
// outside the machine reaches them, on the port Go's profiler examples use.
const defaultMetricsAddr = "127.0.0.1:6060"

// defaultCreateBatch bounds a group commit's batch: with 50 clients
// creating at once, batches held 9.9 links on average and never more than
// 64 (docs/10); the bound only matters under heavier load, and keeps one
// statement's arrays small.
const defaultCreateBatch = 128

// defaultLookupBatch bounds a lookup query's codes (step 37): the lookups
// that queue while both lookup workers are busy go together, up to this
// many; the bound keeps one statement's array small.
const defaultLookupBatch = 32

// defaultLookupWorkers is how many lookup queries may be in flight at
// once with LOOKUP_BATCH (step 37).
const defaultLookupWorkers = 2

// The Bloom filter's defaults. One unknown code in a hundred reaching the
// store is the target for a flood (at most 1% to Postgres), and
// costs about 9.6 bits a code: 24 MB for ten million codes sized at twice
// that. A create waits for every registered instance to add its code: a
// Redis round trip and a map write each, a few hundred microseconds on a
// healthy network, and for an instance that has died or fallen behind,
// until its registration ends, 2 s at most (live.go). Until step 34 the
// wait was 50 ms, and an instance whose acknowledgement came later could
// answer 404 for the new link; the 5 s now only caps a wait that Redis
// failing to answer would otherwise stretch.
//
// A code the feed failed to deliver is found by the sweep within 10 s: a
// query every 10 s reading the last 15 s or so of creates, from the
// BRIN index, is nothing next to the creates themselves.
//
// The links listener pings Postgres every 5 s and gives each ping 5 s: a
// connection that went silent is replaced within about 10 s, for one
// round trip per instance every 5 s.
const (
	defaultBloomFPRate     = 0.01
	defaultBloomAckTimeout = 5 * time.Second
	defaultBloomSweep      = 10 * time.Second
	defaultListenPing      = 5 * time.Second
)

// The negative cache's defaults: 100,000 codes (a few megabytes) for five
// seconds, long enough to absorb a scanner repeating itself or a typo
// clicked by a whole mailing list, short enough that nothing stays long.
// (A create removes its code at once: the TTL bounds memory, not
// staleness.)
const (
	defaultNegCacheSize = 100_000
	maxNegCacheSize     = 10_000_000
	defaultNegCacheTTL  = 5 * time.Second
)

// defaultConfig is the configuration with nothing set.
func defaultConfig() config {
	return config{
		addr:          ":8080",
		metricsAddr:   defaultMetricsAddr,
		logFormat:     "text",
		createBatch:   defaultCreateBatch,
		lookupBatch:   defaultLookupBatch,
		lookupWorkers: defaultLookupWorkers,
		codes:         "random", // "sequence" when DATABASE_URL is set
		pool: poolConfig{
			maxOpen:     defaultMaxOpenConns,
			maxIdle:     defaultMaxIdleConns,
			maxIdleTime: defaultConnMaxIdleTime,
			maxLifetime: defaultConnMaxLifetime,
			prepare:     defaultPrepare,
			timeout:     defaultDBTimeout,
			clientCheck: defaultDBClientCheck,
		},
		replicaMaxLag:   replicaMaxLag,
		cacheTTL:        defaultCacheTTL,
		redisLookups:    false,
		redisTimeout:    defaultRedisTimeout,
		localCacheBytes: localCacheAuto,
		localCacheTTL:   defaultLocalCacheTTL,
		redisPrefix:     defaultRedisPrefix,
		idleConnsMax:    defaultIdleConnsMax,
		bloom:           true,
		bloomFPRate:     defaultBloomFPRate,
		bloomAckTimeout: defaultBloomAckTimeout,
		bloomSweep:      defaultBloomSweep,
		listenPing:      defaultListenPing,
		negCacheSize:    defaultNegCacheSize,
		negCacheTTL:     defaultNegCacheTTL,
		limits: limitConfig{
			maxInFlight: defaultMaxInFlight,
			createRate:  defaultCreateRate,
			createBurst: defaultCreateBurst,
		},
		stats: statsConfig{
			on:    true,
			top:   defaultStatsTop,
			keep:  statsKeep{hours: defaultStatsHoursKeep, days: defaultStatsDaysKeep},
			flush: defaultStatsFlush,
		},
		clicks: clickConfig{
			mode:        "queue",
			storage:     "counts",
			queue:       defaultClickQueue,
			batch:       defaultClickBatch,
			every:       defaultClickFlush,
			syncTimeout: defaultDBTimeout,
		},
	}
}

// The stats' defaults: hourly points for the last three months (a
// campaign's hours matter while it runs), daily points for two years (a
// year against the year before), ten referrer hosts per link and day.
const (
	defaultStatsTop       = 10
	defaultStatsHoursKeep = 3
	defaultStatsDaysKeep  = 25
	defaultStatsFlush     = 10 * time.Second
)

// The click queue's defaults. A batch is written when it holds
// defaultClickBatch clicks or defaultClickFlush has passed; the queue holds
// ten batches, so that a slow write does not drop clicks at once.
const (
	defaultClickQueue = 10000
	defaultClickBatch = 1000
	defaultClickFlush = time.Second
)
