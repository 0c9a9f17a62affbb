package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is everything the program reads from its environment.
type config struct {
	addr string // ADDR: where to listen, default ":8080"
	// tlsCert and tlsKey are TLS_CERT_FILE and TLS_KEY_FILE: PEM files of
	// a certificate (with its chain) and its key. Set, ADDR speaks HTTPS
	// (HTTP/2 and HTTP/1.1) itself, for a deployment with no proxy in
	// front; empty, plain HTTP, as behind nginx, which ends TLS.
	tlsCert, tlsKey string
	baseURL         string // BASE_URL: prefix of short_url; empty means "from the request"
	// baseHost is BASE_URL's host name in the form normalizeURL produces,
	// used to refuse links that point back at the shortener.
	baseHost string

	databaseURL string // DATABASE_URL: Postgres; empty means the memory store
	replicaURL  string // DATABASE_REPLICA_URL: a streaming replica to read from; empty means none
	// replicaMaxLag is REPLICA_MAX_LAG: the most a read from the replica
	// may miss of what the primary had acknowledged (replicafence.go).
	replicaMaxLag time.Duration
	pool          poolConfig // DB_MAX_OPEN_CONNS, DB_MAX_IDLE_CONNS, DB_CONN_MAX_IDLE_TIME, DB_CONN_MAX_LIFETIME, DB_PREPARE

	// trustedProxies is TRUSTED_PROXIES: the peers whose X-Forwarded-For
	// header names the client. Empty: nobody's.
	trustedProxies trustedProxies

	clicks clickConfig // CLICKS, CLICK_STORAGE, CLICK_QUEUE_SIZE, CLICK_BATCH, CLICK_FLUSH
	stats  statsConfig // STATS, STATS_TOP, STATS_HOURS_KEEP, STATS_DAYS_KEEP

	// redis is REDIS_URL, parsed; nil means no cache.
	redis *redis.Options
	// redisSentinels is REDIS_SENTINELS: the host:port of each Redis
	// Sentinel to ask where the master named redisMaster (REDIS_MASTER) is.
	// Set, the client follows the master through failovers, and REDIS_URL
	// gives only the rest (database, user, password, TLS, the pool's
	// size); its address is not used.
	redisSentinels []string
	redisMaster    string
	// redisWaitReplicas is REDIS_WAIT_REPLICAS: the replicas a change
	// and a feed registration must reach (WAIT) before they count
	// (step 35).
	redisWaitReplicas int
	// redisSentinelUser and redisSentinelPassword are
	// REDIS_SENTINEL_USERNAME and REDIS_SENTINEL_PASSWORD: what the
	// Sentinels ask of a client (their requirepass, or an ACL user), which
	// need not be the master's (REDIS_URL's).
	redisSentinelUser     string
	redisSentinelPassword string
	redisTimeout          time.Duration // REDIS_TIMEOUT: each Redis call's deadline
	// redisPrefix is REDIS_KEY_PREFIX, put before every key the service
	// writes, for a Redis shared with other programs, other deployments
	// (which would otherwise serve each other's links) or other tests.
	redisPrefix string
	cacheTTL    time.Duration // CACHE_TTL
	// redisLookups is REDIS_LOOKUPS: whether lookups read links from
	// Redis and fill it (step 05's cache). Off, Redis still carries the
	// rate limit, the feed and invalidation; a lookup that misses the
	// local cache asks Postgres (step 37). Off by default since step 38:
	// at one instance and at three behind nginx, the Redis read and
	// write-back cost more than the Postgres lookups they saved.
	redisLookups bool
	// localCacheBytes is LOCAL_CACHE_BYTES: how much of the process's
	// memory the links it keeps in front of Redis and Postgres may take;
	// 0 = none, localCacheAuto = unset: run sizes it to the memory the
	// process may use (fallbackLocalCacheBytes).
	localCacheBytes int64
	// localCacheTTL is LOCAL_CACHE_TTL: how long a link stays in the
	// process's memory, so that a link deleted or a bad entry is not
	// served until every instance restarts.
	localCacheTTL time.Duration

	limits limitConfig // MAX_IN_FLIGHT, CREATE_RATE, CREATE_BURST

	// metricsAddr is METRICS_ADDR: where /metrics and /debug/pprof listen,
	// a loopback address unless METRICS_PUBLIC=true; "off" means no
	// metrics at all.
	metricsAddr string
	logFormat   string // LOG_FORMAT: "text" or "json"

	// createBatch is CREATE_BATCH: with Postgres, how many links one
	// transaction may save for as many creates (group commit); 1 = a
	// transaction per create.
	createBatch int
	// lookupBatch is LOOKUP_BATCH: with Postgres, how many codes one
	// lookup query may ask for, for as many lookups (lookupbatch.go); 1 =
	// a query per lookup, as before step 37.
	lookupBatch int
	// lookupWorkers is LOOKUP_WORKERS: with LOOKUP_BATCH above 1, how
	// many lookup queries may be in flight at once.
	lookupWorkers int
	accessLog     bool // ACCESS_LOG: a log line for every request

	// idleConnsMax is IDLE_CONNS_MAX: while more connections than this are
	// open, one that finishes a request is closed instead of kept alive
	// (see idleConnLimit). 0 = no cap.
	idleConnsMax int

	// bloom is BLOOM: with Postgres, a Bloom filter of every code in
	// front of the store answers most unknown codes without a query
	// (bloom.go).
	bloom bool
	// bloomFPRate is BLOOM_FP_RATE: the share of unknown codes the filter
	// is sized to let through to the store anyway (false positives).
	bloomFPRate float64
	// bloomAckTimeout is BLOOM_ACK_TIMEOUT: the most a create waits for
	// every registered instance to say it added the new code
	// (bloomfeed.go, live.go).
	bloomAckTimeout time.Duration
	// bloomSweep is BLOOM_SWEEP: how often the filter reads the codes
	// created since the last time from Postgres, in case the feed
	// missed any (bloomsweep.go); 0 = never.
	bloomSweep time.Duration
	// listenPing is LISTEN_PING: how often the links listener pings
	// Postgres, and how long it waits for the answer before it closes its
	// connection and makes a new one (linklisten.go).
	listenPing time.Duration
	// negCacheSize and negCacheTTL are NEG_CACHE_SIZE and NEG_CACHE_TTL:
	// how many codes the store said it does not have are remembered, and
	// for how long (negcache.go); size 0 = none.
	negCacheSize int
	negCacheTTL  time.Duration

	// warnings are settings that are allowed but risky, for run to log
	// once the logger exists.
	warnings []string

	// codes is CODES (step 18): where new codes come from, "sequence"
	// (blocks of a Postgres sequence through a keyed permutation, the
	// default with Postgres) or "random" (the only one without).
	codes string
	// codeSrc is the source run made for codes: nil is randomCodes. Not
	// a setting.
	codeSrc codeSource

	// now is the clock expiry is judged by (expires_at): nil is
	// time.Now. Not a setting: tests set a clock they move by hand.
	now func() time.Time
}

// codeSource is where handleShorten takes new codes from.
func (c config) codeSource() codeSource {
	if c.codeSrc != nil {
		return c.codeSrc
	}
	return randomCodes{}
}

// clock is the clock links expire by.
func (c config) clock() func() time.Time {
	if c.now != nil {
		return c.now
	}
	return time.Now
}

// limitConfig is how much the service takes on before it says no.
type limitConfig struct {
	maxInFlight int // MAX_IN_FLIGHT: requests served at once, past which 503; 0 = no limit
	createRate  int // CREATE_RATE: creates per second per client; 0 = no limit
	createBurst int // CREATE_BURST: creates a client may make at once after a pause
}

// statsConfig says what is kept of each link's clicks (see stats.go).
type statsConfig struct {
	// on is STATS: rollups by hour and day, uniques, referrers and
	// classes, summed by the click workers and flushed every
	// STATS_FLUSH. They need Postgres and
	// clicks (CLICKS not off); without either they are off.
	on   bool
	top  int       // STATS_TOP: referrer hosts kept per link and day
	keep statsKeep // STATS_HOURS_KEEP, STATS_DAYS_KEEP: months kept
	// flush is STATS_FLUSH: how often the stats summed in memory are
	// written, and so how far behind they may be.
	flush time.Duration
}

// clickConfig says how clicks are counted (see clicks.go).
type clickConfig struct {
	mode    string        // CLICKS: "queue", "sync" (written during the request) or "off"
	storage string        // CLICK_STORAGE: "counts" (summed per code) or "rows" (one per click)
	queue   int           // CLICK_QUEUE_SIZE: clicks the queue holds before it drops
	batch   int           // CLICK_BATCH: clicks written in one statement at most
	every   time.Duration // CLICK_FLUSH: how long a click waits in a batch at most
	// syncTimeout bounds a click written during its request (CLICKS=sync):
	// DB_TIMEOUT, like every call on a request's path.
	syncTimeout time.Duration
}

// loadConfig reads the environment in one pass and reports every bad
// variable at once, so that a wrong deployment is fixed in one go.
func loadConfig(getenv func(string) string) (config, error) {
	cfg := defaultConfig()
	env := envReader{getenv: getenv}
	cfg.addr = env.str("ADDR", cfg.addr)
	cfg.tlsCert = env.str("TLS_CERT_FILE", "")
	cfg.tlsKey = env.str("TLS_KEY_FILE", "")
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		env.fail("TLS_CERT_FILE", cfg.tlsCert, "set TLS_CERT_FILE and TLS_KEY_FILE together, or neither")
	}
	cfg.metricsAddr = env.str("METRICS_ADDR", cfg.metricsAddr)
	metricsPublic := env.bool("METRICS_PUBLIC", false)
	// (Port 0 is the kernel's pick, a different port each time.)
	if cfg.metricsAddr != "off" && cfg.metricsAddr == cfg.addr && !strings.HasSuffix(cfg.addr, ":0") {
		env.fail("METRICS_ADDR", cfg.metricsAddr, "want an address other than ADDR's (metrics must not be public), or off")
	} else if cfg.metricsAddr != "off" {
		// The profiler listens there too: anyone who reaches it can
		// read the process's memory and stall it for a profile's length.
		switch loopback, err := loopbackAddr(cfg.metricsAddr); {
		case err != nil:
			env.fail("METRICS_ADDR", cfg.metricsAddr, "want host:port, like 127.0.0.1:6060, or off")
		case !loopback && !metricsPublic:
			env.fail("METRICS_ADDR", cfg.metricsAddr, "want a loopback address like 127.0.0.1:6060 (the profiler listens there too), or METRICS_PUBLIC=true to serve it beyond this machine")
		case !loopback:
			cfg.warnings = append(cfg.warnings, "METRICS_PUBLIC=true: metrics and the profiler listen beyond this machine on "+cfg.metricsAddr+"; keep that address behind a firewall")
		}
	}
	cfg.logFormat = env.oneOf("LOG_FORMAT", cfg.logFormat, "text", "json")
	cfg.accessLog = env.bool("ACCESS_LOG", cfg.accessLog)
	cfg.createBatch = env.intIn("CREATE_BATCH", cfg.createBatch, 1, 10_000)
	cfg.lookupBatch = env.intIn("LOOKUP_BATCH", cfg.lookupBatch, 1, 1_000)
	cfg.lookupWorkers = env.intIn("LOOKUP_WORKERS", cfg.lookupWorkers, 1, maxDBConns)
	cfg.databaseURL = env.str("DATABASE_URL", "")
	cfg.replicaURL = env.str("DATABASE_REPLICA_URL", "")
	if cfg.replicaURL != "" && cfg.databaseURL == "" {
		env.fail("DATABASE_REPLICA_URL", "(not shown)", "a replica needs its primary: set DATABASE_URL too")
	}
	cfg.replicaMaxLag = env.durationIn("REPLICA_MAX_LAG", cfg.replicaMaxLag, minReplicaMaxLag, maxReplicaMaxLag)
	// 0 open connections means no limit, and 0 idle ones none kept
	// (database/sql's meanings).
	cfg.pool.maxOpen = env.intIn("DB_MAX_OPEN_CONNS", cfg.pool.maxOpen, 0, maxDBConns)
	cfg.pool.maxIdle = env.intIn("DB_MAX_IDLE_CONNS", cfg.pool.maxIdle, 0, maxDBConns)
	// 0 means never (database/sql's meaning).
	cfg.pool.maxIdleTime = env.durationOrZero("DB_CONN_MAX_IDLE_TIME", cfg.pool.maxIdleTime, minConnLifetime, 365*24*time.Hour)
	cfg.pool.maxLifetime = env.durationOrZero("DB_CONN_MAX_LIFETIME", cfg.pool.maxLifetime, minConnLifetime, 365*24*time.Hour)
	cfg.pool.prepare = env.bool("DB_PREPARE", cfg.pool.prepare)
	cfg.pool.timeout = env.durationIn("DB_TIMEOUT", cfg.pool.timeout, 10*time.Millisecond, time.Minute)
	cfg.pool.clientCheck = env.durationOrZero("DB_CLIENT_CHECK", cfg.pool.clientCheck, 100*time.Millisecond, time.Hour)
	cfg.redisTimeout = env.durationIn("REDIS_TIMEOUT", cfg.redisTimeout, time.Millisecond, 5*time.Second)
	cfg.redisPrefix = read(&env, "REDIS_KEY_PREFIX", cfg.redisPrefix, "want at most 64 printable ASCII characters, no spaces, like shortener:", func(raw string) (string, bool) {
		return raw, len(raw) <= 64 && !strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r >= 0x7f })
	})
	cfg.localCacheBytes = read(&env, "LOCAL_CACHE_BYTES", cfg.localCacheBytes,
		"want 0 (no local cache) or a size from 1MiB to 1TiB: bytes, or a whole number of KiB, MiB or GiB, like 64MiB",
		func(raw string) (int64, bool) {
			n, err := parseBytes(raw)
			return n, err == nil && (n == 0 || n >= minLocalCacheBytes && n <= maxLocalCacheBytes)
		})
	if raw := getenv("LOCAL_CACHE_SIZE"); raw != "" {
		// Its links are not bytes: read as either, it would shrink or
		// grow someone's cache without a word.
		want := "no longer read: the local cache is sized in bytes now; set LOCAL_CACHE_BYTES instead (like 64MiB; unset, a share of memory) and remove LOCAL_CACHE_SIZE"
		if raw == "0" {
			want = "no longer read: set LOCAL_CACHE_BYTES=0 for no local cache, and remove LOCAL_CACHE_SIZE"
		}
		env.fail("LOCAL_CACHE_SIZE", raw, want)
	}
	cfg.localCacheTTL = env.durationIn("LOCAL_CACHE_TTL", cfg.localCacheTTL, minLocalCacheTTL, maxLocalCacheTTL)
	cfg.idleConnsMax = env.intIn("IDLE_CONNS_MAX", cfg.idleConnsMax, 0, maxIdleConnsMax)
	cfg.limits.maxInFlight = env.intIn("MAX_IN_FLIGHT", cfg.limits.maxInFlight, 0, 1_000_000)
	cfg.limits.createRate = env.intIn("CREATE_RATE", cfg.limits.createRate, 0, 1_000_000)
	cfg.limits.createBurst = env.intIn("CREATE_BURST", cfg.limits.createBurst, 1, 1_000_000)
	// Below a second a key would expire before it could be hit; past 30
	// days it would never leave on its own.
	cfg.cacheTTL = env.durationIn("CACHE_TTL", cfg.cacheTTL, minCacheTTL, maxCacheTTL)
	cfg.redisLookups = env.bool("REDIS_LOOKUPS", cfg.redisLookups)
	if raw := getenv("REDIS_URL"); raw != "" {
		opts, err := redis.ParseURL(raw)
		if err != nil {
			// ParseURL's message can repeat the URL, password and all:
			// say what is wrong without echoing it.
			env.fail("REDIS_URL", "(not shown)", "want a URL like redis://127.0.0.1:6379/0")
		} else if err := checkRedisPool(opts); err != nil {
			env.fail("REDIS_URL", "(not shown)", err.Error())
		} else {
			cfg.redis = opts
		}
	}
	cfg.redisSentinels = read(&env, "REDIS_SENTINELS", nil, "want a comma-separated list of up to 16 host:port, like 10.0.0.1:26379,10.0.0.2:26379", parseHostPorts)
	cfg.redisMaster = read(&env, "REDIS_MASTER", "", "want the master's name as the Sentinels know it: 1 to 64 letters, digits, '.', '_' or '-'", parseMasterName)
	// Each needs the other; a value that was given but refused above is
	// reported once, there.
	switch {
	case getenv("REDIS_SENTINELS") != "" && getenv("REDIS_MASTER") == "":
		env.fail("REDIS_MASTER", "", "REDIS_SENTINELS needs the name of the master they watch")
	case getenv("REDIS_SENTINELS") == "" && getenv("REDIS_MASTER") != "":
		env.fail("REDIS_SENTINELS", "", "REDIS_MASTER needs the Sentinels to ask")
	case len(cfg.redisSentinels) > 0 && cfg.redis == nil && getenv("REDIS_URL") == "":
		// The Sentinels say where the master is; the rest is go-redis's
		// defaults, as for a REDIS_URL of redis:///0.
		cfg.redis = &redis.Options{}
	}
	// A password is never echoed in an error.
	cfg.redisSentinelUser = env.str("REDIS_SENTINEL_USERNAME", "")
	cfg.redisSentinelPassword = env.str("REDIS_SENTINEL_PASSWORD", "")
	for _, name := range []string{"REDIS_SENTINEL_USERNAME", "REDIS_SENTINEL_PASSWORD"} {
		if getenv(name) != "" && getenv("REDIS_SENTINELS") == "" {
			env.fail(name, "(not shown)", "is for the Sentinels: set REDIS_SENTINELS, or put the master's user and password in REDIS_URL")
		}
	}
	if cfg.redisSentinelUser != "" && cfg.redisSentinelPassword == "" {
		env.fail("REDIS_SENTINEL_PASSWORD", "", "REDIS_SENTINEL_USERNAME needs a password")
	}
	// Step 35: with Sentinels, a failover can promote a replica that
	// never got a write; a change and a registration count only once a
	// replica has them.
	defWait := 0
	if len(cfg.redisSentinels) > 0 {
		defWait = 1
	}
	cfg.redisWaitReplicas = env.intIn("REDIS_WAIT_REPLICAS", defWait, 0, maxWaitReplicas)
	if cfg.redisWaitReplicas > 0 && cfg.redis == nil && getenv("REDIS_WAIT_REPLICAS") != "" {
		env.fail("REDIS_WAIT_REPLICAS", getenv("REDIS_WAIT_REPLICAS"), "is for a Redis with replicas: set REDIS_URL or REDIS_SENTINELS")
	}
	cfg.bloom = env.oneOf("BLOOM", "on", "on", "off") == "on"
	defCodes := "random"
	if cfg.databaseURL != "" {
		defCodes = "sequence"
	}
	cfg.codes = env.oneOf("CODES", defCodes, "sequence", "random")
	if cfg.codes == "sequence" && cfg.databaseURL == "" {
		env.fail("CODES", "sequence", "needs DATABASE_URL (it takes its numbers from a Postgres sequence); without it, CODES=random")
	}
	cfg.bloomFPRate = read(&env, "BLOOM_FP_RATE", cfg.bloomFPRate, "want a decimal fraction above 0 and below 0.5, like 0.01", parseFPRate)
	cfg.bloomAckTimeout = env.durationIn("BLOOM_ACK_TIMEOUT", cfg.bloomAckTimeout, time.Millisecond, 10*time.Second)
	// Under a second, each sweep would read back its margin (DB_TIMEOUT
	// and 5 s) many times over; past an hour, it is no backstop.
	cfg.bloomSweep = env.durationOrZero("BLOOM_SWEEP", cfg.bloomSweep, time.Second, time.Hour)
	cfg.listenPing = env.durationIn("LISTEN_PING", cfg.listenPing, 100*time.Millisecond, time.Minute)
	if cfg.bloomSweep == 0 && cfg.bloom && cfg.redis != nil && cfg.databaseURL != "" {
		// Issue 24, item 6: with Redis there may be other instances, and
		// a create whose announcement was lost reaches their filters by
		// the sweep alone; without it, that link would answer 404 there
		// until they restart.
		env.fail("BLOOM_SWEEP", "0", "with REDIS_URL or REDIS_SENTINELS the sweep is how other instances learn of a link whose announcement was lost; give 1s to 1h, or set BLOOM=off")
	}
	cfg.negCacheSize = env.intIn("NEG_CACHE_SIZE", cfg.negCacheSize, 0, maxNegCacheSize)
	cfg.negCacheTTL = env.durationIn("NEG_CACHE_TTL", cfg.negCacheTTL, 10*time.Millisecond, 10*time.Minute)
	cfg.clicks.mode = env.oneOf("CLICKS", cfg.clicks.mode, "queue", "sync", "off")
	cfg.clicks.storage = env.oneOf("CLICK_STORAGE", cfg.clicks.storage, "counts", "rows")
	if cfg.clicks.storage == "rows" && cfg.databaseURL == "" {
		env.fail("CLICK_STORAGE", "rows", "rows are kept in Postgres: set DATABASE_URL, or use counts")
	}
	cfg.clicks.queue = env.intIn("CLICK_QUEUE_SIZE", cfg.clicks.queue, 1, 1_000_000)
	cfg.clicks.batch = env.intIn("CLICK_BATCH", cfg.clicks.batch, 1, 100_000)
	cfg.clicks.every = env.durationIn("CLICK_FLUSH", cfg.clicks.every, 10*time.Millisecond, time.Minute)
	cfg.clicks.syncTimeout = cfg.pool.timeout
	cfg.stats.on = env.oneOf("STATS", "on", "on", "off") == "on"
	cfg.stats.top = env.intIn("STATS_TOP", cfg.stats.top, 1, 100)
	cfg.stats.keep.hours = env.intIn("STATS_HOURS_KEEP", cfg.stats.keep.hours, 1, 120)
	cfg.stats.keep.days = env.intIn("STATS_DAYS_KEEP", cfg.stats.keep.days, 1, 120)
	cfg.stats.flush = env.durationIn("STATS_FLUSH", cfg.stats.flush, 10*time.Millisecond, 10*time.Minute)
	wide := env.bool("TRUSTED_PROXIES_WIDE", false)
	if raw := getenv("TRUSTED_PROXIES"); raw != "" {
		tp, err := parseTrustedProxies(raw, wide)
		if err != nil {
			env.fail("TRUSTED_PROXIES", raw, fmt.Sprintf("want IP addresses or CIDR prefixes separated by commas, like 127.0.0.1/32,::1; %v", err))
		} else {
			cfg.trustedProxies = tp
		}
	}
	if raw := getenv("BASE_URL"); raw != "" {
		if host, ok := checkBaseURL(raw); !ok {
			env.fail("BASE_URL", raw, "want an http or https URL like https://sho.rt or https://sho.rt/l: no user, query, fragment, empty path segment, space, or port outside 1 to 65535")
		} else {
			cfg.baseHost = host
			cfg.baseURL = strings.TrimSuffix(raw, "/")
		}
	} else if len(cfg.trustedProxies) > 0 {
		cfg.warnings = append(cfg.warnings, "BASE_URL is not set: short_url is built from the Host header, which the client chooses "+
			"(a proxy passes it on); set BASE_URL to the service's public URL")
	}
	if err := env.err(); err != nil {
		return config{}, err
	}
	return cfg, nil
}
