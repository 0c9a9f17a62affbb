package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// testRedis returns options for the Redis that TEST_REDIS_URL names and a key
// prefix of the calling test's own; keys under it are deleted when the test
// ends. Unset, the test is skipped, unless CI is set. Set but unreachable,
// the test fails.
func testRedis(t *testing.T) (*redis.Options, string) {
	t.Helper()
	raw := os.Getenv("TEST_REDIS_URL")
	if raw == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("TEST_REDIS_URL is not set, and CI must run every test against Redis")
		}
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs Redis (e.g. TEST_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("TEST_REDIS_URL is set but Redis does not answer: %v", err)
	}
	prefix := "test:" + rand.Text()[:12] + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
				t.Errorf("clean up redis key %s: %v", iter.Val(), err)
			}
		}
		if err := iter.Err(); err != nil {
			t.Errorf("clean up redis keys %s*: %v", prefix, err)
		}
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	return opts, prefix
}

// tcpProxy forwards TCP connections to a real server until cut, which
// closes the listener and every connection: the server is "gone" as far as
// the client can tell, while the real one goes on serving other tests.
// stall makes it a server that is there and does not answer: connections
// are accepted and bytes taken, and nothing comes back, as from a process
// frozen with SIGSTOP.
type tcpProxy struct {
	ln       net.Listener
	target   string
	moved    atomic.Pointer[string] // see retarget
	stalled  atomic.Bool
	closed   atomic.Bool
	refused  atomic.Bool  // see refuse
	delay    atomic.Int64 // see slow
	mu       sync.Mutex
	conns    []net.Conn
	hushed   sync.Map     // see hush: the proxy's local port to the server → true
	accepted atomic.Int64 // connections taken, refused ones not counted
	asked    atomic.Int64 // reads from clients passed on that hold the word asked for (see ask)
	word     atomic.Pointer[[]byte]
}

// ask makes asked count, from now on, the reads from clients that hold
// word: the writes of a command, as the server takes them in.
func (p *tcpProxy) ask(word string) { b := []byte(word); p.word.Store(&b) }

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // cut
		}
		p.mu.Lock()
		if p.refused.Load() { // under mu: refuse cannot miss this one
			p.mu.Unlock()
			in.Close() //nolint:errcheck // the client sees the closed connection, which is the point
			continue
		}
		p.conns = append(p.conns, in)
		p.mu.Unlock()
		p.accepted.Add(1)
		if p.stalled.Load() {
			continue // held open, never answered
		}
		target := p.target
		if m := p.moved.Load(); m != nil {
			target = *m
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close() //nolint:errcheck // the client sees the closed connection, which is the point
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, out)
		p.mu.Unlock()
		port := out.LocalAddr().(*net.TCPAddr).Port
		go p.pump(in, out, port, nil)
		go p.pump(out, in, port, &p.asked)
	}
}

// pump copies src to dst until either side fails, then closes both; while
// the proxy is stalled it holds what it read, and once the connection is
// hushed it drops it; each read passed on that holds p.word is counted in
// reads, if given.
// An error here is a connection ending, which is what the proxy exists to
// do.
func (p *tcpProxy) pump(dst, src net.Conn, port int, reads *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if d := time.Duration(p.delay.Load()); n > 0 && d > 0 {
			time.Sleep(d) // a slow network: see slow
		}
		for p.stalled.Load() && !p.closed.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if _, hushed := p.hushed.Load(port); hushed {
			n = 0
		}
		if n > 0 && !p.closed.Load() {
			if w := p.word.Load(); reads != nil && w != nil && bytes.Contains(buf[:n], *w) {
				reads.Add(1)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil || p.closed.Load() {
			dst.Close() //nolint:errcheck // see above
			src.Close() //nolint:errcheck // see above
			return
		}
	}
}

func (p *tcpProxy) stall() { p.stalled.Store(true) }

// hush makes one open connection silent, both ways, without closing it:
// the one whose end at the server is the proxy's local port (the
// client_port Postgres shows). A peer gone without a word looks so: what
// is sent is taken and never answered. Others, and new ones, still pass.
func (p *tcpProxy) hush(port int) { p.hushed.Store(port, true) }

// slow holds what the proxy reads for d before passing it on, each way:
// a Redis that answers, every time, at least 2d after it was asked.
func (p *tcpProxy) slow(d time.Duration) { p.delay.Store(int64(d)) }

// drop closes every connection open now, as a network failure would; new
// connections are still accepted.
func (p *tcpProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close() //nolint:errcheck // a connection closed twice is expected here
	}
	p.conns = nil
}

// retarget sends new connections to addr, and closes every connection
// open now: the server behind the proxy's address has changed, as a
// client that moves to a new master sees it (step 43).
func (p *tcpProxy) retarget(addr string) {
	p.moved.Store(&addr)
	p.drop()
}

// refuse closes every connection open now and each new one as it comes,
// until restore: the server is gone, then back at the same address.
func (p *tcpProxy) refuse() {
	p.mu.Lock()
	p.refused.Store(true)
	p.mu.Unlock()
	p.drop()
}

func (p *tcpProxy) restore() { p.refused.Store(false) }

func (p *tcpProxy) cut() {
	p.closed.Store(true)
	p.ln.Close() //nolint:errcheck // closing twice (cut, then cleanup) is expected
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close() //nolint:errcheck // as above
	}
	p.conns = nil
}

// startBlackHole listens on a port and accepts connections but never reads
// or writes: a server that is there and does not answer.
func startBlackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close() //nolint:errcheck // the test is over; closing is all that is left
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close() //nolint:errcheck // as above
		}
	})
	return ln.Addr().String()
}

// testRedisTimeout is the Redis timeout of tests that are not about
// timeouts: generous, so that a loaded machine does not turn a slow
// answer into a failure the test did not ask for.
const testRedisTimeout = 5 * time.Second

// openTestRedis opens a guardedRedis on opts, closed when the test ends.
func openTestRedis(t *testing.T, opts *redis.Options, timeout time.Duration, log *slog.Logger) *guardedRedis {
	t.Helper()
	rdb := openRedis(context.Background(), opts, sentinels{}, timeout, 0, log)
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	return rdb
}

// testClock is a clock that moves only when the test moves it, for the
// breaker, the local rate limit and the local cache.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(int64(time.Hour)) // any start will do; not 0, to catch a clock mistaken for "unset"
	return c
}

func (c *testClock) now() int64                { return c.ns.Load() }
func (c *testClock) time() time.Time           { return time.Unix(0, c.ns.Load()) }
func (c *testClock) add(d time.Duration)       { c.ns.Add(int64(d)) }
func (c *testClock) set(b *breaker) *testClock { b.now = c.now; return c }

// breakerClosed fails the test unless b is closed with no failure counted.
func breakerClosed(t *testing.T, b *breaker) {
	t.Helper()
	if n, until := b.failures.Load(), b.openUntil.Load(); n != 0 || until != 0 {
		t.Errorf("breaker: %d failures counted, open until %d; want closed with none", n, until)
	}
}

// TestBreaker walks the breaker through its states with errors made up,
// on a clock the test moves.
func TestBreaker(t *testing.T) {
	const cooldown = time.Second
	b := newBreaker(3, cooldown, discardLog)
	clock := newTestClock().set(b)
	fail := errors.New("i/o timeout")
	allow := func() bool { ok, _ := b.allow(); return ok }
	// The gauge /metrics exports (step 41), read as a scrape reads it.
	gauge := (&guardedRedis{breaker: b}).collectors()[0]
	exported := func(want float64, when string) {
		t.Helper()
		if got := testutil.ToFloat64(gauge); got != want {
			t.Errorf("%s: shortener_redis_breaker_open = %v, want %v", when, got, want)
		}
	}
	exported(0, "new")
	call := func(err error) {
		t.Helper()
		ok, at := b.allow()
		if !ok {
			t.Fatal("closed breaker refused a call")
		}
		b.done(at, err)
	}
	call(fail)
	call(fail)
	call(nil) // a success in between: the count starts again
	call(fail)
	call(fail)
	if !allow() {
		t.Fatal("breaker opened after two failures in a row, want three")
	}
	exported(0, "after two failures in a row")
	_, early := b.allow() // a call that began before the breaker opened
	clock.add(time.Millisecond)
	call(fail)
	if allow() {
		t.Fatal("breaker still closed after three failures in a row")
	}
	exported(1, "open")
	b.done(early, nil) // its success is old news
	if allow() {
		t.Fatal("a success of a call from before the breaker opened closed it")
	}
	clock.add(cooldown - 1)
	if allow() {
		t.Fatal("a call let through before the cooldown was over")
	}
	clock.add(1)
	ok, probe := b.allow()
	if !ok {
		t.Fatal("after the cooldown, no call was let through to probe")
	}
	if allow() {
		t.Fatal("after the cooldown, a second call was let through while the first probes")
	}
	exported(1, "half-open, probing")
	b.done(probe, fail) // the probe failed: open again
	if allow() {
		t.Fatal("breaker closed after a failed probe")
	}
	clock.add(cooldown)
	ok, probe = b.allow()
	if !ok {
		t.Fatal("no probe after the second cooldown")
	}
	b.done(probe, nil)
	for i := range 3 {
		if !allow() {
			t.Fatalf("after a good probe, call %d refused; want the breaker closed", i)
		}
	}
	exported(0, "closed after a good probe")
}

// TestBreakerIgnoresAnswers: Redis's own error replies, taken from a real
// Redis, and its "nil" for a missing key, are answers, not failures; what
// a dead or slow Redis gives is a failure.
func TestBreakerIgnoresAnswers(t *testing.T) {
	opts, prefix := testRedis(t)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis: %v", err)
		}
	})
	ctx := context.Background()
	if err := rdb.HSet(ctx, prefix+"hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	answers := []struct {
		name string
		err  error
	}{
		{"a missing key", rdb.Get(ctx, prefix+"absent").Err()},
		{"WRONGTYPE", rdb.Get(ctx, prefix+"hash").Err()},
		{"NOSCRIPT", rdb.EvalSha(ctx, strings.Repeat("0", 40), nil).Err()},
		{"an error raised by a script", rdb.Eval(ctx, "return redis.error_reply('ERR broken on purpose')", nil).Err()},
		{"a script that fails", rdb.Eval(ctx, "return nosuch.field", nil).Err()},
	}
	for _, a := range answers {
		if a.err == nil {
			t.Fatalf("%s: Redis gave no error", a.name)
		}
		if !redisAnswered(a.err) {
			t.Errorf("%s (%v): not taken for an answer", a.name, a.err)
		}
		b := newBreaker(3, time.Second, discardLog)
		newTestClock().set(b)
		for range 5 {
			_, at := b.allow()
			b.done(at, a.err)
		}
		breakerClosed(t, b)
	}
	for _, err := range []error{
		context.DeadlineExceeded, io.EOF, redis.ErrPoolTimeout, redis.ErrClosed,
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
	} {
		if redisAnswered(err) {
			t.Errorf("redisAnswered(%v) = true, want a failure", err)
		}
	}
}

// TestOpenRedisCopiesOptions: openRedis sets its timeouts and retries on a
// copy; the caller's options are left as they were.
func TestOpenRedisCopiesOptions(t *testing.T) {
	opts, _ := testRedis(t)
	before := *opts
	const timeout = 123 * time.Millisecond
	rdb := openTestRedis(t, opts, timeout, discardLog)
	type settings struct {
		ctxTimeout                bool
		dial, read, write, pool   time.Duration
		dialerRetries, maxRetries int
	}
	of := func(o *redis.Options) settings {
		return settings{o.ContextTimeoutEnabled, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.DialerRetries, o.MaxRetries}
	}
	if got, want := of(opts), of(&before); got != want {
		t.Errorf("caller's options after openRedis: %+v, want them unchanged: %+v", got, want)
	}
	// The client itself has them: no retries (the -1 asked for is 0 once
	// go-redis has read it; a 0 asked for would have become 3), every wait
	// bounded.
	if got, want := of(rdb.Options()), (settings{true, timeout, timeout, timeout, timeout, 1, 0}); got != want {
		t.Errorf("client's options: %+v, want %+v", got, want)
	}

	// A client through Sentinels keeps the same bounds, and the caller's
	// list of Sentinels is copied, not shared. No Sentinel answers at
	// 127.0.0.1:1: the options are all this looks at.
	addrs := []string{"127.0.0.1:1"}
	frdb := openRedis(context.Background(), opts, sentinels{master: "m", addrs: addrs}, timeout, 0, discardLog)
	t.Cleanup(func() {
		if err := frdb.Close(); err != nil {
			t.Error(err)
		}
	})
	if got, want := of(frdb.Options()), (settings{true, timeout, timeout, timeout, timeout, 1, 0}); got != want {
		t.Errorf("failover client's options: %+v, want %+v", got, want)
	}
	fo := failoverOptions(opts, sentinels{master: "m", addrs: addrs})
	addrs[0] = "changed"
	if fo.SentinelAddrs[0] != "127.0.0.1:1" || fo.MasterName != "m" || fo.DB != opts.DB || fo.PoolSize != opts.PoolSize {
		t.Errorf("failoverOptions = %+v: want master m, the Sentinels as given, and the caller's DB and pool size", fo)
	}
}

// redisSentinelBin returns the path of redis-sentinel, which CI installs;
// elsewhere, a test that needs it skips, saying so.
func redisSentinelBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("redis-sentinel"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("redis-sentinel is not on the PATH, and CI must run the Sentinel test (apt-get install -y redis-sentinel)")
	}
	t.Skip("redis-sentinel is not on the PATH; skipping the Sentinel test (apt-get install -y redis-sentinel)")
	return ""
}

// startRedisProcess runs bin with args on a free port in dir (a port
// taken meanwhile makes it exit: it is tried again on another, up to
// three times), and returns the port. It is stopped when t ends. It is
// ready when its INFO names this process (since step 35; before, any
// answer to PING would do), or when it answers with an error reply
// (NOAUTH, from one that wants a password).
func startRedisProcess(t testing.TB, name, bin, dir string, args func(port int) []string) int {
	t.Helper()
	var errs []error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		srv, err := startServer(name, filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, port)), exec.Command(bin, args(port)...))
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c := redis.NewClient(plainRedis(addr))
		err = srv.waitReady(func(ctx context.Context) error {
			// The answer must be this process's: another test's server
			// can take the port first, and then this one exits while
			// the other answers (seen in step 35's rehearsal). One that
			// wants a password answers with an error reply (NOAUTH), and
			// is taken as this one, as before.
			info, err := c.Info(ctx, "server").Result()
			switch {
			case err != nil && !redisAnswered(err):
				return err
			case err == nil && !strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", srv.cmd.Process.Pid)):
				return fmt.Errorf("%s: another server answers on %s", name, addr)
			}
			return nil
		})
		if cerr := c.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if err == nil {
			t.Cleanup(func() {
				if err := srv.stop(syscall.SIGTERM); err != nil {
					t.Error(err)
				}
			})
			return port
		}
		errs = append(errs, err)
		select {
		case <-srv.done:
		default:
			if err := srv.stop(os.Kill); err != nil {
				t.Log(err)
			}
		}
	}
	t.Fatalf("%s did not start: %v", name, errors.Join(errs...))
	return 0
}

// plainRedis is a test's own client of addr: no retries, and none of
// go-redis's maintenance-notification machinery, whose goroutines can
// outlive a client closed before its server ever answered.
func plainRedis(addr string) *redis.Options {
	return &redis.Options{Addr: addr, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}
}

// waitFor calls cond until it reports true, failing t past a generous
// bound. It waits on progress (the Sentinel's own view), not on a clock.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within 60s (last error: %v)", what, last)
}

// sentinelTestBins finds redis-sentinel and redis-server, or fails the
// test: a Sentinel test needs both.
func sentinelTestBins(t *testing.T) (sentinelBin, serverBin string) {
	t.Helper()
	sentinelBin = redisSentinelBin(t)
	if serverBin = findRedisServer(); serverBin == "" {
		t.Fatal("redis-server is not installed")
	}
	return sentinelBin, serverBin
}

// ownRedis starts a redis-server of the test's own, keeping nothing on
// disk (one the test may reconfigure, or fail over to), and returns its
// options (step 44: two tests did this by hand; they and a new one call
// it).
func ownRedis(t testing.TB, name string) *redis.Options {
	t.Helper()
	bin := findRedisServer()
	if bin == "" {
		t.Fatal("redis-server is not installed")
	}
	dir := t.TempDir()
	return plainRedis(net.JoinHostPort("127.0.0.1", strconv.Itoa(startRedisProcess(t, name, bin, dir, plainRedisArgs(dir)))))
}

// plainRedisArgs is startRedisProcess's argument list for a redis-server
// that keeps nothing on disk, in dir.
func plainRedisArgs(dir string) func(port int) []string {
	return func(port int) []string {
		// A replica syncs at once, not after the default 5 s wait for others.
		return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--repl-diskless-sync-delay", "0"}
	}
}

// TestRedisFollowsSentinelFailover runs a master, its replica and a
// Sentinel (real processes), opens the service's client through the
// Sentinel, has the Sentinel fail the master over to the replica, and
// checks that the client's writes then land on the new master: the client
// was told, and did not keep writing to the old one (now a replica, which
// would refuse with READONLY).
func TestRedisFollowsSentinelFailover(t *testing.T) {
	t.Parallel()
	p := startSentinelPair(t, nil)
	oldMaster, newMaster, sentAddr := p.oldMaster, p.newMaster, p.sentAddr
	newAddr := p.newAddr

	log := slog.New(slog.DiscardHandler)
	rdb := openRedis(context.Background(), &redis.Options{}, sentinels{master: "m", addrs: []string{sentAddr}}, 2*time.Second, 0, log)
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("write through the Sentinel: %v", err)
	}
	if got, err := oldMaster.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("the master holds %q, %v; want the client's write, 1", got, err)
	}

	p.failOver(t)
	// Until the client hears of the switch (the Sentinel's +switch-master
	// message), its pooled connections still reach the old master, which
	// takes writes until the Sentinel has made it a replica; those writes
	// are then lost with its data. So a write may fail, or succeed and
	// vanish, for a moment; soon each one must land on the new master.
	n := 0
	waitFor(t, "a write through the client lands on the new master", func(ctx context.Context) (bool, error) {
		n++
		v := strconv.Itoa(n)
		if err := rdb.Set(ctx, "after", v, 0).Err(); err != nil {
			return false, err
		}
		got, err := newMaster.Get(ctx, "after").Result()
		return err == nil && got == v, err
	})
	t.Logf("write %d was the first to land on the new master", n)
	if role, err := newMaster.Do(ctx, "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Errorf("ROLE of %s = %v, %v; want master", newAddr, role, err)
	}
}

// TestRedisSentinelWithItsOwnPassword runs a master and a Sentinel that
// wants a password (requirepass) the master does not: the client reaches
// the master through the Sentinel with REDIS_SENTINEL_PASSWORD's value,
// and without it, or with a wrong one, is refused. Until step 27
// failoverOptions dropped the Sentinels' credentials (issue 24, item 3),
// and the first half failed.
func TestRedisSentinelWithItsOwnPassword(t *testing.T) {
	sentinelBin, serverBin := sentinelTestBins(t)
	t.Parallel()
	dir := t.TempDir()
	masterPort := startRedisProcess(t, "redis-master", serverBin, dir, plainRedisArgs(dir))
	const password = "sentinel-s3cret"
	sentPort := startRedisProcess(t, "redis-sentinel", sentinelBin, dir, func(port int) []string {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nrequirepass %s\nsentinel monitor m 127.0.0.1 %d 1\n", port, dir, password, masterPort)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{conf}
	})
	sentAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sentPort))
	master := redis.NewClient(plainRedis(net.JoinHostPort("127.0.0.1", strconv.Itoa(masterPort))))
	t.Cleanup(func() {
		if err := master.Close(); err != nil {
			t.Error(err)
		}
	})

	write := func(pw, value string) error {
		opts := &redis.Options{MaxRetries: -1}
		rdb := openRedis(context.Background(), opts, sentinels{master: "m", addrs: []string{sentAddr}, password: pw}, 5*time.Second, 0, slog.New(slog.DiscardHandler))
		defer func() {
			if err := rdb.Close(); err != nil {
				t.Error(err)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rdb.Set(ctx, "through-the-sentinel", value, 0).Err()
	}
	if err := write(password, "with"); err != nil {
		t.Fatalf("with the Sentinel's password: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := master.Get(ctx, "through-the-sentinel").Result(); err != nil || got != "with" {
		t.Fatalf("the master holds %q, %v; want the write made through the Sentinel", got, err)
	}
	for _, pw := range []string{"", "wrong"} {
		if err := write(pw, "without"); err == nil {
			t.Errorf("Sentinel password %q: the write went through, want it refused", pw)
		}
	}
	if got, err := master.Get(ctx, "through-the-sentinel").Result(); err != nil || got != "with" {
		t.Errorf("the master holds %q, %v; want only the write made with the password", got, err)
	}
}
