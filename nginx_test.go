package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// edgeClient is the tests' client to nginx: generous, but no hang.
var edgeClient = &http.Client{Timeout: 10 * time.Second}

// nginxPerClient is limit_conn in deploy/nginx.conf: requests in progress
// from one address before nginx answers 429.
const nginxPerClient = 100

// TestNginxEdge puts the real deploy/nginx.conf, rendered by
// deploy/replicas.sh check (which also runs nginx -t on it), in front of a
// Go server standing in for an instance, and checks what one client may do
// and that nginx's own errors are JSON.
func TestNginxEdge(t *testing.T) {
	t.Parallel()
	nginxBin := findNginx(t)
	var (
		mu        sync.Mutex
		hits      = map[string]int{}
		whole     int // /echo bodies read whole that are over the app's limit
		arrived   = make(chan struct{}, nginxPerClient*2)
		release   = make(chan struct{})
		releaseMu sync.Once
	)
	releaseAll := func() { releaseMu.Do(func() { close(release) }) }
	instance := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/healthz":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"status":"ok"}`)
		case "/echo":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if n > maxBodyBytes {
				mu.Lock()
				whole++
				mu.Unlock()
			}
			w.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "body_bytes": n}); err != nil {
				t.Errorf("instance: write /echo: %v", err)
			}
		case "/busy":
			// The app's own 503 must reach the client as the app wrote it.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, `{"error":"server busy"}`)
		case "/hold":
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			fmt.Fprintln(w, `{"held":true}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(instance.Close)
	// Before Close, which waits for every held request.
	t.Cleanup(releaseAll)
	ngx := startNginx(t, nginxBin, portOf(t, instance.Listener.Addr()))
	hitCount := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return hits[path]
	}

	t.Run("passes a request with its Host, port included", func(t *testing.T) {
		resp := rawRequest(t, ngx.addr, "GET /echo HTTP/1.1\r\nHost: short.example:8080\r\nConnection: close\r\n\r\n")
		echo := readEcho(t, resp)
		if echo.Host != "short.example:8080" {
			t.Errorf("instance saw Host %q, want %q", echo.Host, "short.example:8080")
		}
	})

	t.Run("HTTP/1.0 without Host reaches the instance", func(t *testing.T) {
		resp := rawRequest(t, ngx.addr, "GET /echo HTTP/1.0\r\n\r\n")
		echo := readEcho(t, resp)
		if want := "localhost:" + ngx.port; echo.Host != want {
			t.Errorf("instance saw Host %q, want %q", echo.Host, want)
		}
	})

	t.Run("a body of the app's limit passes", func(t *testing.T) {
		resp, err := edgeClient.Post(ngx.url+"/echo", "application/json", strings.NewReader(strings.Repeat("a", maxBodyBytes)))
		if err != nil {
			t.Fatalf("post %d bytes: %v", maxBodyBytes, err)
		}
		if echo := readEcho(t, resp); echo.BodyBytes != maxBodyBytes {
			t.Errorf("instance read %d bytes, want %d", echo.BodyBytes, maxBodyBytes)
		}
	})

	t.Run("a body over the app's limit gets a JSON 413", func(t *testing.T) {
		before := hitCount("/echo")
		mu.Lock()
		wholeBefore := whole
		mu.Unlock()
		body := strings.Repeat("a", maxBodyBytes+1)
		resp, err := edgeClient.Post(ngx.url+"/echo", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("post %d bytes: %v", len(body), err)
		}
		checkJSONError(t, resp, http.StatusRequestEntityTooLarge)
		// Without a Content-Length nginx counts as the body arrives.
		resp, err = edgeClient.Post(ngx.url+"/echo", "application/json", struct{ io.Reader }{strings.NewReader(body)})
		if err != nil {
			t.Fatalf("post %d bytes chunked: %v", len(body), err)
		}
		checkJSONError(t, resp, http.StatusRequestEntityTooLarge)
		// Since step 27 nginx passes a body on as it comes
		// (proxy_request_buffering off), so the chunked one may have
		// reached the instance in part, cut off at the limit (seen under
		// load): no body over the limit may reach it whole.
		mu.Lock()
		got := whole - wholeBefore
		mu.Unlock()
		if got != 0 {
			t.Errorf("the instance read %d bodies over the limit whole, want 0", got)
		}
		if got := hitCount("/echo") - before; got > 1 {
			t.Errorf("the instance got %d requests with a body over the limit, want at most the chunked one, cut off", got)
		}
	})

	t.Run("a request line over the limit gets a JSON 414", func(t *testing.T) {
		resp := rawRequest(t, ngx.addr, "GET /"+strings.Repeat("a", 10_000)+" HTTP/1.1\r\nHost: x\r\n\r\n")
		checkJSONError(t, resp, http.StatusRequestURITooLong)
	})

	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"HTTP/1.1 without Host", "GET /echo HTTP/1.1\r\n\r\n", 400},
		{"a header line without a colon", "GET /echo HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400},
		{"a header over the buffer", "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 10_000) + "\r\n\r\n", 400},
		{"a bad Content-Length", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400},
		{"a URI that is not a path", "GET nope HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"a NUL in the URI", "GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"an unknown HTTP version", "GET / HTTP/7.1\r\nHost: x\r\n\r\n", 505},
	} {
		t.Run(fmt.Sprintf("%s gets a JSON %d", tc.name, tc.status), func(t *testing.T) {
			checkJSONError(t, rawRequest(t, ngx.addr, tc.req), tc.status)
		})
	}

	t.Run("the error pages are not reachable from outside", func(t *testing.T) {
		resp, err := edgeClient.Get(ngx.url + "/_nginx/429")
		if err != nil {
			t.Fatalf("get /_nginx/429: %v", err)
		}
		checkJSONError(t, resp, http.StatusNotFound)
	})

	t.Run("the app's own errors pass through unchanged", func(t *testing.T) {
		resp, err := edgeClient.Get(ngx.url + "/busy")
		if err != nil {
			t.Fatalf("get /busy: %v", err)
		}
		body := checkJSONError(t, resp, http.StatusServiceUnavailable)
		if body != "server busy" {
			t.Errorf("error %q, want the instance's %q", body, "server busy")
		}
	})

	t.Run("headers trickled past client_header_timeout close the connection", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", ngx.addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial nginx: %v", err)
		}
		defer conn.Close()
		closed := make(chan error, 1)
		go func() {
			_, err := conn.Read(make([]byte, 512))
			closed <- err
		}()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			t.Fatalf("write the start of a request: %v", err)
		}
		// A byte of header every 100 ms: a timeout that restarted at each
		// read would never fire. client_header_timeout is 5 s; nginx's
		// default, 60 s, would meet the 30 s below instead.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		giveUp := time.After(30 * time.Second)
		for {
			select {
			case err := <-closed:
				if err == nil {
					t.Fatalf("nginx answered a request whose headers never ended, want the connection closed")
				}
				return
			case <-giveUp:
				t.Fatalf("connection still open after 30 s of trickled headers")
			case <-tick.C:
				// A write error means nginx has closed: the read above
				// reports it.
				if _, err := io.WriteString(conn, "x"); err != nil {
					t.Logf("write after close: %v", err)
				}
			}
		}
	})

	t.Run("IPv6 listener answers", func(t *testing.T) {
		listen, err := os.ReadFile(filepath.Join(ngx.dir, "listen.conf"))
		if err != nil {
			t.Fatalf("read listen.conf: %v", err)
		}
		if !strings.Contains(string(listen), "[::1]") {
			t.Skipf("SKIPPING: this machine has no ::1 on loopback, so replicas.sh rendered no IPv6 listener:\n%s", listen)
		}
		resp, err := edgeClient.Get("http://[::1]:" + ngx.port + "/echo")
		if err != nil {
			t.Fatalf("get over IPv6: %v", err)
		}
		readEcho(t, resp)
	})

	t.Run("more requests in progress from one address than limit_conn get a JSON 429", func(t *testing.T) {
		// nginxPerClient requests held by the instance, each on its own
		// connection: all of them must get through.
		conns := make([]net.Conn, nginxPerClient)
		for i := range conns {
			c, err := net.DialTimeout("tcp", ngx.addr, 10*time.Second)
			if err != nil {
				t.Fatalf("dial nginx (connection %d): %v", i+1, err)
			}
			defer c.Close()
			if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
				t.Fatalf("set deadline: %v", err)
			}
			if _, err := io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatalf("write request %d: %v", i+1, err)
			}
			conns[i] = c
		}
		timeout := time.After(30 * time.Second)
		for i := range nginxPerClient {
			select {
			case <-arrived:
			case <-timeout:
				t.Fatalf("%d of %d held requests reached the instance within 30 s, want all", i, nginxPerClient)
			}
		}
		// One more is refused at the edge, and the instance never sees it.
		resp, err := edgeClient.Get(ngx.url + "/hold")
		if err != nil {
			t.Fatalf("get /hold number %d: %v", nginxPerClient+1, err)
		}
		checkJSONError(t, resp, http.StatusTooManyRequests)
		if got := hitCount("/hold"); got != nginxPerClient {
			t.Errorf("the instance got %d held requests, want %d", got, nginxPerClient)
		}
		releaseAll()
		for i, c := range conns {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("read held response %d: %v", i+1, err)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				t.Fatalf("read held body %d: %v", i+1, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("held request %d: got %d, want 200", i+1, resp.StatusCode)
			}
		}
	})
}

// TestNginxEdgeNoInstance: with no instance answering, nginx's 502 is JSON.
func TestNginxEdgeNoInstance(t *testing.T) {
	t.Parallel()
	nginxBin := findNginx(t)
	// Port 1 on loopback: nothing listens there, and, below 1024, no test
	// can take it. (A port taken from the kernel and given back could be
	// handed at once to another test running in parallel, or to this
	// nginx itself: CI saw a run where it was.)
	ngx := startNginx(t, nginxBin, "1")
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, err := http.NewRequest(method, ngx.url+"/abcdefg", strings.NewReader(`{"url":"https://go.dev"}`))
		if err != nil {
			t.Fatalf("new request: %v", err)
		}
		resp, err := edgeClient.Do(req)
		if err != nil {
			t.Fatalf("%s through nginx: %v", method, err)
		}
		checkJSONError(t, resp, http.StatusBadGateway)
	}
}

// findNginx returns nginx's path, searched as deploy/replicas.sh does. With
// no nginx (or no bash to run the script), the test fails under CI and
// skips elsewhere.
func findNginx(t *testing.T) string {
	t.Helper()
	missing := func(what, install string) {
		t.Helper()
		msg := fmt.Sprintf("%s not found, so deploy/nginx.conf is not tested (Debian/Ubuntu: sudo apt-get install %s; macOS: brew install %s)", what, install, install)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		missing("bash", "bash")
	}
	candidates := []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/opt/homebrew/bin/nginx", "/usr/local/bin/nginx"}
	if p, err := exec.LookPath("nginx"); err == nil {
		candidates = append([]string{p}, candidates...)
	}
	for _, p := range candidates {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	missing("nginx", "nginx")
	return ""
}

// edge is an nginx the test started.
type edge struct {
	dir  string // nginx's prefix: the rendered config, pid, logs
	port string
	addr string // 127.0.0.1:port
	url  string // http://127.0.0.1:port
}

// startNginx renders deploy/nginx.conf with deploy/replicas.sh check (one
// instance, on upstreamPort; env adds settings) in a temporary directory, starts nginx in the
// foreground on it, and waits until it answers. A port someone else took
// between our choosing it and nginx binding it is retried.
func startNginx(t *testing.T, nginxBin, upstreamPort string, env ...string) *edge {
	t.Helper()
	for attempt := 1; ; attempt++ {
		e, err := tryStartNginx(t, nginxBin, upstreamPort, env...)
		if err == nil {
			return e
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("retrying on another port: %v", err)
	}
}

var errPortTaken = errors.New("nginx: port taken")

func tryStartNginx(t *testing.T, nginxBin, upstreamPort string, env ...string) (*edge, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	port := portOf(t, l.Addr())
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("close listener: %w", err)
	}
	state := t.TempDir()
	dir := filepath.Join(state, "nginx")

	// Rendered exactly as replicas.sh up renders it; check also runs
	// nginx -t on the result. NGINX_ACCESS_LOG and NGINX_IPV6 are cleared
	// so that the defaults are what is tested.
	check := exec.Command("bash", "deploy/replicas.sh", "check", "1")
	check.Env = append(os.Environ(), "REPLICAS_DIR="+state, "NGINX_PORT="+port,
		"APP_PORT_BASE="+upstreamPort, "NGINX_ACCESS_LOG=", "NGINX_IPV6=", "PATH="+filepath.Dir(nginxBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	check.Env = append(check.Env, env...)
	out, err := check.CombinedOutput()
	if err != nil && strings.Contains(string(out), "a duplicate listen") {
		// The port picked here is one the caller picked too (TestNginxTLS's
		// NGINX_TLS_PORT: the kernel handed out a closed port again, in
		// step 44's rehearsal): pick another (step 44).
		return nil, fmt.Errorf("%w: %s is the caller's too: %s", errPortTaken, port, out)
	}
	if err != nil {
		return nil, fmt.Errorf("deploy/replicas.sh check 1: %w\n%s", err, out)
	}
	if !strings.Contains(string(out), "test is successful") {
		return nil, fmt.Errorf("deploy/replicas.sh check 1: no \"test is successful\" from nginx -t:\n%s", out)
	}

	errLog := filepath.Join(dir, "error.log")
	cmd := exec.Command(nginxBin, "-p", dir+"/", "-c", filepath.Join(dir, "nginx.conf"), "-e", errLog, "-g", "daemon off;")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		// SIGTERM: nginx's fast shutdown; SIGKILL if it takes too long.
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("stop nginx: %v", err)
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("nginx did not stop within 10 s of SIGTERM; killing it")
			if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("kill nginx: %v", err)
			}
			<-exited
		}
	}
	logs := func() string {
		b, err := os.ReadFile(errLog)
		if err != nil {
			return fmt.Sprintf("(read %s: %v)", errLog, err)
		}
		return string(b)
	}

	e := &edge{dir: dir, port: port, addr: "127.0.0.1:" + port, url: "http://127.0.0.1:" + port}
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Any answer will do, a 502 too: nginx is up.
		resp, err := client.Get(e.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("nginx error.log:\n%s", logs())
				}
			})
			return e, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("nginx did not answer %s/healthz within 15 s: %v\nerror.log:\n%s", e.url, err, logs())
		}
		select {
		case err := <-exited:
			if strings.Contains(logs(), "Address already in use") {
				return nil, fmt.Errorf("%w: %s", errPortTaken, port)
			}
			return nil, fmt.Errorf("nginx exited before answering: %v\n%s\nerror.log:\n%s", err, stderr.String(), logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func portOf(t *testing.T, addr net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		t.Fatalf("split %q: %v", addr, err)
	}
	return port
}

// rawRequest writes req as it is on a new connection to addr and reads
// one response: for requests net/http's client would refuse to send.
func rawRequest(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp
}

type echoed struct {
	Host      string `json:"host"`
	BodyBytes int    `json:"body_bytes"`
}

// readEcho checks that the instance's /echo answered, and returns what it
// saw.
func readEcho(t *testing.T, resp *http.Response) echoed {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200 from the instance; body %q", resp.StatusCode, body)
	}
	var e echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return e
}

// checkJSONError checks status, a JSON body {"error": "..."}, the request
// id, and for 429 and 503 a Retry-After; it returns the error's text.
func checkJSONError(t *testing.T, resp *http.Response, status int) string {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d; body %q", resp.StatusCode, status, body)
	}
	// So that a client can quote it, as with every other answer.
	if id := resp.Header.Get("X-Request-Id"); len(id) != 32 {
		t.Errorf("X-Request-Id %q, want nginx's 32 hex digits", id)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json; body %q", ct, body)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("body %q: want {\"error\": \"...\"} (decode error: %v)", body, err)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if ra := resp.Header.Get("Retry-After"); ra == "" {
			t.Errorf("no Retry-After on a %d", status)
		} else if _, err := strconv.Atoi(ra); err != nil {
			t.Errorf("Retry-After %q: want whole seconds", ra)
		}
	}
	return e.Error
}

// TestNginxTLS: with NGINX_TLS_CERT and NGINX_TLS_KEY, nginx ends TLS on
// NGINX_TLS_PORT with HTTP/2, tells the instance the scheme was https, and
// lets a returning client resume its session unless NGINX_TLS_RESUME=0.
func TestNginxTLS(t *testing.T) {
	nginxBin := findNginx(t)
	certFile, keyFile, roots := writeTestCert(t, t.TempDir())
	instance := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(instance.Close)
	for _, resume := range []bool{true, false} {
		t.Run(fmt.Sprintf("resume=%v", resume), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			tlsPort := portOf(t, l.Addr())
			if err := l.Close(); err != nil {
				t.Fatalf("close listener: %v", err)
			}
			setting := "1"
			if !resume {
				setting = "0"
			}
			startNginx(t, nginxBin, portOf(t, instance.Listener.Addr()), "NGINX_TLS_CERT="+certFile,
				"NGINX_TLS_KEY="+keyFile, "NGINX_TLS_PORT="+tlsPort, "NGINX_TLS_RESUME="+setting)
			// A new connection per request, HTTP/2 offered, a session cache.
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				DisableKeepAlives: true, ForceAttemptHTTP2: true,
				TLSClientConfig: &tls.Config{RootCAs: roots, ClientSessionCache: tls.NewLRUClientSessionCache(8)}}}
			for i := range 2 {
				resp, err := client.Get("https://127.0.0.1:" + tlsPort + "/proto")
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("request %d: read: %v", i, err)
				}
				if resp.ProtoMajor != 2 {
					t.Errorf("request %d over %s, want HTTP/2", i, resp.Proto)
				}
				if string(body) != "https" {
					t.Errorf("request %d: instance saw X-Forwarded-Proto %q, want https", i, body)
				}
				if want := resume && i == 1; resp.TLS.DidResume != want {
					t.Errorf("request %d: resumed %v, want %v", i, resp.TLS.DidResume, want)
				}
			}
		})
	}
}

// TestNginxSlowBodyEnds: a body sent a byte at a time, each within
// client_body_timeout, is ended by the app's deadline for the whole body
// (bodyTimeout), through nginx as without it: a 408 while the body is
// still coming. On step 26's config nginx buffered the body first, the
// app never saw the request, and such a body was held for as long as it
// kept coming, hours for 8 KB (issue 24, item 16).
func TestNginxSlowBodyEnds(t *testing.T) {
	t.Parallel()
	nginxBin := findNginx(t)
	app := httptest.NewServer(newHandler(newMemoryStore(), noClicks{}, nil, nil, nil, config{}, discardLog))
	t.Cleanup(app.Close)
	ngx := startNginx(t, nginxBin, portOf(t, app.Listener.Addr()))
	conn, err := net.Dial("tcp", ngx.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) //nolint:errcheck // the server may have closed it already
	// A drip of 400 bytes, one each 250 ms (100 s in all), far under
	// client_body_timeout (5 s) between two; bodyTimeout is 2 s.
	const size, every = 400, 250 * time.Millisecond
	if _, err := fmt.Fprintf(conn, "POST /shorten HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", size); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- answer{0, err}
			return
		}
		resp.Body.Close() //nolint:errcheck // only the status is read
		answered <- answer{resp.StatusCode, nil}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	sent, writing := 1, true
	for {
		select {
		case a := <-answered:
			if a.err != nil || a.status != http.StatusRequestTimeout {
				t.Fatalf("answer to a slow body = %d, %v; want 408", a.status, a.err)
			}
			if sent >= size {
				t.Fatalf("answered only once the whole body (%d bytes) had come", sent)
			}
			t.Logf("408 after %d of %d bytes", sent, size)
			return
		case <-tick.C:
			if sent == size || !writing {
				continue // all sent, or the server closed: wait for the answer
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				t.Logf("write after %d bytes: %v (waiting for the answer)", sent, err)
				writing = false
				continue
			}
			sent++
		}
	}
}
