package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// Step 35: after a Redis failover.

// sentinelPair is a Redis master, its replica and a Sentinel watching
// them (master name "m"), real processes.
type sentinelPair struct {
	oldAddr, newAddr, sentAddr string
	newPort                    int
	oldMaster, newMaster       *redis.Client
	sent                       *redis.SentinelClient
	bin, dir                   string // redis-server, and where its files go
}

// startSentinelPair starts the three, with masterArgs added to the
// master's arguments, and waits until the Sentinel sees the replica in
// sync (it can fail over only to a replica it knows and sees in sync).
func startSentinelPair(t *testing.T, masterArgs []string) *sentinelPair {
	t.Helper()
	sentinelBin, serverBin := sentinelTestBins(t)
	dir := t.TempDir()
	plain := plainRedisArgs(dir)
	oldPort := startRedisProcess(t, "redis-master", serverBin, dir, func(port int) []string {
		return append(plain(port), masterArgs...)
	})
	newPort := startRedisProcess(t, "redis-replica", serverBin, dir, func(port int) []string {
		return append(plain(port), "--replicaof", "127.0.0.1", strconv.Itoa(oldPort))
	})
	sentPort := startRedisProcess(t, "redis-sentinel", sentinelBin, dir, func(port int) []string {
		// A Sentinel rewrites its config file, so each try gets its own.
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor m 127.0.0.1 %d 1\nsentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 10000\n", port, dir, oldPort)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{conf}
	})
	p := &sentinelPair{
		oldAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(oldPort)),
		newAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(newPort)),
		sentAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(sentPort)),
		newPort:  newPort,
		bin:      serverBin,
		dir:      dir,
	}
	direct := func(addr string) *redis.Client {
		c := redis.NewClient(plainRedis(addr))
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		})
		return c
	}
	p.oldMaster, p.newMaster = direct(p.oldAddr), direct(p.newAddr)
	p.sent = redis.NewSentinelClient(plainRedis(p.sentAddr))
	t.Cleanup(func() {
		if err := p.sent.Close(); err != nil {
			t.Error(err)
		}
	})
	waitFor(t, "the Sentinel sees the replica", func(ctx context.Context) (bool, error) {
		reps, err := p.sent.Replicas(ctx, "m").Result()
		if err != nil {
			return false, err
		}
		for _, r := range reps {
			if r["port"] == strconv.Itoa(newPort) && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return true, nil
			}
		}
		return false, fmt.Errorf("replicas %v", reps)
	})
	return p
}

// failOver has the Sentinel fail the master over to the replica, and
// waits until it names the replica as master.
func (p *sentinelPair) failOver(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.sent.Failover(ctx, "m").Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	waitFor(t, "the Sentinel names the replica as master", func(ctx context.Context) (bool, error) {
		addr, err := p.sent.GetMasterAddrByName(ctx, "m").Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(p.newPort), err
	})
}

// addReplica starts a replica of the new master, and waits until the
// new master counts it.
func (p *sentinelPair) addReplica(t *testing.T) {
	t.Helper()
	startRedisProcess(t, "redis-replica-2", p.bin, p.dir, func(port int) []string {
		return append(plainRedisArgs(p.dir)(port), "--replicaof", "127.0.0.1", strconv.Itoa(p.newPort))
	})
	waitFor(t, "the new master counts a replica", func(ctx context.Context) (bool, error) {
		info, err := p.newMaster.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1"), err
	})
}

// open is the service's client through the Sentinel, closed when the
// test ends.
func (p *sentinelPair) open(t *testing.T) *guardedRedis {
	t.Helper()
	rdb := openRedis(context.Background(), &redis.Options{}, sentinels{master: "m", addrs: []string{p.sentAddr}}, testRedisTimeout, 1, slog.New(slog.DiscardHandler)) // 1: REDIS_WAIT_REPLICAS's default with Sentinels
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Error(err)
		}
	})
	return rdb
}

// writesLandOnNewMaster waits until a write through rdb lands on the new
// master: the client has heard of the failover.
func (p *sentinelPair) writesLandOnNewMaster(t *testing.T, rdb *guardedRedis, key string) {
	t.Helper()
	n := 0
	waitFor(t, "a write through the client lands on the new master", func(ctx context.Context) (bool, error) {
		n++
		v := strconv.Itoa(n)
		if err := rdb.Set(ctx, key, v, 0).Err(); err != nil {
			return false, err
		}
		got, err := p.newMaster.Get(ctx, key).Result()
		return err == nil && got == v, err
	})
}

// TestFeedAndInvalidationsFollowAFailoverWhileTheOldMasterRuns: the
// Sentinel fails the master over while the old master keeps running as a
// master (it cannot be made a replica: its REPLICAOF is renamed, as when
// it is cut off from the Sentinels but not from the instances). go-redis
// moves each instance's client to the new master; the subscriptions stay
// on the old one. Creates made on the new master must not leave an
// instance answering 404 while it trusts its filter, and both
// subscriptions (the code feed's and the invalidations') must move to
// the new master. Until step 35 the feed renewed its registration from
// PINGs on its old subscription, through its client on the new master,
// so creates there took it for caught up; and neither subscription ever
// moved while the old master ran.
func TestFeedAndInvalidationsFollowAFailoverWhileTheOldMasterRuns(t *testing.T) {
	t.Parallel()
	hidden := "renamed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p := startSentinelPair(t, []string{"--rename-command", "REPLICAOF", hidden + "-1", "--rename-command", "SLAVEOF", hidden + "-2"})
	const prefix = "failover:"
	ra, rb := p.open(t), p.open(t)
	a := newTestFeed(t, ra, prefix, defaultBloomAckTimeout)
	b := newTestFeed(t, rb, prefix, defaultBloomAckTimeout)
	m := newMetrics(prometheus.NewRegistry())
	var heard sync.Map
	sub := startSubscriber(ra, prefix+invalidationChannel, []func(string){func(code string) { heard.Store(code, true) }}, nil, nil, nil, lagBound,
		m.invalidationCounts(), discardLog)
	t.Cleanup(func() {
		if err := sub.close(); err != nil {
			t.Error(err)
		}
	})
	waitTrusted(t, a.tb.bloomStore, true)
	waitTrusted(t, b.tb.bloomStore, true)

	p.failOver(t)
	p.writesLandOnNewMaster(t, ra, "a-moved")
	p.writesLandOnNewMaster(t, rb, "b-moved")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if role, err := p.oldMaster.Do(ctx, "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("ROLE of the old master = %v, %v; want master still (the test needs it running as one)", role, err)
	}
	// The new master gets a replica of its own: until then no write there
	// can be WAITed for, and no instance registers.
	p.addReplica(t)

	// Each create, made on the new master, returns only when instance a
	// has the code or does not trust its filter, unless instance b's own
	// subscription is down (below); until both feeds are subscribed on
	// the new master again, and a trusts its filter. Each code is saved
	// first in the database a reads, as a create does: a feed subscribed
	// again reads what it missed from there.
	creates := 0
	create := func(ctx context.Context) string {
		code := newCode()
		if err := a.tb.pg.Save(ctx, code, NewLink{URL: "https://go.dev/" + code}); err != nil {
			t.Fatal(err)
		}
		b.announce(ctx, code)
		creates++
		return code
	}
	onNew := func(ctx context.Context, channel string) (int64, error) {
		n, err := p.newMaster.PubSubNumSub(ctx, channel).Result()
		return n[channel], err
	}
	// Instance b, the creator, moves too: until its own subscription is
	// up again on the new master, no acknowledgement can reach it. Until
	// step 43 its create then answered at once (step 34's exception), and
	// in CI's first try of step 42 two creates answered before instance a
	// had their codes; until step 43 the test let such creates pass
	// (docs/42). Since step 43 such a create waits for a's renewal from a
	// later probe, and every create made here is checked.
	waitFor(t, "both feeds subscribed on the new master, and instance a trusted", func(ctx context.Context) (bool, error) {
		code := create(ctx)
		if !a.tb.check(code) {
			t.Fatalf("create %d: instance a would answer 404 for %s, made on the new master, when the create returned (instance b listening: %v)",
				creates, code, b.reg.listening())
		}
		na, err := onNew(ctx, a.probes)
		if err != nil {
			return false, err
		}
		nb, err := onNew(ctx, b.probes)
		return err == nil && na == 1 && nb == 1 && b.reg.listening() && a.tb.stats().trusted, err
	})
	for i := range 5 {
		timeouts := testutil.ToFloat64(b.tb.m.bloom.ackTimeouts)
		code := create(context.Background())
		if !a.has(code) {
			t.Errorf("create %d after the move: instance a does not have %s when the create returns (instance b listening: %v, its creates answered before every acknowledgement: +%v)",
				i, code, b.reg.listening(), testutil.ToFloat64(b.tb.m.bloom.ackTimeouts)-timeouts)
		}
	}
	t.Logf("%d creates until both feeds were back on the new master; %v of all %d made while instance b was not listening",
		creates-5, testutil.ToFloat64(b.tb.m.bloom.ackUnheard), creates)

	// The invalidations: a change published on the new master reaches
	// instance a's subscriber once it has moved.
	var published []string
	waitFor(t, "instance a's invalidations heard on the new master", func(ctx context.Context) (bool, error) {
		code := newCode()
		if err := p.newMaster.Publish(ctx, prefix+invalidationChannel, code).Err(); err != nil {
			return false, err
		}
		published = append(published, code)
		for _, c := range published {
			if _, ok := heard.Load(c); ok {
				return true, nil
			}
		}
		return false, nil
	})
	if got := testutil.ToFloat64(m.inval.WithLabelValues("resubscribed")); got < 1 {
		t.Errorf(`invalidations_total{result="resubscribed"} = %v, want at least 1`, got)
	}
}

// replicaCount waits until master counts n replicas, each online.
func replicaCount(t *testing.T, master *redis.Client, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the master counts %d replicas", n), func(ctx context.Context) (bool, error) {
		info, err := master.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, fmt.Sprintf("connected_slaves:%d\r\n", n)) &&
			strings.Count(info, "state=online") == n, err
	})
}

// TestChangeCountsOnlyOnceAReplicaHasIt: with REDIS_WAIT_REPLICAS=1, an
// edit is told (counted sent, forgotten) only once a replica has its
// write: when Change returns, the replica holds the new value. With the
// replica gone the edit is kept, this instance reads the code from the
// store meanwhile, and a retry tells it once a replica is back. Until
// step 35 nothing waited: a Sentinel failover could promote a replica
// that never had the change, and every instance served the link as it
// was, from the new master, for up to CACHE_TTL.
func TestChangeCountsOnlyOnceAReplicaHasIt(t *testing.T) {
	t.Parallel()
	serverBin := findRedisServer()
	if serverBin == "" {
		t.Fatal("redis-server is not installed")
	}
	dir := t.TempDir()
	masterPort := startRedisProcess(t, "redis-master", serverBin, dir, plainRedisArgs(dir))
	replicaPort := startRedisProcess(t, "redis-replica", serverBin, dir, func(port int) []string {
		return append(plainRedisArgs(dir)(port), "--replicaof", "127.0.0.1", strconv.Itoa(masterPort))
	})
	masterOpts := plainRedis(net.JoinHostPort("127.0.0.1", strconv.Itoa(masterPort)))
	master, replica := lookInto(t, masterOpts), lookInto(t, plainRedis(net.JoinHostPort("127.0.0.1", strconv.Itoa(replicaPort))))
	replicaCount(t, master, 1)

	rdb := openTestRedis(t, masterOpts, testRedisTimeout, discardLog)
	rdb.waitReplicas = 1
	mem := newMemoryStore()
	const prefix = "wait:"
	c, sent, failed := newTellingCache(t, mem, rdb, prefix)
	ctx := context.Background()
	hash := editOf(t, mem, "wait001", "https://go.dev/v1")
	key := prefix + "wait001"
	if _, err := c.Change(ctx, "wait001", hash, LinkChange{URL: "https://go.dev/v2"}); err != nil {
		t.Fatal(err)
	}
	if sent.get() != 1 || failed.get() != 0 {
		t.Fatalf("with a replica: sent %d, failed %d; want 1 and 0", sent.get(), failed.get())
	}
	want := formatCacheValue(Target{URL: "https://go.dev/v2", Status: 302, Version: 2})
	if v := replica.Get(ctx, key).Val(); sealedBody(key, v) != want {
		t.Errorf("when the edit returned, the replica held %q; want the edit, sealed: %q", v, want)
	}

	// The replica leaves (as it does when it is promoted, or cut off).
	if err := replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	replicaCount(t, master, 0)
	if _, err := c.Change(ctx, "wait001", hash, LinkChange{URL: "https://go.dev/v3"}); err != nil {
		t.Fatalf("edit with no replica: %v", err)
	}
	if sent.get() != 1 || failed.get() != 1 {
		t.Fatalf("with no replica: sent %d, failed %d; want 1 and 1: the edit is on the master alone, and a failover could lose it", sent.get(), failed.get())
	}
	if !c.isPending("wait001") {
		t.Error("the edit that no replica has is not kept for a retry")
	}
	if got, err := c.Lookup(ctx, "wait001"); err != nil || got.URL != "https://go.dev/v3" {
		t.Errorf("lookup while the edit is kept = %q, %v; want v3, from the store", got.URL, err)
	}
	c.retryPending(ctx)
	if sent.get() != 1 || failed.get() != 2 {
		t.Errorf("a retry with no replica: sent %d, failed %d; want 1 and 2", sent.get(), failed.get())
	}

	// A replica is back: the next retry tells it.
	if err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(masterPort)).Err(); err != nil {
		t.Fatal(err)
	}
	replicaCount(t, master, 1)
	waitFor(t, "a retry tells the edit", func(ctx context.Context) (bool, error) {
		c.retryPending(ctx)
		return sent.get() == 2, nil
	})
	want = formatCacheValue(Target{URL: "https://go.dev/v3", Status: 302, Version: 3})
	if v := replica.Get(ctx, key).Val(); sealedBody(key, v) != want {
		t.Errorf("once told, the replica holds %q; want v3, sealed: %q", v, want)
	}
	if c.isPending("wait001") {
		t.Error("the edit is still kept once told")
	}
}

// TestResubscriptionTellsRecentChangesAgain: a change told, then lost
// (as a failover loses what the old master took and no replica had: here
// the test writes the old value back), is told again when the subscriber
// subscribes again (here, Redis closes its connection, as a Sentinel does
// to the old master's clients when it makes it a replica). Until step 35
// Redis kept the old link for CACHE_TTL.
func TestResubscriptionTellsRecentChangesAgain(t *testing.T) {
	t.Parallel()
	opts := ownRedis(t, "redis")
	look := lookInto(t, opts)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	mem := newMemoryStore()
	const prefix = "resend:"
	c, sent, _ := newTellingCache(t, mem, rdb, prefix)
	// Each subscription confirmed purges: counted, so that the edit comes
	// after the first (which tells again what changed before it).
	var subscribed atomic.Int64
	sub := startSubscriber(rdb, c.channel, nil, []func(){func() { subscribed.Add(1) }}, c.retryPending, c.resendRecent, time.Hour, (*metrics)(nil).invalidationCounts(), discardLog)
	t.Cleanup(func() {
		if err := sub.close(); err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, "the subscriber's first subscription", func() bool { return subscribed.Load() == 1 })
	ctx := context.Background()
	hash := editOf(t, mem, "rsnd001", "https://go.dev/v1")
	if _, err := c.Change(ctx, "rsnd001", hash, LinkChange{URL: "https://go.dev/v2"}); err != nil {
		t.Fatal(err)
	}
	if sent.get() != 1 {
		t.Fatalf("sent %d, want 1", sent.get())
	}
	key := prefix + "rsnd001"
	if err := look.Set(ctx, key, cachedValue(key, "https://go.dev/v1"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := look.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	want := formatCacheValue(Target{URL: "https://go.dev/v2", Status: 302, Version: 2})
	waitFor(t, "the change told again after the subscriber subscribed again", func(ctx context.Context) (bool, error) {
		v, err := look.Get(ctx, key).Result()
		return err == nil && sealedBody(key, v) == want, err
	})
	// The tell is counted once Redis has answered it, a moment after the
	// value is there to read: until step 43 the test read the count at
	// once, and in step 43's rehearsal (GOMAXPROCS=8, beside the pool)
	// it failed, by this race as we read it (docs/43).
	waitUntil(t, "the second tell counted", func() bool { return sent.get() >= 2 })
	if sent.get() != 2 {
		t.Errorf("sent %d, want 2: the change told once more", sent.get())
	}
}

// TestRegistrationNeedsItsProbe: a registration is written only on a
// server that holds the key of the probe it comes from, and the key is
// used up: so a client that moved to a new master between a probe and
// the renewal cannot carry a renewal there (the new master never took
// that probe, nor delivered what was published before it to this
// instance's subscription).
func TestRegistrationNeedsItsProbe(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	look := lookInto(t, opts)
	f := newCodeFeed(rdb, testAuth, prefix, defaultBloomAckTimeout, nil, nil, (*metrics)(nil).bloomCounts(), discardLog)
	ctx := context.Background()
	register := func(nonce string) int {
		t.Helper()
		n, err := liveRegisterScript.Run(ctx, rdb.Client, []string{f.live, f.probeKey(nonce)},
			f.id, f.registration(time.Now().Add(liveTTL)), liveMaxBytes, liveMaxFields).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := register("NOPROBEWASEVERSENTWITHTHIS"); got != -1 {
		t.Errorf("a renewal from a probe this server never took = %d, want -1 (refused)", got)
	}
	if n, err := look.HLen(ctx, f.live).Result(); err != nil || n != 0 {
		t.Fatalf("registrations after a refused renewal: %d, %v; want none", n, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	f.reg.sessionUp = true // (no subscription here: the probe reaches nobody)
	if n, err := f.probe(pctx); err != nil || n != 0 {
		t.Fatalf("probe: %d receivers, %v; want 0, nil", n, err)
	}
	nonce := f.reg.pings[0].payload
	if got := register(nonce); got != 0 {
		t.Errorf("a renewal from a probe this server took = %d, want 0 (written)", got)
	}
	if n, err := look.HLen(ctx, f.live).Result(); err != nil || n != 1 {
		t.Errorf("registrations after it: %d, %v; want 1", n, err)
	}
	if got := register(nonce); got != -1 {
		t.Errorf("a second renewal from the same probe = %d, want -1: the probe's key is used up", got)
	}
}

// BenchmarkChangeWait: an edit told to a master with one replica, on
// loopback, with REDIS_WAIT_REPLICAS 0 and 1 (a memory store behind, so
// that the difference is Redis's: the WAIT's round trip and the
// replica's acknowledgement). With -count, Go runs each of the two
// that many times in a row, then the other: two blocks, not interleaved
// rounds.
func BenchmarkChangeWait(b *testing.B) {
	serverBin := findRedisServer()
	if serverBin == "" {
		b.Fatal("redis-server is not installed")
	}
	dir := b.TempDir()
	masterPort := startRedisProcess(b, "redis-master", serverBin, dir, plainRedisArgs(dir))
	startRedisProcess(b, "redis-replica", serverBin, dir, func(port int) []string {
		return append(plainRedisArgs(dir)(port), "--replicaof", "127.0.0.1", strconv.Itoa(masterPort))
	})
	opts := plainRedis(net.JoinHostPort("127.0.0.1", strconv.Itoa(masterPort)))
	for _, n := range []int{0, 1} {
		b.Run(fmt.Sprintf("wait=%d", n), func(b *testing.B) {
			rdb := openRedis(context.Background(), opts, sentinels{}, testRedisTimeout, n, discardLog)
			defer func() {
				if err := rdb.Close(); err != nil {
					b.Error(err)
				}
			}()
			mem := newMemoryStore()
			c := newCachedStore(mem, rdb, cacheOptions{auth: testAuth, ttl: time.Minute, prefix: "bench:", channel: "bench:changes", counts: (*metrics)(nil).cacheResults("redis")}, discardLog)
			ctx := context.Background()
			hash := []byte("0123456789abcdef0123456789abcdef")
			if err := mem.Save(ctx, "bench01", NewLink{URL: "https://go.dev/0", TokenHash: hash}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := c.Change(ctx, "bench01", hash, LinkChange{URL: "https://go.dev/" + strconv.Itoa(i)}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if c.isPending("bench01") {
				b.Fatal("the last change was not told")
			}
		})
	}
}

// TestOwnRecentChangeIsReadFromThePrimary: a change Redis took and a
// failover then lost (the new master holds the link as it was, a genuine
// value, sealed and in date) is not served by the instance that made it
// while it is recent: its lookups of the code go to the primary until
// recentWindow has passed. Step 36's history checker on three hosts saw
// the instance serve the old link a second after its edit's 200, from
// the new master, before its subscriber moved there and told the change
// again (docs/36).
func TestOwnRecentChangeIsReadFromThePrimary(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := openTestRedis(t, opts, testRedisTimeout, discardLog)
	look := lookInto(t, opts)
	mem := newMemoryStore()
	c, sent, _ := newTellingCache(t, mem, rdb, prefix)
	ctx := context.Background()
	hash := editOf(t, mem, "own0001", "https://go.dev/v1")
	editOf(t, mem, "other01", "https://go.dev/other")
	if _, err := c.Change(ctx, "own0001", hash, LinkChange{URL: "https://go.dev/v2"}); err != nil {
		t.Fatal(err)
	}
	if sent.get() != 1 {
		t.Fatalf("sent %d, want 1: the change told", sent.get())
	}
	// The failover: the new master has the link as it was.
	for code, url := range map[string]string{"own0001": "https://go.dev/v1", "other01": "https://go.dev/stale"} {
		if err := look.Set(ctx, prefix+code, cachedValue(prefix+code, url), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lookup := func(code string) string {
		t.Helper()
		got, err := c.Lookup(ctx, code)
		if err != nil {
			t.Fatal(err)
		}
		return got.URL
	}
	if got := lookup("own0001"); got != "https://go.dev/v2" {
		t.Errorf("the instance that changed it served %s, want https://go.dev/v2 (the primary's)", got)
	}
	// A code not changed here is read from Redis, whatever it holds: the
	// other instances' bound is for the subscriber to keep.
	if got := lookup("other01"); got != "https://go.dev/stale" {
		t.Errorf("a code not changed here: %s, want Redis's https://go.dev/stale", got)
	}
	// Past the window, Redis again (the change's time moved back).
	c.recent.mu.Lock()
	c.recent.at["own0001"] = time.Now().Add(-recentWindow - time.Second)
	c.recent.mu.Unlock()
	if got := lookup("own0001"); got != "https://go.dev/v1" {
		t.Errorf("past recentWindow: %s, want Redis's https://go.dev/v1", got)
	}
	// Once the window has passed for every code, they are forgotten, and
	// the check is one atomic load again.
	c.recent.mu.Lock()
	c.recent.until = time.Now().Add(-time.Second)
	c.recent.mu.Unlock()
	if c.isRecent("own0001") || c.recent.n.Load() != 0 {
		t.Errorf("past every code's window: recent %v, %d of them; want forgotten", c.recent.at, c.recent.n.Load())
	}
}

// BenchmarkIsRecent: what the check costs a lookup that reaches the
// Redis layer (a local miss): nothing changed here lately (one atomic
// load), or a change within recentWindow (a clock read and a map read
// under a read lock), alone and from every core at once (-parallel).
// docs/36 runs it in rounds, each sub-benchmark once a round.
func BenchmarkIsRecent(b *testing.B) {
	ctx := context.Background()
	quiet := &cachedStore{}
	busy := &cachedStore{}
	busy.noteChanged(ctx, "chg0001")
	for _, c := range []struct {
		name string
		c    *cachedStore
	}{{"nothing-changed-lately", quiet}, {"another-code-changed-lately", busy}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if c.c.isRecent("look001") {
					b.Fatal("look001 was never changed")
				}
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if c.c.isRecent("look001") {
						panic("look001 was never changed")
					}
				}
			})
		})
	}
}
