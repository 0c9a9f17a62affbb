package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// guardedRedis is a Redis client with the deadline every call on a
// request's path gets, and the breaker that skips Redis while it fails.
// The cache and the create rate limit share one.
type guardedRedis struct {
	*redis.Client
	timeout time.Duration
	breaker *breaker
	// waitReplicas is REDIS_WAIT_REPLICAS: a write that must survive a
	// failover (a change, a feed registration) counts once this many
	// replicas have it (writeAndWait).
	waitReplicas int
}

// maxWaitReplicas bounds REDIS_WAIT_REPLICAS.
const maxWaitReplicas = 16

// writeAndWait runs write on one connection of rdb's and then, if
// waitReplicas > 0, Redis's WAIT on the same connection (WAIT counts the
// replicas that have that connection's writes; on another connection it
// would count nothing of this one's). Fewer replicas than asked for within
// wait is an error: the write is on the master, and may not survive a
// failover (step 35). Until step 35 nothing waited: a Sentinel failover
// could promote a replica that never had the change, and every instance
// read the link as it was from the new master for up to CACHE_TTL.
func writeAndWait(ctx context.Context, rdb *redis.Client, replicas int, wait time.Duration, write func(redis.Cmdable) error) (err error) {
	if replicas == 0 {
		return write(rdb)
	}
	conn := rdb.Conn()
	defer func() {
		if cerr := conn.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("redis: a connection back to the pool: %w", cerr)
		}
	}()
	if err := write(conn); err != nil {
		return err
	}
	// WAIT's timeout 0 would block for good: at least 1 ms.
	got, err := conn.Wait(ctx, replicas, max(wait, time.Millisecond)).Result()
	if err != nil {
		return fmt.Errorf("redis: WAIT for %d replicas: %w", replicas, err)
	}
	if got < int64(replicas) {
		return &fewReplicas{got: got, want: replicas, wait: wait}
	}
	return nil
}

// fewReplicas is writeAndWait's error when the write is on the master but
// on fewer replicas than asked for. Redis answered: it says nothing of
// whether Redis can be reached, so the breaker does not count it.
type fewReplicas struct {
	got  int64
	want int
	wait time.Duration
}

func (e *fewReplicas) Error() string {
	return fmt.Sprintf("redis: the write reached %d of the %d replicas asked for (REDIS_WAIT_REPLICAS) within %v: a failover could lose it", e.got, e.want, e.wait)
}

// breakerErr is what a call's err says to the breaker: a write that
// reached too few replicas is an answer.
func breakerErr(err error) error {
	if _, ok := errors.AsType[*fewReplicas](err); ok {
		return nil
	}
	return err
}

// sentinels names a Redis master by the Sentinels that watch it
// (REDIS_MASTER, REDIS_SENTINELS), with what the Sentinels themselves ask
// of a client (REDIS_SENTINEL_USERNAME, REDIS_SENTINEL_PASSWORD: their
// requirepass or ACL user, not the master's, which REDIS_URL gives); the
// zero value means none: the client goes to opts.Addr.
type sentinels struct {
	master   string
	addrs    []string
	username string
	password string
}

// openRedis makes a client for opts whose every call gives up after timeout.
// opts is copied, not changed: the caller's options stay as they were. With
// sentinels, the client asks them where the master is, and follows it when
// they fail over to a replica (go-redis listens on their +switch-master
// channel and drops its connections to the old master). An unreachable Redis
// is not an error here: the cache is an optimisation, and the rate limit has
// a fallback, so the service starts without it, warns, and uses it as soon
// as it answers. waitReplicas is REDIS_WAIT_REPLICAS (guardedRedis's field),
// given here so that the client is whole when it is made (step 42: run set
// it afterwards).
func openRedis(ctx context.Context, opts *redis.Options, sent sentinels, timeout time.Duration, waitReplicas int, log *slog.Logger) *guardedRedis {
	redisLibLog.log.Store(log)
	redisLibLogOnce.Do(func() { redis.SetLogger(redisLibLog) })
	o := *opts
	o.ContextTimeoutEnabled = true // let each call's deadline bound its socket reads too
	// Each wait has its own bound as well, in case a call comes without a
	// deadline: connecting, reading a reply, writing a command, and
	// waiting for a free connection when all PoolSize are busy (go-redis
	// would otherwise derive that one from ReadTimeout plus a second).
	o.DialTimeout = timeout
	o.ReadTimeout = timeout
	o.WriteTimeout = timeout
	o.PoolTimeout = timeout
	// go-redis dials up to five times, 100 ms apart, before it gives up on a
	// connection. When Redis is down, that spends a request's whole cache
	// budget on retries that will fail the same way.
	o.DialerRetries = 1
	// Nor is a failed command worth retrying: a cache miss already has a
	// fallback, the store, and go-redis's retries (three by default, with
	// a backoff) would only make the fallback later. -1 means none; 0 would
	// mean the default. With no retries, no call can take longer than
	// its deadline.
	o.MaxRetries = -1
	client, where := redis.NewClient(&o), any(o.Addr)
	if sent.master != "" {
		client, where = redis.NewFailoverClient(failoverOptions(&o, sent)), sent.addrs
	}
	rdb := &guardedRedis{
		Client:       client,
		timeout:      timeout,
		waitReplicas: waitReplicas,
		breaker:      newBreaker(breakerFailures, breakerCooldown, log),
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		log.Warn("redis does not answer; starting without it until it does",
			"addr", where, "err", err)
	}
	return rdb
}

// failoverOptions carries o's settings over to a client that finds the
// master through sent. The same timeouts bound the questions to the
// Sentinels: one that is down costs a dial timeout, then the next is asked.
// Until step 27 the Sentinels' own user and password were not carried
// (issue 24, item 3): Sentinels with a requirepass could not be used.
func failoverOptions(o *redis.Options, sent sentinels) *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName:            sent.master,
		SentinelAddrs:         slices.Clone(sent.addrs),
		SentinelUsername:      sent.username,
		SentinelPassword:      sent.password,
		ClientName:            o.ClientName,
		Protocol:              o.Protocol,
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.DB,
		TLSConfig:             o.TLSConfig,
		MaxRetries:            o.MaxRetries,
		DialTimeout:           o.DialTimeout,
		DialerRetries:         o.DialerRetries,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: o.ContextTimeoutEnabled,
		PoolSize:              o.PoolSize,
		PoolTimeout:           o.PoolTimeout,
		MinIdleConns:          o.MinIdleConns,
		MaxIdleConns:          o.MaxIdleConns,
		MaxActiveConns:        o.MaxActiveConns,
		ConnMaxIdleTime:       o.ConnMaxIdleTime,
		ConnMaxLifetime:       o.ConnMaxLifetime,
	}
}

// redisAnswered reports whether err, from a call to Redis, is an answer:
// nil, a miss (redis.Nil), or an error reply (redis.Error: WRONGTYPE on a
// key of another type, an error raised by a script, READONLY, ...). Redis
// was there and quick; such an error is bad data or a bug, to be logged,
// not an outage, and it does not count towards the breaker. Everything
// else (a refused or dropped connection, a timeout, a full pool) means
// Redis could not be reached in time, which the breaker is for.
func redisAnswered(err error) bool {
	var reply redis.Error
	return err == nil || errors.As(err, &reply)
}

// The breaker opens after breakerFailures Redis calls in a row have
// failed, and then lets one call through every breakerCooldown to see
// whether Redis is back.
const (
	breakerFailures = 3
	breakerCooldown = time.Second
)

// breaker is a circuit breaker. Closed, every call goes to Redis. After
// threshold failures in a row it opens: for cooldown no call goes to Redis
// at all, so a stalled Redis costs requests nothing instead of a timeout
// each. Then one call is let through (half-open); if it succeeds the
// breaker closes, if it fails it stays open another cooldown.
//
// Only failures to reach Redis count (see redisAnswered): an error reply is
// an answer, and a key of the wrong type must not switch off the cache
// and the shared rate limit for everyone.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	log       *slog.Logger
	opens     *sampledLog
	// now is the breaker's clock, in nanoseconds. It is monotonicNow,
	// Go's monotonic clock, so that a change to the wall clock (NTP
	// stepping it back, say) cannot keep the breaker open, or close it
	// early; tests set a clock they move by hand.
	now func() int64

	failures  atomic.Int32
	openUntil atomic.Int64 // 0 = closed
	openedAt  atomic.Int64 // when it last opened
}

func newBreaker(threshold int32, cooldown time.Duration, log *slog.Logger) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, log: log,
		opens: &sampledLog{log: log, every: 10 * time.Second}, now: monotonicNow}
}

// processStart anchors the breaker's clock.
var processStart = time.Now()

// monotonicNow is nanoseconds since the process started.
func monotonicNow() int64 { return int64(time.Since(processStart)) }

// allow reports whether a call may go to Redis now, and when it was
// allowed, which the caller hands back to done.
func (b *breaker) allow() (ok bool, at int64) {
	now := b.now()
	until := b.openUntil.Load()
	if until == 0 {
		return true, now
	}
	if now < until {
		return false, now
	}
	// Half-open: the one caller that moves the deadline on probes Redis;
	// the others skip it for another cooldown.
	return b.openUntil.CompareAndSwap(until, now+b.cooldown.Nanoseconds()), now
}

// done records how a call that allow let through at went: err is what the
// call returned. An answer (nil, a miss, an error reply: see
// redisAnswered) is a success; anything else is a failure. A success of a
// call that began before the breaker last opened says nothing of Redis
// now, and does not close it.
func (b *breaker) done(at int64, err error) {
	if redisAnswered(err) {
		// Loads first: on the hot path nothing is written, so the cores
		// do not fight over the cache line.
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if until := b.openUntil.Load(); until != 0 && at >= b.openedAt.Load() &&
			b.openUntil.CompareAndSwap(until, 0) {
			b.log.Info("redis answers again; breaker closed")
		}
		return
	}
	if b.failures.Add(1) >= b.threshold {
		b.failures.Store(0)
		now := b.now()
		b.openedAt.Store(now)
		b.openUntil.Store(now + b.cooldown.Nanoseconds())
		b.opens.warn(context.Background(), fmt.Sprintf("redis failing; breaker open, skipping redis for %v at a time", b.cooldown), err)
	}
}

// open reports whether the breaker is open or half-open: Redis has
// failed threshold calls in a row, and no call since has come back.
func (b *breaker) open() bool { return b.openUntil.Load() != 0 }

// collectors export the breaker's state, read at each scrape (step 41).
// Until then an open breaker showed only as lookups counted "skipped",
// which since step 36 also counts every lookup of a code this instance
// changed in the last 30 s, and since step 38 (REDIS_LOOKUPS off) none
// of those a breaker skips: the alert built on it fired on edits and
// missed an open breaker.
func (g *guardedRedis) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "redis_breaker_open",
			Help: "1 while the Redis breaker is open or half-open (Redis failing: calls skipped, rate limits per instance), 0 while closed."},
			func() float64 {
				if g.breaker.open() {
					return 1
				}
				return 0
			}),
	}
}

// go-redis logs through a logger global to its package: each failed dial
// (one line per request while Redis is down), a pub/sub reconnect, and a
// pub/sub message it dropped because the channel it hands messages to
// stayed full. Until step 27 every line was discarded, and with them the
// one that says an invalidation was lost (issue 24, item 4). Now every
// line goes to the service's log, sampled (one per redisLibLogEvery, with
// the count held back), and a dropped message also reaches every
// subscriber in the process (subscriber.lost), which counts it and purges
// its caches: what the lost message would have dropped is dropped with
// everything else.
var redisLibLogOnce sync.Once

// redisLibLog is the logger go-redis is given. Its slog logger is the one
// of the last openRedis (a process has one; tests have many, and any of
// them will do).
var redisLibLog = &libLog{sampled: sampledLog{every: 10 * time.Second}}

type libLog struct {
	log     atomic.Pointer[slog.Logger]
	sampled sampledLog
}

// droppedMessage is the part of go-redis's line for a pub/sub message it
// dropped (pubsub.go: "redis: %v channel is full for %s (message is
// dropped)"); TestSubscriberHearsDrops fails if go-redis rewords it.
const droppedMessage = "(message is dropped)"

func (l *libLog) Printf(ctx context.Context, format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if strings.Contains(format, droppedMessage) {
		subscribers.lost(ctx)
	}
	if log := l.log.Load(); log != nil {
		l.sampled.warnTo(ctx, log, "redis client library", errors.New(line))
	}
}
