package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// limitInFlight refuses a request at once, with 503 and Retry-After, when
// max requests are already being served. Past the point where the CPU and
// the backends are busy, a request let in only waits in a queue, and makes
// everyone behind it wait longer; refused at once, its client can retry,
// or a proxy in front can try another instance. max 0 means no limit.
//
// GET /healthz is not counted nor refused: a load balancer that asks it
// whether this process is alive must not be told "no" because the process
// is busy, or it would take a busy instance out and make the others busier.
//
// Each refusal is counted in shed.
func limitInFlight(max int, shed counter, log *slog.Logger, next http.Handler) http.Handler {
	if max <= 0 {
		return next
	}
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		defer n.Add(-1)
		if n.Add(1) > int64(max) {
			shed.Inc()
			closeUnreadBody(w, r)
			// Refused before routing: the metrics and the access log
			// give it a route of its own, not "unmatched" with the 404s.
			if info := requestInfoFrom(r.Context()); info != nil {
				info.route = "shed"
			}
			writeError(w, r, log, ErrOverloaded)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitCreates answers 429 with Retry-After to a client that creates links
// faster than lim allows, counting each refusal in limited; lim nil means no
// limit.
func limitCreates(lim *createLimiter, limited counter, log *slog.Logger, next http.Handler) http.Handler {
	if lim == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wait := lim.reserve(r.Context(), clientIPFrom(r.Context())); wait > 0 {
			limited.Inc()
			closeUnreadBody(w, r)
			writeError(w, r, log, &rateLimitedError{retryAfter: wait})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// closeUnreadBody makes the answer to a request refused before its body
// was read the last on its connection, and sends it without waiting for
// the body. Otherwise net/http, to reuse the connection, reads the rest of
// the body before it sends the answer: a client whose body is slow or
// never comes would get its 429 or 503 only at ReadTimeout, holding the
// connection that long. With "Connection: close" the answer goes at once;
// net/http still reads some of the body after it (up to 256 KB, hoping to
// find its end), which the read deadline, set to now, cuts short, so the
// connection is closed at once too. A request without a body keeps its
// connection.
func closeUnreadBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 { // no body; -1 is one of unknown length (chunked)
		return
	}
	w.Header().Set("Connection", "close")
	// A ResponseWriter that cannot reach its connection (a test's
	// recorder) leaves it to ReadTimeout: the answer still goes at once.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// createLimiter allows each client rate creates a second, and up to burst
// at once after a pause. The count lives in Redis, so that every instance
// behind nginx draws on the same allowance; while Redis fails (its breaker
// open), each instance counts alone in its own memory, and the limit holds
// per instance instead: N instances let a client through N times as fast.
//
// Both count with GCRA, the generic cell rate algorithm: a client's whole
// state is one time, its "theoretical arrival time" (tat), when its
// allowance will be full again. Each request moves tat on by 1/rate; a
// request that would move it more than burst/rate past now is refused,
// and told to come back when it would not. A key whose tat has passed
// means a client at full allowance, which is the same as no key at all, so
// every key can expire at its tat: idle clients take no memory anywhere.
//
// Creates that arrive together are counted together: their keys go to
// Redis in one script call, one round trip for all of them, as the group
// commit does for their inserts (docs/10).
type createLimiter struct {
	interval time.Duration // 1/rate
	burst    int
	rdb      *guardedRedis // nil: count in this process only
	prefix   string
	local    *localGCRA
	now      func() time.Time // the local count's clock: time.Now; tests set their own
	script   *redis.Script    // gcraScript; tests set a broken one
	warns    *sampledLog      // Redis failing
	bad      *sampledLog      // Redis answering with an error

	queue    chan *pendingReserve // to the workers, with rdb only
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// pendingReserve is one create waiting for its batch's answer from Redis.
type pendingReserve struct {
	key  string
	done chan reserveResult // buffered: a worker never waits for a create that left
}

type reserveResult struct {
	wait time.Duration
	ok   bool // false: Redis did not answer; count in this process
}

// limiterBatch bounds the keys sent to Redis in one script call, and
// limiterWorkers is how many calls can be in flight at once: one since
// step 18, as for the group commit (groupCommitWorkers).
const (
	limiterBatch   = 64
	limiterWorkers = 1
)

// rateKeyPrefix namespaces the rate limit's keys in Redis.
const rateKeyPrefix = "rate:create:"

// newCreateLimiter allows rate creates a second per client, burst at once;
// with rdb, counted in Redis under keyPrefix (REDIS_KEY_PREFIX) +
// rateKeyPrefix, so that every instance counts the same.
func newCreateLimiter(rate, burst int, rdb *guardedRedis, keyPrefix string, log *slog.Logger) *createLimiter {
	interval := time.Second / time.Duration(rate)
	l := &createLimiter{
		interval: interval,
		burst:    burst,
		rdb:      rdb,
		prefix:   keyPrefix + rateKeyPrefix,
		local:    newLocalGCRA(interval, burst, maxLocalClients),
		now:      time.Now,
		script:   gcraScript,
		warns:    &sampledLog{log: log, every: 10 * time.Second},
		bad:      &sampledLog{log: log, every: 10 * time.Second},
		stop:     make(chan struct{}),
	}
	if rdb != nil {
		l.queue = make(chan *pendingReserve, limiterBatch*limiterWorkers)
		for range limiterWorkers {
			l.done.Go(l.run)
		}
	}
	return l
}

// close stops the workers that talk to Redis; call it once no request
// can reach the limiter any more.
func (l *createLimiter) close() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.done.Wait()
}

// reserve takes one create from ip's allowance and returns 0, or, if there
// is none left, how long until there will be (and takes nothing).
func (l *createLimiter) reserve(ctx context.Context, ip netip.Addr) time.Duration {
	key := clientKey(ip)
	if l.rdb != nil {
		p := &pendingReserve{key: l.prefix + key, done: make(chan reserveResult, 1)}
		select {
		case l.queue <- p:
			select {
			case res := <-p.done:
				if res.ok {
					return res.wait
				}
			case <-ctx.Done():
				// The client went away: nothing to count. The
				// handler fails on the same ctx.
				return 0
			}
		case <-ctx.Done():
			return 0
		case <-l.stop:
		}
	}
	return l.local.reserve(key, l.now())
}

// run takes the first create waiting and every other one already queued,
// up to limiterBatch, and counts them in one call to Redis.
func (l *createLimiter) run() {
	batch := make([]*pendingReserve, 0, limiterBatch)
	keys := make([]string, 0, limiterBatch)
	for {
		select {
		case p := <-l.queue:
			batch = collect(batch[:0], l.queue, p, limiterBatch)
		case <-l.stop:
			return
		}
		keys = keys[:0]
		for _, p := range batch {
			keys = append(keys, p.key)
		}
		waits, err := l.count(keys)
		for i, p := range batch {
			if err != nil {
				p.done <- reserveResult{}
			} else {
				p.done <- reserveResult{wait: time.Duration(waits[i]) * time.Microsecond, ok: true}
			}
		}
	}
}

// count runs the script for keys, through the breaker, within the Redis
// timeout, and returns each key's wait in microseconds. An error means
// the creates are counted in this process instead. Only a failure to reach
// Redis counts towards the breaker: an error reply (a script error, say)
// is Redis saying no to this call, logged, and it must not switch off the
// cache that shares the breaker.
func (l *createLimiter) count(keys []string) ([]int64, error) {
	ok, at := l.rdb.breaker.allow()
	if !ok {
		return nil, errBreakerOpen
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.rdb.timeout)
	defer cancel()
	cmd := l.script.Run(ctx, l.rdb, keys, l.interval.Microseconds(), l.burst)
	l.rdb.breaker.done(at, cmd.Err())
	if err := cmd.Err(); err != nil {
		err = fmt.Errorf("rate limit: run script: %w", err)
		if redisAnswered(err) {
			l.bad.warn(ctx, "rate limit: redis refused, counting in this process", err)
		} else {
			l.warns.warn(ctx, "rate limit: redis failed, counting in this process", err)
		}
		return nil, err
	}
	waits, err := cmd.Int64Slice()
	if err == nil && len(waits) != len(keys) {
		err = fmt.Errorf("answered %d waits for %d keys", len(waits), len(keys))
	}
	if err != nil {
		err = fmt.Errorf("rate limit: read script answer: %w", err)
		l.bad.warn(ctx, "rate limit: redis refused, counting in this process", err)
		return nil, err
	}
	return waits, nil
}

// errBreakerOpen means Redis was not asked: its breaker is open.
var errBreakerOpen = errors.New("redis breaker open")

// clientKey is what a client is known by: its IPv4 address, or the /64 an
// IPv6 address is in, since one IPv6 host is handed a whole /64 and could
// take a fresh address for every request.
func clientKey(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// gcraScript is GCRA in Redis: one round trip, atomic (Redis runs a script
// with nothing else in between), on Redis's clock so that instances whose
// clocks differ still agree. KEYS are the clients' keys of one batch, one
// per create (a key may repeat: each create counts, in order); ARGV[1] is
// the interval between creates at the limit, in microseconds; ARGV[2] the
// burst. It returns, for each key, 0 if that create is allowed, else
// microseconds to wait. (On a Redis Cluster the keys of one call must
// share a slot; this service uses one Redis.)
//
// A key holds what the script wrote, or it is treated as absent (a client
// at full allowance) and deleted: a key of another type (pcall: GET fails
// on it), a value that is not a number, or one no create could have left
// (nan, -inf, or later than now plus the burst's worth, inf among them).
// Otherwise someone who can write to Redis, or a bug, could make a client
// unlimited or limited forever, or make every call fail. A key written
// here always has a TTL.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local waits = {}
for i, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  local tat = type(v) == 'string' and tonumber(v) or nil
  if tat == nil or tat ~= tat or tat == -math.huge or tat > now + tolerance then
    if v then redis.call('DEL', key) end
    tat = now
  end
  if tat < now then tat = now end
  local new_tat = tat + interval
  if new_tat - now > tolerance then
    waits[i] = new_tat - tolerance - now
  else
    redis.call('SET', key, new_tat, 'PX', math.ceil((new_tat - now) / 1000))
    waits[i] = 0
  end
end
return waits
`)

// maxLocalClients bounds the clients the in-process fallback tracks at once.
// At the default rate a key lives two seconds, so this many means 50,000 new
// addresses a second; past it, a new address goes unlimited rather than
// push out one that is being limited.
const maxLocalClients = 100_000

// localGCRA is the same algorithm in this process's memory, for when Redis
// is failing or not configured.
type localGCRA struct {
	interval  time.Duration
	tolerance time.Duration
	max       int

	mu        sync.Mutex
	tat       map[string]time.Time
	lastSweep time.Time
}

func newLocalGCRA(interval time.Duration, burst, max int) *localGCRA {
	return &localGCRA{
		interval:  interval,
		tolerance: interval * time.Duration(burst),
		max:       max,
		tat:       make(map[string]time.Time),
	}
}

func (g *localGCRA) reserve(key string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	tat, ok := g.tat[key]
	full := !ok && len(g.tat) >= g.max
	if since := now.Sub(g.lastSweep); since > localSweepEvery || (full && since > time.Second) {
		g.sweep(now)
		full = !ok && len(g.tat) >= g.max
	}
	if full {
		return 0
	}
	if tat.Before(now) {
		tat = now
	}
	newTAT := tat.Add(g.interval)
	if wait := newTAT.Sub(now) - g.tolerance; wait > 0 {
		return wait
	}
	g.tat[key] = newTAT
	return 0
}

// localSweepEvery is how often the fallback forgets idle clients: memory
// is bounded by maxLocalClients anyway; this returns it in quiet times.
const localSweepEvery = time.Minute

// sweep forgets every client whose allowance is full again. Called with
// g.mu held, once a minute, or once a second at most while the map is
// full, so that an attack from that many addresses cannot make every
// request walk the whole map.
func (g *localGCRA) sweep(now time.Time) {
	g.lastSweep = now
	for k, tat := range g.tat {
		if !tat.After(now) {
			delete(g.tat, k)
		}
	}
}

// size is how many clients the fallback tracks now.
func (g *localGCRA) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.tat)
}
