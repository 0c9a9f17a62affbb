package main

import (
	"context"
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
			writeError(w, r, log, &rateLimitedError{retryAfter: wait})
			return
		}
		next.ServeHTTP(w, r)
	})
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
type createLimiter struct {
	interval time.Duration // 1/rate
	burst    int
	rdb      *guardedRedis // nil: count in this process only
	prefix   string
	local    *localGCRA
	errs     *sampledLog
}

// rateKeyPrefix namespaces the rate limit's keys in Redis.
const rateKeyPrefix = "rate:create:"

func newCreateLimiter(rate, burst int, rdb *guardedRedis, log *slog.Logger) *createLimiter {
	interval := time.Second / time.Duration(rate)
	return &createLimiter{
		interval: interval,
		burst:    burst,
		rdb:      rdb,
		prefix:   rateKeyPrefix,
		local:    newLocalGCRA(interval, burst, maxLocalClients),
		errs:     &sampledLog{log: log, every: 10 * time.Second},
	}
}

// reserve takes one create from ip's allowance and returns 0, or, if there
// is none left, how long until there will be (and takes nothing).
func (l *createLimiter) reserve(ctx context.Context, ip netip.Addr) time.Duration {
	key := clientKey(ip)
	if l.rdb != nil {
		if ok, at := l.rdb.breaker.allow(); ok {
			cctx, cancel := context.WithTimeout(ctx, l.rdb.timeout)
			wait, err := gcraScript.Run(cctx, l.rdb, []string{l.prefix + key},
				l.interval.Microseconds(), l.burst).Int64()
			cancel()
			switch {
			case err == nil:
				l.rdb.breaker.done(at, nil)
				return time.Duration(wait) * time.Microsecond
			case ctx.Err() != nil:
				// The client went away: nothing to count, and not
				// Redis's fault. The handler fails on the same ctx.
				return 0
			}
			l.rdb.breaker.done(at, err)
			l.errs.warn(ctx, "rate limit: redis failed, counting in this process", err)
		}
	}
	return l.local.reserve(key, time.Now())
}

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
// clocks differ still agree. KEYS[1] is the client's key; ARGV[1] the
// interval between creates at the limit, in microseconds; ARGV[2] the
// burst. It returns 0 if the create is allowed, else microseconds to wait.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > tolerance then
  return new_tat - tolerance - now
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000))
return 0
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
