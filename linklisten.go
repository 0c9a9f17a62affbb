package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// Until step 30, an instance heard of a new link from the instance that
// created it (the feed, bloomfeed.go) or from its sweep, which reads the
// rows whose created_at is recent (bloomsweep.go). A row inserted by
// anyone else (psql, `shortener import`, a restore) was never announced,
// and its created_at is the start of its transaction: one that ran longer
// than the sweep's margin (DB_TIMEOUT + 5 s, a psql session left open)
// was never swept in either. Such a link answered 404 on every instance
// whose Bloom filter was trusted, until that instance restarted.
//
// Now Postgres says so itself. A trigger on links (sql/schema.sql) runs
// once per statement that adds rows and calls pg_notify with their codes
// (200 to a message; a statement of more than 10,000 rows, as one "*").
// Postgres delivers a notification at
// its transaction's commit, and only if it commits, to every session that
// has run LISTEN on the channel, in commit order. Each instance keeps one
// such session: lib/pq's Listener, a connection of its own outside the
// pool, which reconnects by itself (the standard library's database/sql
// has no notifications).
//
// What it cannot do is tell what was sent while it was not connected:
// Postgres keeps notifications only for sessions listening at the time.
// So each (re)connection, once its LISTEN is in place, asks the Bloom
// filter to be read again whole from Postgres (a build, as at a start),
// and the filter is not trusted (every lookup passes through) from the
// moment the connection is lost until that build ends: a link committed
// after the LISTEN is told, one committed before is read by the build. The
// negative cache is emptied at the same moments.
//
// A notification is input, like anything another process sends: any
// role that can connect to the database can NOTIFY on this channel. What
// a forger gains is small: a code added to the filter is a "maybe" (a
// lookup that asks Postgres), never a redirect, and "*" costs a build.
// Each part that is not a code's shape is ignored and counted.
//
// A connection can also die without a word: a host gone, a firewall that
// forgets it, a proxy that stops passing bytes on. Nothing arrives, which
// looks like nothing said, and lib/pq notices only when TCP gives up: a
// host gone, after Go's default keepalive has gone unanswered (15 s, then
// 9 probes 15 s apart: about 2.5 minutes); a peer that is there and
// silent (a stalled proxy) answers the keepalives, so never. All that
// time the filter is trusted and deaf. So the listener pings Postgres every LISTEN_PING, and
// a ping not answered within LISTEN_PING closes the connection under
// lib/pq, which then reconnects as after any loss. lib/pq's own Close
// cannot do it: it waits for the ping, which holds the Listener's lock;
// closing the net.Conn that its dialer (listenDialer) made wakes both.

// linksChannel is the channel the trigger on inserts notifies on.
const linksChannel = "links_created"

// Since step 49 a second trigger names the links each statement edits,
// on changesChannel, whoever ran it. Until then an edit reached the other
// instances only through Redis (invalidate.go), published by the instance
// that made it once Postgres had committed: an edit made in psql (an
// operator taking down a phishing link), or one whose instance was
// killed between its COMMIT and its PUBLISH, reached no cache, and every
// instance served the link as it was, from Redis for CACHE_TTL (an hour)
// and from its own memory for LOCAL_CACHE_TTL. Postgres sends this one at
// commit whoever commits, and each instance that hears it drops the code
// from its memory and tells Redis what the primary has now, as it does
// for a change of its own that Redis missed (cachedStore.remember).
//
// A notification is input here too: whoever can connect can name any
// code, and each costs a read of the primary and a write to Redis, which
// holds what the primary has; no more than maxPending wait at a time.
// While this connection is lost an edit may go unheard, so each LISTEN
// made again (and the first) purges this process's memory; what Redis
// kept of such an edit is not read again (docs/49).
const changesChannel = "links_changed"

// listenChanges is what the listener does with links edited anywhere:
// drop forgets one code in this process's memory and has Redis told
// again; purge forgets every code, when more than 10,000 were edited in
// one statement or when the LISTEN is made again after a loss. Either may
// be nil.
type listenChanges struct {
	drop  func(code string)
	purge func()
}

// How soon the listener tries again after losing its connection: lib/pq
// doubles the wait after each failed attempt, up to the second.
const (
	listenMinReconnect = 100 * time.Millisecond
	listenMaxReconnect = 5 * time.Second
)

// listenRetry is the pause before a LISTEN that Postgres refused is tried
// again.
const listenRetry = time.Second

// linkListener tells the Bloom filter and the negative cache (either may
// be nil) of every link Postgres adds, and changes of every link edited.
type linkListener struct {
	dsn     string
	bloom   *bloomStore
	neg     *negCache
	changes listenChanges
	counts  bloomCounts
	log     *slog.Logger
	warns   *sampledLog // connection attempts that failed
	bad     *sampledLog // messages that are not codes

	minReconnect, maxReconnect time.Duration
	pingEvery                  time.Duration // LISTEN_PING

	// mu orders up and down: a LISTEN answered as the connection goes
	// must not mark the listener up after lib/pq has said it was lost.
	// lost counts the connections lost.
	mu   sync.Mutex
	lost uint64

	// closing is set as run ends: the connection it closes is not lost.
	closing atomic.Bool
}

func newLinkListener(dsn string, ping time.Duration, bf *bloomStore, neg *negCache, changes listenChanges, counts bloomCounts, log *slog.Logger) *linkListener {
	if bf != nil {
		bf.expectListener()
	}
	return &linkListener{
		dsn: dsn, bloom: bf, neg: neg, changes: changes, counts: counts, log: log,
		warns:        &sampledLog{log: log, every: 10 * time.Second},
		bad:          &sampledLog{log: log, every: 10 * time.Second},
		minReconnect: listenMinReconnect, maxReconnect: listenMaxReconnect,
		pingEvery: ping,
	}
}

// run listens until ctx ends.
func (l *linkListener) run(ctx context.Context) {
	connected := make(chan struct{}, 1)
	dialer := newListenDialer()
	// The callback runs on the goroutine that passes notifications on,
	// so what it does happens in order with them: a reconnection is
	// marked before any notification that follows it is handled.
	pl := pq.NewDialListener(dialer, l.dsn, l.minReconnect, l.maxReconnect, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventConnected:
			select {
			case connected <- struct{}{}:
			default:
			}
		case pq.ListenerEventReconnected:
			// lib/pq has run LISTEN again on the new connection before
			// it says so.
			l.up()
		case pq.ListenerEventDisconnected:
			l.down(err)
		case pq.ListenerEventConnectionAttemptFailed:
			if l.closing.Load() {
				return // the dialer refused: the listener is closing
			}
			l.warns.warn(context.Background(), "links listener: could not connect; trying again", redactDSN(err, l.dsn))
		}
	})
	// The pings end when the shutdown below says so, not with ctx: until
	// the dialer is shut, a ping's deadline is what frees a connection
	// that went silent.
	pctx, stopPings := context.WithCancel(context.WithoutCancel(ctx))
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		l.pings(pctx, pl, dialer)
	}()
	// The shutdown starts as ctx ends, whatever the loop below is doing:
	// it may be inside Listen, which waits for lib/pq's lock, or for a
	// connection that Postgres, being down, does not give. lib/pq holds
	// that lock while it connects and while a ping waits for its answer,
	// and Close waits for it; so the dialer first closes the connection
	// and makes no more. Notify is drained meanwhile: lib/pq's goroutine
	// may be waiting to pass a notification on, and the connection's
	// reader behind it, with a ping's answer (it closes Notify as it
	// ends).
	shutDone := make(chan struct{})
	context.AfterFunc(ctx, func() {
		defer close(shutDone)
		l.closing.Store(true)
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for range pl.Notify {
			}
		}()
		if err := dialer.shutDown(); err != nil {
			l.log.Error("links listener: close its connection", "err", err)
		}
		stopPings()
		<-pinging
		if err := pl.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			l.log.Error("links listener: close", "err", err)
		}
		<-drained
	})
	defer func() { <-shutDone }()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-connected:
			retry = l.listen(ctx, pl)
		case <-retry:
			retry = l.listen(ctx, pl)
		case n, ok := <-pl.Notify:
			if !ok {
				return
			}
			if n != nil { // nil follows a reconnection, marked by the callback
				l.handle(n.Channel, n.Extra)
			}
		}
	}
}

// pings pings Postgres on the listener's connection every l.pingEvery.
// Each time a ping has waited l.pingEvery unanswered, it closes the
// connection lib/pq is using or making; the ping ends once lib/pq is
// done with it (failed, then reconnected), or when ctx ends (run's
// shutDown closes what is left).
func (l *linkListener) pings(ctx context.Context, pl *pq.Listener, dialer *listenDialer) {
	tick := time.NewTicker(l.pingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		answer := make(chan error, 1)
		go func() { answer <- pl.Ping() }()
		wait := time.NewTimer(l.pingEvery)
	waiting:
		for {
			select {
			case err := <-answer:
				l.pinged(err)
				break waiting
			case <-wait.C:
				select {
				case err := <-answer: // both ready: the answer came
					l.pinged(err)
					break waiting
				default:
				}
				l.log.Warn("links listener: no answer to a ping; closing its connection to make a new one", "waited", l.pingEvery)
				if err := dialer.cut(); err != nil {
					l.log.Error("links listener: closing a silent connection", "err", err)
				}
				wait.Reset(l.pingEvery)
			case <-ctx.Done():
				wait.Stop()
				return
			}
		}
		wait.Stop()
	}
}

// pinged logs a ping's error. Between connections lib/pq answers at once
// that it has none; a connection that failed is being replaced, and the
// callback says so.
func (l *linkListener) pinged(err error) {
	if err != nil {
		l.warns.warn(context.Background(), "links listener: ping failed", redactDSN(err, l.dsn))
	}
}

// listenDialer dials the listener's connections and keeps the last one,
// so that a silent one can be closed under lib/pq. lib/pq holds its
// Listener's lock while it connects and runs LISTEN, so a connection that
// goes silent then blocks Ping and Close too: closing it, or ending a
// dial that hangs, is the only way out. Once shut, it dials no more.
type listenDialer struct {
	d        net.Dialer
	mu       sync.Mutex
	conn     net.Conn
	shut     bool
	shutDial context.Context // ends every dial in progress when shut
	endDials context.CancelFunc
	endDial  context.CancelFunc // the dial in progress, if any
}

func newListenDialer() *listenDialer {
	ctx, cancel := context.WithCancel(context.Background())
	return &listenDialer{shutDial: ctx, endDials: cancel}
}

func (d *listenDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d *listenDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return d.DialContext(ctx, network, address)
}

func (d *listenDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(d.shutDial, cancel)()
	defer cancel()
	d.mu.Lock()
	d.endDial = cancel
	d.mu.Unlock()
	c, err := d.d.DialContext(ctx, network, address)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endDial = nil
	if err != nil {
		return nil, err
	}
	if d.shut {
		c.Close() //nolint:errcheck // never used: the listener is closing
		return nil, net.ErrClosed
	}
	d.conn = c
	return c, nil
}

// cut ends the dial in progress, if any (a host that does not answer its
// SYN holds lib/pq's lock as long as the kernel's connect timeout), and
// closes the last connection dialed, once.
func (d *listenDialer) cut() error {
	d.mu.Lock()
	c := d.conn
	d.conn = nil
	if d.endDial != nil {
		d.endDial()
	}
	d.mu.Unlock()
	if c == nil {
		return nil
	}
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// shutDown ends a dial in progress, refuses new ones and closes the last
// connection: whatever lib/pq is waiting on, it stops waiting.
func (d *listenDialer) shutDown() error {
	d.mu.Lock()
	d.shut = true
	d.mu.Unlock()
	d.endDials()
	return d.cut()
}

// listen runs LISTEN on both channels once connected, and returns a
// channel that fires when it should be tried again (nil: it need not).
// The listener is up once both are in place.
func (l *linkListener) listen(ctx context.Context, pl *pq.Listener) <-chan time.Time {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	added := false
	for _, channel := range []string{linksChannel, changesChannel} {
		err := pl.Listen(channel)
		var pqErr *pq.Error
		switch {
		case err == nil:
			// lib/pq keeps the channel, and answers nil, also when the
			// connection went as it asked: then the connection was lost
			// (counted below, now or soon), and the reconnection listens
			// and says so (up, from the callback).
			added = true
			l.log.Info("links listener: listening", "channel", channel)
		case errors.Is(err, pq.ErrChannelAlreadyOpen):
			// asked before, and kept: lib/pq runs it on each new connection
		case errors.As(err, &pqErr):
			// Postgres refused it: lib/pq did not keep the channel.
			l.log.Error("links listener: LISTEN refused; trying again", "err", err, "channel", channel, "in", listenRetry)
			return time.After(listenRetry)
		default:
			if ctx.Err() == nil {
				l.log.Error("links listener: LISTEN failed", "err", err, "channel", channel)
			}
			return nil
		}
	}
	if added {
		l.mu.Lock()
		if l.lost == lost {
			l.markUp()
		} else if l.changes.purge != nil {
			// The connection was lost meanwhile, and its new one may
			// have been marked up (purged) before this LISTEN was in
			// place on it: purge again, now that it is.
			l.changes.purge()
		}
		l.mu.Unlock()
	}
	return nil
}

// up says the LISTEN is in place on a new connection.
func (l *linkListener) up() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.markUp()
}

// markUp: l.mu must be held. An edit made before this moment and after
// the last LISTEN was lost (or the start) was not heard: every code is
// forgotten in this process's memory.
func (l *linkListener) markUp() {
	if l.changes.purge != nil {
		l.changes.purge()
	}
	if l.neg != nil {
		l.neg.clearAll()
	}
	if l.bloom != nil {
		l.bloom.listening()
	}
}

func (l *linkListener) down(err error) {
	if l.closing.Load() {
		return
	}
	if err != nil {
		err = redactDSN(err, l.dsn)
	}
	l.log.Warn("links listener: connection lost; the bloom filter is not trusted until it is back and has read every code again",
		"err", err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost++
	if l.bloom != nil {
		l.bloom.listenDown()
	}
}

// handle acts on one notification's payload: codes separated by spaces,
// or "*".
func (l *linkListener) handle(channel, payload string) {
	if channel == changesChannel {
		l.handleChanges(payload)
		return
	}
	if payload == "*" {
		l.counts.notifiedAll.Inc()
		if l.neg != nil {
			l.neg.clearAll()
		}
		if l.bloom != nil {
			l.bloom.readAll()
		}
		return
	}
	codes := l.codesOf(channel, payload)
	if len(codes) == 0 {
		return
	}
	l.counts.notifiedCodes.Inc()
	if l.bloom != nil {
		l.bloom.add(codes, fromListener)
	}
	if l.neg != nil {
		for _, c := range codes {
			l.neg.forget(c)
		}
	}
}

// handleChanges acts on one message of links_changed: the codes a
// statement edited, or "*" for more than 10,000.
func (l *linkListener) handleChanges(payload string) {
	// Counted once acted on, as the subscriber counts (a test that
	// waits for the count finds the caches dropped).
	if payload == "*" {
		if l.changes.purge != nil {
			l.changes.purge()
		}
		l.counts.notifiedChangedAll.Inc()
		return
	}
	codes := l.codesOf(changesChannel, payload)
	if len(codes) == 0 {
		return
	}
	if l.changes.drop != nil {
		for _, c := range codes {
			l.changes.drop(c)
		}
	}
	l.counts.notifiedChanged.Inc()
}

// codesOf is a message's codes, separated by spaces; what is not a code
// is counted and logged, and left out.
func (l *linkListener) codesOf(channel, payload string) []string {
	parts := strings.Split(payload, " ")
	codes := make([]string, 0, len(parts))
	for _, c := range parts {
		if validCode(c) {
			codes = append(codes, c)
		}
	}
	if len(codes) < len(parts) || len(codes) == 0 {
		l.counts.notifiedBad.Inc()
		l.bad.warn(context.Background(), "links listener: message ignored in part",
			fmt.Errorf("%s: %q: %d of %d parts are not codes", channel, clip(payload), len(parts)-len(codes), len(parts)))
	}
	return codes
}
