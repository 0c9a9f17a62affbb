package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestIdleConnsBounded: with IDLE_CONNS_MAX=n, of n+5 clients that each
// make one request and keep their connection, the server closes 5 as they
// go idle, and keeps the other n serving.
func TestIdleConnsBounded(t *testing.T) {
	const n, extra = 4, 5
	cfg := defaultConfig()
	cfg.idleConnsMax = n
	srv := newServer(newMemoryStore(), noClicks{}, nil, nil, nil, cfg, nil, discardLog)
	// The server changes a connection's state in its own goroutine, a
	// moment after the client has its answer: a client that went on at
	// once could open its next connection before the last one was idle
	// (counted as open, or closed, late), and which connections are
	// closed would depend on the scheduler. So the test watches the
	// limit's hook, and opens the next connection only once the server
	// is done with the last.
	type event struct {
		addr  string
		state http.ConnState
	}
	events := make(chan event, 256)
	limit := srv.ConnState
	srv.ConnState = func(c net.Conn, state http.ConnState) {
		limit(c, state)
		events <- event{c.RemoteAddr().String(), state}
	}
	waitState := func(c net.Conn, want http.ConnState) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case e := <-events:
				if e.addr == c.LocalAddr().String() && e.state == want {
					return
				}
			case <-deadline:
				t.Fatalf("connection from %s: the server did not make it %v within 30 s", c.LocalAddr(), want)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close() //nolint:errcheck // only the listener's close error, and the test is over
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})

	// get sends one keep-alive request on c and reads its answer.
	get := func(c net.Conn, br *bufio.Reader) error {
		if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: sho.rt\r\n\r\n"); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("read answer: %w", err)
		}
		defer res.Body.Close()
		if _, err := io.Copy(io.Discard, res.Body); err != nil {
			return fmt.Errorf("read body: %w", err)
		}
		if res.StatusCode != http.StatusOK || res.Close {
			return fmt.Errorf("status %d, close %v; want 200 on a kept-alive connection", res.StatusCode, res.Close)
		}
		return nil
	}

	conns := make([]net.Conn, n+extra)
	readers := make([]*bufio.Reader, n+extra)
	for i := range conns {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() }) //nolint:errcheck // the test is over
		// Generous: nothing here waits on the deadline unless the
		// server misbehaves.
		if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
		conns[i], readers[i] = c, bufio.NewReader(c)
		if err := get(c, readers[i]); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		waitState(c, http.StateIdle)
		if i >= n { // over the limit: closed, and counted closed
			waitState(c, http.StateClosed)
		}
	}
	// Each connection now waits for the server: a close shows as EOF at
	// once; an open one stays silent until it is sent another request,
	// and then sees its answer.
	type seen struct {
		i   int
		err error
	}
	seens := make(chan seen, len(conns))
	for i := range conns {
		go func() {
			_, err := readers[i].Peek(1)
			seens <- seen{i, err}
		}()
	}
	timeout := time.After(30 * time.Second)
	closed := map[int]bool{}
	for len(closed) < extra {
		select {
		case s := <-seens:
			if !errors.Is(s.err, io.EOF) {
				t.Fatalf("connection %d, idle, read %v; want EOF or nothing", s.i, s.err)
			}
			closed[s.i] = true
		case <-timeout:
			t.Fatalf("%d of %d idle connections closed by the server, want %d", len(closed), n+extra, extra)
		}
	}
	// The others are still open and serving: a second request on each is
	// answered (its reader sees data, not EOF).
	for i, c := range conns {
		if closed[i] {
			continue
		}
		if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: sho.rt\r\n\r\n"); err != nil {
			t.Fatalf("write to kept connection %d: %v", i, err)
		}
	}
	for range n {
		select {
		case s := <-seens:
			if s.err != nil {
				t.Errorf("kept connection %d read %v, want its second answer", s.i, s.err)
			}
		case <-timeout:
			t.Fatal("the kept connections did not all answer a second request")
		}
	}
}

// TestAccessLogCutsMethod: a client's invented method (net/http takes any
// token) costs the access log a few bytes, not as many as it sent.
func TestAccessLogCutsMethod(t *testing.T) {
	logs := &syncBuffer{}
	cfg := defaultConfig()
	cfg.accessLog = true
	h := newHandler(newMemoryStore(), noClicks{}, nil, nil, nil, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	r := httptest.NewRequest(strings.Repeat("A", 60_000), "/healthz", nil)
	h.ServeHTTP(httptest.NewRecorder(), r)
	line := logs.String()
	if !strings.Contains(line, " method="+strings.Repeat("A", maxLoggedMethod)+" ") {
		t.Errorf("access line does not hold the method's first %d bytes:\n%.300s", maxLoggedMethod, line)
	}
	if len(line) > 1000 {
		t.Errorf("access line is %d bytes for a 60,000-byte method, want under 1,000", len(line))
	}
}

// TestWarnsOnceAboutUntrustedForwardedFor: X-Forwarded-For from a peer that
// is not a trusted proxy is said once, however many requests carry it;
// from a trusted proxy, or without the header, never.
func TestWarnsOnceAboutUntrustedForwardedFor(t *testing.T) {
	const warning = "X-Forwarded-For from a peer not in TRUSTED_PROXIES"
	tests := []struct {
		name, trusted, peer string
		xff                 bool
		want                int
	}{
		{"no proxy trusted", "", "127.0.0.1:4000", true, 1},
		{"peer not trusted", "10.0.0.0/8", "127.0.0.1:4000", true, 1},
		{"peer trusted", "127.0.0.1", "127.0.0.1:4000", true, 0},
		{"no header", "", "127.0.0.1:4000", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(func(k string) string {
				return map[string]string{"TRUSTED_PROXIES": tt.trusted, "BASE_URL": "https://sho.rt"}[k]
			})
			if err != nil {
				t.Fatal(err)
			}
			logs := &syncBuffer{}
			h := newHandler(newMemoryStore(), noClicks{}, nil, nil, nil, cfg, slog.New(slog.NewTextHandler(logs, nil)))
			for i := range 100 {
				r := httptest.NewRequest("GET", "/healthz", nil)
				r.RemoteAddr = tt.peer
				if tt.xff {
					r.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			if got := strings.Count(logs.String(), warning); got != tt.want {
				t.Errorf("warned %d times in 100 requests, want %d:\n%s", got, tt.want, logs)
			}
		})
	}
}

// TestInfoContext checks the context type that observe puts the request's
// information in (instead of context.WithValue): it answers its own key,
// passes every other question to the context beneath, and what is made
// from it is canceled with the request.
func TestInfoContext(t *testing.T) {
	type otherKey struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, "beneath"))
	info := &requestInfo{id: "abc"}
	ctx := &infoContext{Context: parent, info: info}
	if got := requestInfoFrom(ctx); got != info {
		t.Fatalf("requestInfoFrom = %p, want %p", got, info)
	}
	if got := ctx.Value(otherKey{}); got != "beneath" {
		t.Errorf("another key: got %v, want the value beneath", got)
	}
	if got := requestInfoFrom(context.WithoutCancel(ctx)); got != info {
		t.Errorf("WithoutCancel lost the request's information")
	}
	child, stop := context.WithTimeout(ctx, time.Hour)
	defer stop()
	if requestInfoFrom(child) != info {
		t.Errorf("a context made from it lost the request's information")
	}
	cancel()
	// Canceled with its parent, and by the time cancel returns: the
	// context package found the parent's cancelation through Value and
	// registered the child with it, so no goroutine (and no clock) is
	// involved. Were Value not to pass that question on, the child would
	// be canceled later, by a goroutine, and this would fail.
	select {
	case <-child.Done():
	default:
		t.Fatal("a context made from it was not canceled when the request was")
	}
	if err := child.Err(); err != context.Canceled {
		t.Errorf("child.Err() = %v, want context.Canceled", err)
	}
	if err := ctx.Err(); err != context.Canceled {
		t.Errorf("ctx.Err() = %v, want context.Canceled", err)
	}
}
