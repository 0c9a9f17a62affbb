//go:build unix

package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain gives the tests a Postgres and a Redis when TEST_DATABASE_URL or
// TEST_REDIS_URL is unset and the servers are installed: a throwaway one of
// each, on a free port in a temporary folder, removed at the end. So `go
// test ./...` on a fresh clone runs every test with nothing to paste first.
// Then, once every test has finished, it fails if a goroutine is left
// running: a queue, a batcher or a server that was not stopped. (Unix only:
// on Windows the tests need TEST_DATABASE_URL and TEST_REDIS_URL, as before.)
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	if os.Getenv("SHORTENER_TEST_RUN_MAIN") == "1" {
		// The test binary run as the program itself (see
		// TestSecondSignalStopsAtOnce): its signals are the program's,
		// and it needs no servers.
		return m.Run()
	}
	var svc testServices
	stopWatching := func() {}
	if startServices() {
		removeStaleTestFolders()
		if err := svc.start(); err != nil {
			fmt.Fprintf(os.Stderr, "test services: %v\n", err)
			svc.stop()
			return 1
		}
		stopWatching = stopOnSignal(&svc)
	}
	code := m.Run()
	stopWatching()
	if !svc.stop() && code == 0 {
		code = 1
	}
	// Only when the tests passed: a failed test may leave goroutines behind
	// for reasons its own failure already reports.
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// stopOnSignal stops the servers on ^C or a kill, which would otherwise end
// the test binary at once and leave their folders behind. The function it
// returns stops watching.
func stopOnSignal(svc *testServices) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "test services: %v: stopping the throwaway servers\n", sig)
			svc.stop()
			os.Exit(1)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-exited
	}
}

// testServices holds how to stop the servers TestMain started, last first.
type testServices struct {
	mu    sync.Mutex
	stops []func() error
}

// stop stops every server once, reports what failed, and says whether all
// went well.
func (s *testServices) stop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := true
	for _, stop := range slices.Backward(s.stops) {
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "test services: %v\n", err)
			ok = false
		}
	}
	s.stops = nil
	return ok
}

func (s *testServices) start() error {
	stops, err := startTestServices()
	s.mu.Lock()
	s.stops = stops
	s.mu.Unlock()
	return err
}

// testFolderPrefix starts the name of every folder TestMain makes in the
// temporary directory; each holds an "owner" file with the test binary's pid.
const testFolderPrefix = "shortener-test-"

// makeTestFolder makes a folder for one server and records who owns it.
func makeTestFolder(kind string) (string, error) {
	dir, err := os.MkdirTemp("", testFolderPrefix+kind+"-")
	if err != nil {
		return "", fmt.Errorf("make a folder: %w", err)
	}
	owner := filepath.Join(dir, "owner")
	if err := os.WriteFile(owner, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", errors.Join(fmt.Errorf("write %s: %w", owner, err), os.RemoveAll(dir))
	}
	return dir, nil
}

// removeStaleTestFolders removes the folders of test binaries that died
// without their clean-up (go test's -timeout panics past it; SIGKILL). Only
// where the kernel killed their servers with them (setDeathSignal): else a
// folder may belong to a server still running.
func removeStaleTestFolders() {
	if !deathSignal {
		return
	}
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), testFolderPrefix+"*"))
	if err != nil {
		panic(err) // the pattern is a constant
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // not ours, or being made right now
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // its owner still runs
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "test services: remove a folder left by pid %d: %v\n", pid, err)
		}
	}
}

// leakOptions names the goroutines that belong to a library and outlive
// the Close that should end them. One: go-redis v9.23.0's failover client
// (REDIS_SENTINELS) starts a circuit-breaker cleanup loop for its
// maintenance notifications, which it says it has disabled, and Close
// does not stop it (one goroutine per client, found by
// TestRedisFollowsSentinelFailover; a process makes one such client).
// Every other client the tests open (database/sql, go-redis, their pools
// and reapers) is closed by then.
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
}

// startServices says whether TestMain may start servers: not in a fuzz
// worker (a fuzz run starts many, each running TestMain), nor to list tests.
func startServices() bool {
	for _, name := range []string{"test.fuzzworker", "test.list"} {
		f := flag.Lookup(name)
		if f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return false
		}
	}
	return os.Getenv("TEST_DATABASE_URL") == "" || os.Getenv("TEST_REDIS_URL") == ""
}

// startTestServices starts what is missing, sets its variable, and returns
// how to stop each. Binaries that are absent fail under CI (which must run
// every test) and are reported once otherwise, so that the skips that
// follow are not a surprise.
func startTestServices() ([]func() error, error) {
	var stops []func() error
	var absent []string
	if os.Getenv("TEST_DATABASE_URL") == "" {
		bin := findPostgresBin()
		if bin == "" {
			absent = append(absent, "Postgres (initdb): every test that needs it will be SKIPPED.\n"+
				"  Install it (Debian/Ubuntu: sudo apt-get install postgresql; macOS: brew install postgresql@15),\n"+
				"  set PG_BIN to the folder holding initdb, or point the tests at a server:\n"+
				"  export TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'")
		} else {
			url, stop, err := startTestPostgres(bin)
			if err != nil {
				return stops, fmt.Errorf("start a throwaway postgres from %s: %w", bin, err)
			}
			stops = append(stops, stop, unsetOnStop("TEST_DATABASE_URL"))
			if err := os.Setenv("TEST_DATABASE_URL", url); err != nil {
				return stops, fmt.Errorf("set TEST_DATABASE_URL: %w", err)
			}
		}
	}
	if os.Getenv("TEST_REDIS_URL") == "" {
		bin := findRedisServer()
		if bin == "" {
			absent = append(absent, "Redis (redis-server): every test that needs it will be SKIPPED.\n"+
				"  Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis),\n"+
				"  or point the tests at a server:\n"+
				"  export TEST_REDIS_URL='redis://127.0.0.1:6379/0'")
		} else {
			url, stop, err := startTestRedis(bin)
			if err != nil {
				return stops, fmt.Errorf("start a throwaway redis from %s: %w", bin, err)
			}
			stops = append(stops, stop, unsetOnStop("TEST_REDIS_URL"))
			if err := os.Setenv("TEST_REDIS_URL", url); err != nil {
				return stops, fmt.Errorf("set TEST_REDIS_URL: %w", err)
			}
		}
	}
	if len(absent) > 0 {
		bar := strings.Repeat("!", 72)
		msg := bar + "\n!!! Not found, so no throwaway server for the tests:\n!!! " +
			strings.Join(absent, "\n!!! ") + "\n" + bar
		if os.Getenv("CI") != "" {
			return stops, errors.New("CI is set, and CI must run every test: failing instead of skipping\n" + msg)
		}
		fmt.Fprintln(os.Stderr, msg)
	}
	return stops, nil
}

func unsetOnStop(name string) func() error {
	return func() error { return os.Unsetenv(name) }
}

// findPostgresBin returns the folder holding initdb and postgres, searched
// as deploy/services.sh does: PG_BIN, PATH (a symlink followed to its
// folder), then where Debian and Homebrew put them, the newest version
// first. Empty when none is found.
func findPostgresBin() string {
	var dirs []string
	if d := os.Getenv("PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	var found []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			panic(err) // the patterns are constants
		}
		found = append(found, m...)
	}
	slices.SortFunc(found, func(a, b string) int { return pgVersion(b) - pgVersion(a) })
	for _, d := range append(dirs, found...) {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

// pgVersion reads the major version from a path such as
// /usr/lib/postgresql/15/bin or /opt/homebrew/opt/postgresql@15/bin.
func pgVersion(dir string) int {
	v := filepath.Base(filepath.Dir(dir))
	if _, after, ok := strings.Cut(v, "@"); ok {
		v = after
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

func findRedisServer() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/opt/homebrew/bin/redis-server", "/usr/local/bin/redis-server"} {
		if executable(p) {
			return p
		}
	}
	return ""
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// freePort returns a port nothing listens on now. Another program could
// take it before the server binds it; the server then fails to start and
// says so, which beats a fixed port that is often taken.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// serviceStartTimeout bounds how long a server may take to answer: generous,
// for a slow machine running other tests.
const serviceStartTimeout = 60 * time.Second

// server is a child process, stopped with a signal and waited for.
type server struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // from Wait, read after done
	log  string
}

func startServer(name, log string, cmd *exec.Cmd) (*server, error) {
	out, err := os.Create(log)
	if err != nil {
		return nil, fmt.Errorf("%s: create log: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: start: %w", name, err), out.Close())
	}
	s := &server{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		s.err = cmd.Wait()
		if err := out.Close(); err != nil && s.err == nil {
			s.err = err
		}
		close(s.done)
	}()
	return s, nil
}

// waitReady calls ready until it succeeds, the process exits, or the
// timeout passes.
func (s *server) waitReady(ready func(context.Context) error) error {
	deadline := time.Now().Add(serviceStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited before answering (%v); its log:\n%s", s.name, s.err, tail(s.log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v: %w; its log:\n%s", s.name, serviceStartTimeout, err, tail(s.log))
		}
	}
}

// stop sends sig and waits; SIGKILL if the process outlives the wait.
func (s *server) stop(sig os.Signal) error {
	select {
	case <-s.done:
		return fmt.Errorf("%s had exited before the end of the tests (%v); its log:\n%s", s.name, s.err, tail(s.log))
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("stop %s: %w", s.name, err)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(30 * time.Second):
		if err := s.cmd.Process.Kill(); err != nil {
			return fmt.Errorf("kill %s: %w", s.name, err)
		}
		<-s.done
		return fmt.Errorf("%s did not stop within 30s of %v; killed", s.name, sig)
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// startTestPostgres makes a cluster in a new temporary folder and runs it
// on a free port, trusting connections from 127.0.0.1 only. Postgres refuses
// to run as root: as root, it runs as the user postgres (PG_USER), which
// then owns the folder.
func startTestPostgres(bin string) (string, func() error, error) {
	dir, err := makeTestFolder("postgres")
	if err != nil {
		return "", nil, err
	}
	remove := func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		return nil
	}
	fail := func(err error) (string, func() error, error) {
		return "", nil, errors.Join(err, remove())
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		name := os.Getenv("PG_USER")
		if name == "" {
			name = "postgres"
		}
		cred, err = userCredential(name)
		if err != nil {
			return fail(fmt.Errorf("running as root, Postgres must run as another user: %w", err))
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("give %s to %s: %w", dir, name, err))
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w\n%s", err, out))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	// TCP on 127.0.0.1 only, no socket file. fsync stays on, though the
	// data is thrown away: commits then take as long as on the server CI
	// and the README use, and the tests that time them see the same.
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = dir
	srv, err := startServer("postgres", filepath.Join(dir, "log"), cmd)
	if err != nil {
		return fail(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("postgres", url)
	if err != nil {
		return fail(errors.Join(fmt.Errorf("open %s: %w", url, err), srv.stop(os.Kill)))
	}
	ready := srv.waitReady(db.PingContext)
	if err := errors.Join(ready, db.Close()); err != nil {
		return fail(errors.Join(err, srv.stop(os.Kill)))
	}
	return url, func() error {
		// SIGINT is Postgres's fast shutdown: connections are closed,
		// not waited for.
		return errors.Join(srv.stop(os.Interrupt), remove())
	}, nil
}

// userCredential returns the ids of the named user, to run a process as.
func userCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up user %s (set PG_USER to another unprivileged user): %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startTestRedis runs redis-server on a free port, without persistence, in a
// new temporary folder.
func startTestRedis(bin string) (string, func() error, error) {
	dir, err := makeTestFolder("redis")
	if err != nil {
		return "", nil, err
	}
	remove := func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		return nil
	}
	port, err := freePort()
	if err != nil {
		return "", nil, errors.Join(err, remove())
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	srv, err := startServer("redis", filepath.Join(dir, "log"), cmd)
	if err != nil {
		return "", nil, errors.Join(err, remove())
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ping := func(ctx context.Context) (err error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, c.Close()) }()
		if dl, ok := ctx.Deadline(); ok {
			if err := c.SetDeadline(dl); err != nil {
				return err
			}
		}
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		buf := make([]byte, 7)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if got := string(buf[:n]); got != "+PONG\r\n" {
			return fmt.Errorf("PING answered %q", got)
		}
		return nil
	}
	if err := srv.waitReady(ping); err != nil {
		return "", nil, errors.Join(err, srv.stop(os.Kill), remove())
	}
	return "redis://" + addr + "/0", func() error {
		return errors.Join(srv.stop(syscall.SIGTERM), remove())
	}, nil
}
