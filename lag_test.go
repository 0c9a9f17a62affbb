package main

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countObserver counts what it observes.
type countObserver struct{ n atomic.Int64 }

func (o *countObserver) Observe(float64) { o.n.Add(1) }

// behindRig is a subscriber with the real lagBound over a local cache
// that holds held001 at v1, and a drop func that can be slowed.
type behindRig struct {
	channel             string
	local               *localCache
	mem                 *memoryStore
	late, purges, bad   testCount
	dropped             testCount
	lag                 countObserver
	slow                atomic.Int64 // how long each code takes to handle
	handled             atomic.Bool  // held001's code
	sub                 *subscriber
	probeChannelPattern string
}

func newBehindRig(t *testing.T) *behindRig {
	t.Helper()
	opts, prefix := testRedis(t)
	r := &behindRig{channel: prefix + invalidationChannel, mem: newMemoryStore()}
	r.probeChannelPattern = r.channel + ":probe:*"
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	editOf(t, r.mem, "held001", "https://go.dev/v1")
	r.local, _ = newTestLocalCache(t, r.mem, 1<<20, time.Hour)
	slow := func(code string) {
		if code == "held001" {
			r.handled.Store(true)
		}
		if d := time.Duration(r.slow.Load()); d > 0 {
			time.Sleep(d)
		}
	}
	r.sub = startSubscriber(rdb, r.channel, []func(string){slow, r.local.drop}, []func(){r.local.purge}, nil, nil, lagBound,
		invalidationCounts{sent: noCount{}, sendFailed: noCount{}, received: noCount{}, bad: &r.bad, dropped: &r.dropped,
			purges: &r.purges, late: &r.late, lag: &r.lag}, discardLog)
	t.Cleanup(func() {
		if err := r.sub.close(); err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, "the first subscription", func() bool { return r.purges.get() >= 1 })
	if got, err := r.local.Lookup(context.Background(), "held001"); err != nil || got.URL != "https://go.dev/v1" {
		t.Fatalf("lookup = %q, %v", got.URL, err)
	}
	return r
}

// TestProbesComeBack: a subscriber that keeps up has its probes back, and
// times them; none is late.
func TestProbesComeBack(t *testing.T) {
	r := newBehindRig(t)
	waitUntil(t, "three probes back", func() bool { return r.lag.n.Load() >= 3 })
	if r.bad.get() != 0 {
		t.Errorf("bad %d, want 0: a probe of its own was not recognised", r.bad.get())
	}
}

// TestSubscriberBehindPurges: a subscriber that handles codes more slowly
// than they come (as one starved of CPU does) falls behind, and no message
// is dropped: the backlog waits in go-redis's channel and Redis's buffers,
// and go-redis drops only what finds no room for a second. Its probes come
// back late, and the local cache is purged, so a link changed meanwhile is
// served as it is now. On step 32's code nothing noticed, and the old link
// was served until its code's turn came (here, never: the codes keep
// coming). Someone who can publish to Redis copies each probe it sees and
// sends well-formed nonces of its own all along: none hides the backlog.
func TestSubscriberBehindPurges(t *testing.T) {
	opts, _ := testRedis(t)
	r := newBehindRig(t)
	ctx := context.Background()
	look, spy := lookInto(t, opts), lookInto(t, opts)

	// The forger: every probe it sees, published again at once.
	ps := spy.PSubscribe(ctx, r.probeChannelPattern)
	if _, err := ps.Receive(ctx); err != nil { // the PSUBSCRIBE's confirmation
		t.Fatal(err)
	}
	var copied atomic.Int64
	forging := make(chan struct{})
	go func() {
		defer close(forging)
		seen := map[string]bool{} // its own copies come back to it too
		for msg := range ps.Channel() {
			if seen[msg.Payload] {
				continue
			}
			seen[msg.Payload] = true
			if err := look.Publish(ctx, msg.Channel, msg.Payload).Err(); err != nil {
				return // the test is ending
			}
			copied.Add(1)
		}
	}()
	// The stream: codes, each with a well-formed nonce of the forger's,
	// faster than the subscriber handles them (slow, below), for 30 s at
	// most. Its pause and slow's sleep make rates, not waits for an
	// event: 100 codes a second against 20, and on a machine four times
	// slower or faster the stream still outruns the handling, which the
	// sleep bounds from below.
	stop, streaming := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(streaming)
		for range 3000 {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if err := look.Publish(ctx, r.channel, "fill001").Err(); err != nil {
				return
			}
			if err := look.Publish(ctx, r.sub.lag.channel, rand.Text()).Err(); err != nil {
				return
			}
		}
	}()
	var stopped sync.Once
	stopStream := func() { stopped.Do(func() { close(stop); <-streaming }) }
	t.Cleanup(func() {
		stopStream()
		if err := ps.Close(); err != nil {
			t.Error(err)
		}
		<-forging
	})

	r.slow.Store(int64(50 * time.Millisecond)) // 20 codes a second, of 100
	waitUntil(t, "the subscriber behind", func() bool { return r.late.get() > 0 })
	// The link changes behind the cache, as an edit whose code is
	// published now, behind a backlog of seconds.
	r.mem.mu.Lock()
	r.mem.links["held001"].URL = "https://go.dev/v2"
	r.mem.mu.Unlock()
	if err := look.Publish(ctx, r.channel, "held001").Err(); err != nil {
		t.Fatal(err)
	}
	late := r.late.get()
	waitUntil(t, "a late probe after the change", func() bool { return r.late.get() > late })
	if got, err := r.local.Lookup(ctx, "held001"); err != nil || got.URL != "https://go.dev/v2" {
		t.Errorf("lookup while the subscriber is behind = %q, %v; want v2 (the cache purged)", got.URL, err)
	}
	if r.handled.Load() {
		t.Error("held001's code was handled before the lookup: the backlog was too short to test the probes")
	}
	if copied.Load() == 0 {
		t.Error("the forger copied no probe: the probes were not published where a spy sees them")
	}
	stopStream()
	r.slow.Store(0)
	// Caught up: the probes come back in time again.
	lag := r.lag.n.Load()
	waitUntil(t, "a probe back after the stream", func() bool { return r.lag.n.Load() > lag })
	if d := r.dropped.get(); d != 0 {
		t.Errorf("dropped %d: the purges may have come from a dropped message, not from the probes", d)
	}
	if r.bad.get() != 0 {
		t.Errorf("bad %d: a copied probe or a well-formed nonce was counted bad, want ignored", r.bad.get())
	}
}
