package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var discardLog = slog.New(slog.DiscardHandler)

// do sends one request to h and returns the recorded response.
func do(t *testing.T, h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// jsonError decodes an {"error": "..."} body, failing the test if it is not one.
func jsonError(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json (body %q)", ct, rec.Body)
	}
	var body struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == "" {
		t.Fatalf("body %q is not a JSON error: %v", rec.Body, err)
	}
	return body.Error
}

func TestShortenRefusesBadInput(t *testing.T) {
	forEachStore(t, testShortenRefusesBadInput)
}

func testShortenRefusesBadInput(t *testing.T, store Store) {
	h := newServer(store, noClicks{}, nil, nil, nil, config{baseURL: "https://sho.rt", baseHost: "sho.rt"}, nil, discardLog).Handler
	tests := []struct {
		name, body string
		status     int
		errHas     string
	}{
		{"empty body", "", 400, "body is empty"},
		{"not JSON", "url=https://go.dev", 400, "malformed JSON"},
		{"truncated JSON", `{"url":"https://go.dev"`, 400, "malformed JSON"},
		{"array", `["https://go.dev"]`, 400, "JSON object"},
		{"string", `"https://go.dev"`, 400, "JSON object"},
		{"null", `null`, 400, `"url" is required`},
		{"empty object", `{}`, 400, `"url" is required`},
		{"null url", `{"url":null}`, 400, `"url" is required`},
		{"empty url", `{"url":""}`, 400, `"url" is required`},
		{"number url", `{"url":42}`, 400, `"url" must be a string`},
		{"unknown field", `{"url":"https://go.dev","code":"mine123"}`, 400, "unknown field"},
		{"two objects", `{"url":"https://go.dev"}{"url":"https://go.dev"}`, 400, "nothing after it"},
		{"trailing garbage", `{"url":"https://go.dev"} x`, 400, "nothing after it"},
		{"too large", `{"url":"https://go.dev/` + strings.Repeat("a", maxBodyBytes) + `"}`, 413, "larger than"},
		{"too large after object", `{"url":"https://go.dev"}` + strings.Repeat(" ", maxBodyBytes), 413, "larger than"},
		{"relative", `{"url":"/just/a/path"}`, 400, "invalid url"},
		{"no scheme", `{"url":"go.dev"}`, 400, "http or https"},
		{"javascript", `{"url":"javascript:alert(1)"}`, 400, "http or https"},
		{"user info", `{"url":"https://bank.com@evil.example"}`, 400, "user info"},
		{"newline", `{"url":"https://go.dev/\r\nX: y"}`, 400, "control"},
		{"space", `{"url":"https://go.dev/a b"}`, 400, "whitespace"},
		{"too long", `{"url":"https://go.dev/` + strings.Repeat("a", maxURLLength) + `"}`, 400, "longer than"},
		{"own host", `{"url":"https://sho.rt/abcdefg"}`, 400, "this shortener"},
		{"own host other case and dot", `{"url":"http://SHO.RT./x"}`, 400, "this shortener"},
		{"own host as requested", `{"url":"http://example.com/x"}`, 400, "this shortener"},
		{"loopback as a number", `{"url":"http://2130706433/"}`, 400, "loopback"},
		{"localhost", `{"url":"http://localhost:8080/"}`, 400, "localhost"},
		{"unspecified", `{"url":"http://0.0.0.0/"}`, 400, "unspecified"},
		{"bad numeric host", `{"url":"http://256.0.0.1/"}`, 400, "ends in a number"},
		{"empty label", `{"url":"https://go.dev../"}`, 400, "empty label"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, h, "POST", "http://example.com/shorten", tt.body)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tt.status, rec.Body)
			}
			if msg := jsonError(t, rec); !strings.Contains(msg, tt.errHas) {
				t.Errorf("error = %q, want it to contain %q", msg, tt.errHas)
			}
			if n := countLinks(t, store); n != 0 {
				t.Errorf("store holds %d links after a refused request, want 0", n)
			}
		})
	}
}

func TestShortenAndRedirect(t *testing.T) {
	forEachStore(t, testShortenAndRedirect)
}

func testShortenAndRedirect(t *testing.T, store Store) {
	tests := []struct {
		name, url, want string
		cfg             config
		wantShortPrefix string
	}{
		{"plain", "https://go.dev/doc", "https://go.dev/doc", config{}, "http://example.com/"},
		{"base url", "https://go.dev", "https://go.dev", config{baseURL: "https://sho.rt", baseHost: "sho.rt"}, "https://sho.rt/"},
		{"unicode", "https://bücher.example/straße", "https://xn--bcher-kva.example/stra%C3%9Fe", config{}, "http://example.com/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(store, noClicks{}, nil, nil, nil, tt.cfg, nil, discardLog).Handler
			rec := do(t, h, "POST", "http://example.com/shorten", fmt.Sprintf(`{"url":%q}`, tt.url))
			if rec.Code != http.StatusCreated {
				t.Fatalf("POST /shorten status = %d, want 201 (body %q)", rec.Code, rec.Body)
			}
			var got struct {
				Code     string `json:"code"`
				ShortURL string `json:"short_url"`
				URL      string `json:"url"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("decode %q: %v", rec.Body, err)
			}
			if !validCode(got.Code) {
				t.Errorf("code = %q, not a valid code", got.Code)
			}
			if want := tt.wantShortPrefix + got.Code; got.ShortURL != want || rec.Header().Get("Location") != want {
				t.Errorf("short_url = %q, Location = %q, want %q", got.ShortURL, rec.Header().Get("Location"), want)
			}
			if got.URL != tt.want {
				t.Errorf("url = %q, want %q", got.URL, tt.want)
			}
			for _, method := range []string{"GET", "HEAD"} {
				rec := do(t, h, method, "/"+got.Code, "")
				if rec.Code != http.StatusFound {
					t.Fatalf("%s /%s status = %d, want 302", method, got.Code, rec.Code)
				}
				if loc := rec.Header().Get("Location"); loc != tt.want {
					t.Errorf("%s /%s Location = %q, want %q", method, got.Code, loc, tt.want)
				}
			}
		})
	}
}

func TestRouting(t *testing.T) {
	forEachStore(t, testRouting)
}

func testRouting(t *testing.T, store Store) {
	h := newServer(store, noClicks{}, nil, nil, nil, config{}, nil, discardLog).Handler
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/healthz", 200, ""},
		{"GET", "/abcdefg", 404, ""},    // valid code, no link
		{"GET", "/abc", 404, ""},        // cannot be a code
		{"GET", "/abcdefgh", 404, ""},   // too long
		{"GET", "/abc-efg", 404, ""},    // not base62
		{"GET", "/a/b", 404, ""},        // no route
		{"POST", "/", 405, "GET, HEAD"}, // the page (step 19) takes GET alone
		{"GET", "/shorten/", 404, ""},   // no route
		{"HEAD", "/healthz", 200, ""},
		{"DELETE", "/abcdefg", 405, "GET, HEAD"},
		// /shorten is never taken for a code, and takes POST alone.
		{"GET", "/shorten", 405, "POST"},
		{"HEAD", "/shorten", 405, "POST"},
		{"PUT", "/shorten", 405, "POST"},
		{"DELETE", "/shorten", 405, "POST"},
		{"PATCH", "/shorten", 405, "POST"},
		{"OPTIONS", "/shorten", 405, "POST"},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"PUT", "/healthz", 405, "GET, HEAD"},
		{"DELETE", "/healthz", 405, "GET, HEAD"},
		// A link's API path takes GET (and HEAD), PATCH and DELETE.
		{"PUT", "/api/links/abcdefg", 405, "GET, HEAD, PATCH, DELETE"},
		{"POST", "/api/links/abcdefg", 405, "GET, HEAD, PATCH, DELETE"},
		{"PATCH", "/api/links/abcdefg", 401, ""},
		{"DELETE", "/api/links/abcdefg", 401, ""},
	}
	for _, tt := range tests {
		rec := do(t, h, tt.method, tt.path, "")
		if rec.Code != tt.status {
			t.Errorf("%s %s status = %d, want %d", tt.method, tt.path, rec.Code, tt.status)
			continue
		}
		if tt.status == 200 {
			if body := rec.Body.String(); body != "ok" {
				t.Errorf("%s %s body = %q, want ok", tt.method, tt.path, body)
			}
			continue
		}
		jsonError(t, rec)
		if got := rec.Header().Get("Allow"); got != tt.allow {
			t.Errorf("%s %s Allow = %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
}

// TestShortenRefusesOwnHostInAnySpelling checks that the loop guard compares
// hosts as a browser reads them, for both BASE_URL's host and the host the
// request came to.
func TestShortenRefusesOwnHostInAnySpelling(t *testing.T) {
	tests := []struct {
		name     string
		cfg      config
		reqURL   string // where the POST is sent; its host is the request's Host
		url      string
		wantCode int
	}{
		{"base as decimal", config{baseURL: "http://192.0.2.1", baseHost: "192.0.2.1"}, "http://sho.rt/shorten", "http://3221225985/x", 400},
		{"base as hex", config{baseURL: "http://192.0.2.1", baseHost: "192.0.2.1"}, "http://sho.rt/shorten", "http://0xc0000201/x", 400},
		{"base as octal", config{baseURL: "http://192.0.2.1", baseHost: "192.0.2.1"}, "http://sho.rt/shorten", "http://0300.0.2.1/x", 400},
		{"base as short form", config{baseURL: "http://192.0.2.1", baseHost: "192.0.2.1"}, "http://sho.rt/shorten", "http://192.0.513/x", 400},
		{"base as mapped IPv6", config{baseURL: "http://192.0.2.1", baseHost: "192.0.2.1"}, "http://sho.rt/shorten", "http://[::ffff:192.0.2.1]/x", 400},
		{"base IPv6 spelled longer", config{baseURL: "http://[2001:db8::1]", baseHost: "2001:db8::1"}, "http://sho.rt/shorten", "http://[2001:db8:0:0::1]/x", 400},
		{"request host as decimal", config{}, "http://192.0.2.1:8080/shorten", "http://3221225985/x", 400},
		{"request host as mapped IPv6", config{}, "http://[::ffff:192.0.2.1]:8080/shorten", "http://192.0.2.1/x", 400},
		{"request host numeric, url dotted", config{}, "http://3221225985/shorten", "https://192.0.2.1/x", 400},
		{"a neighbour is fine", config{baseURL: "http://192.0.2.1", baseHost: "192.0.2.1"}, "http://192.0.2.1/shorten", "http://192.0.2.2/x", 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(newMemoryStore(), noClicks{}, nil, nil, nil, tt.cfg, nil, discardLog).Handler
			rec := do(t, h, "POST", tt.reqURL, fmt.Sprintf(`{"url":%q}`, tt.url))
			if rec.Code != tt.wantCode {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode != 201 {
				if msg := jsonError(t, rec); !strings.Contains(msg, "this shortener") {
					t.Errorf("error = %q, want it to say the url points at this shortener", msg)
				}
			}
		})
	}
}

// TestShortenBodyReadErrors sends a body that stalls, or stops short of its
// Content-Length, over a real connection to a real server, and checks that
// the answer says so in fixed words: the network error's text names the
// server's address and belongs in the log alone.
func TestShortenBodyReadErrors(t *testing.T) {
	tests := []struct {
		name   string
		finish func(*net.TCPConn) error // after half the body is sent
		status int
		errMsg string
		logHas string
	}{
		// The server's ReadTimeout is 10 s and the test waits 5 s: the 408
		// must come from bodyTimeout (2 s).
		{"stalls past the body deadline", func(*net.TCPConn) error { return nil }, http.StatusRequestTimeout, "request body not received in time", "i/o timeout"},
		{"ends before its Content-Length", (*net.TCPConn).CloseWrite, http.StatusBadRequest, "request body ended early", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncBuffer{}
			// Metrics and the access log on, as deployed: the body's
			// deadline must reach the connection through their wrapper.
			srv := newServer(newMemoryStore(), noClicks{}, nil, nil, newMetrics(prometheus.NewRegistry()), config{accessLog: true}, nil, slog.New(slog.NewTextHandler(logs, nil)))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			t.Cleanup(func() {
				if err := srv.Close(); err != nil {
					t.Errorf("close server: %v", err)
				}
				if err := <-served; !errors.Is(err, http.ErrServerClosed) {
					t.Errorf("serve: %v", err)
				}
			})

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn := c.(*net.TCPConn)
			defer conn.Close()
			req := "POST /shorten HTTP/1.1\r\nHost: sho.rt\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" +
				`{"url":"https://go.dev/`
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			if err := tt.finish(conn); err != nil {
				t.Fatal(err)
			}
			if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read response body: %v", err)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d (body %q)", resp.StatusCode, tt.status, body)
			}
			var got struct{ Error string }
			if err := json.Unmarshal(body, &got); err != nil || got.Error != tt.errMsg {
				t.Errorf("body = %q, want {\"error\":%q}", body, tt.errMsg)
			}
			_, serverPort, err := net.SplitHostPort(ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			_, clientPort, err := net.SplitHostPort(conn.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			for _, leak := range []string{"127.0.0.1", serverPort, clientPort, "tcp", "timeout", "EOF"} {
				if strings.Contains(string(body), leak) {
					t.Errorf("body %q contains %q", body, leak)
				}
			}
			if !strings.Contains(logs.String(), tt.logHas) {
				t.Errorf("log does not hold the detail %q:\n%s", tt.logHas, logs)
			}
		})
	}
}

// TestConcurrentShortenAndRedirect runs writers and readers at once; under
// go test -race it fails if the memory store is touched without its lock.
func TestConcurrentShortenAndRedirect(t *testing.T) {
	forEachStore(t, testConcurrentShortenAndRedirect)
}

func testConcurrentShortenAndRedirect(t *testing.T, store Store) {
	h := newServer(store, noClicks{}, nil, nil, nil, config{}, nil, discardLog).Handler
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				target := fmt.Sprintf("https://example.org/%d/%d", w, i)
				rec := do(t, h, "POST", "http://sho.rt/shorten", fmt.Sprintf(`{"url":%q}`, target))
				var got struct{ Code string }
				if err := json.NewDecoder(io.Reader(rec.Body)).Decode(&got); err != nil || rec.Code != 201 {
					errs <- fmt.Errorf("POST %s: status %d, %v", target, rec.Code, err)
					continue
				}
				rec = do(t, h, "GET", "/"+got.Code, "")
				if loc := rec.Header().Get("Location"); rec.Code != 302 || loc != target {
					errs <- fmt.Errorf("GET /%s: status %d, Location %q, want 302 %q", got.Code, rec.Code, loc, target)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := countLinks(t, store); n != workers*each {
		t.Errorf("store holds %d links, want %d", n, workers*each)
	}
}

// TestShortURLScheme: behind a trusted proxy that terminates TLS, short_url
// takes the scheme the proxy says the client used (X-Forwarded-Proto, http
// or https only); anyone else's header is ignored, and BASE_URL wins.
func TestShortURLScheme(t *testing.T) {
	tests := []struct {
		name, base, peer, proto, want string
	}{
		{"trusted proxy says https", "", "127.0.0.1:4000", "https", "https://sho.rt/"},
		{"trusted proxy says http", "", "127.0.0.1:4000", "http", "http://sho.rt/"},
		{"trusted proxy, no header", "", "127.0.0.1:4000", "", "http://sho.rt/"},
		{"trusted proxy, another value", "", "127.0.0.1:4000", "ftp", "http://sho.rt/"},
		{"trusted proxy, a list", "", "127.0.0.1:4000", "https, http", "http://sho.rt/"},
		{"untrusted peer says https", "", "203.0.113.7:4000", "https", "http://sho.rt/"},
		{"base url wins", "https://s.example", "127.0.0.1:4000", "http", "https://s.example/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(func(k string) string {
				return map[string]string{"TRUSTED_PROXIES": "127.0.0.1", "BASE_URL": tt.base}[k]
			})
			if err != nil {
				t.Fatal(err)
			}
			h := newHandler(newMemoryStore(), noClicks{}, nil, nil, nil, cfg, discardLog)
			r := httptest.NewRequest("POST", "http://sho.rt/shorten", strings.NewReader(`{"url":"https://go.dev"}`))
			r.RemoteAddr = tt.peer
			if tt.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusCreated {
				t.Fatalf("status = %d, want 201 (body %q)", rec.Code, rec.Body)
			}
			var got struct {
				ShortURL string `json:"short_url"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("decode %q: %v", rec.Body, err)
			}
			if !strings.HasPrefix(got.ShortURL, tt.want) || rec.Header().Get("Location") != got.ShortURL {
				t.Errorf("short_url = %q, Location %q; want both %s…", got.ShortURL, rec.Header().Get("Location"), tt.want)
			}
		})
	}
}

// TestShortenWithoutHost: HTTP/1.0 may leave Host out; without BASE_URL
// there is then no short URL to give, and the answer says so in JSON
// (instead of a short_url of "http:///code").
func TestShortenWithoutHost(t *testing.T) {
	srv := httptest.NewServer(newHandler(newMemoryStore(), noClicks{}, nil, nil, nil, config{}, discardLog))
	defer srv.Close()
	c, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	body := `{"url":"https://go.dev"}`
	if _, err := fmt.Fprintf(c, "POST /shorten HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusBadRequest || res.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(got), "Host") {
		t.Errorf("HTTP/1.0 without Host: %d %s %q; want a 400 JSON error naming Host", res.StatusCode, res.Header.Get("Content-Type"), got)
	}
}

// TestShortenAlias: a link can be named (step 18): its alias is its code;
// an alias taken, even by a deleted link, is 409 and changes nothing; a
// bad or reserved one is 400.
func TestShortenAlias(t *testing.T) {
	forEachStore(t, testShortenAlias)
}

func testShortenAlias(t *testing.T, store Store) {
	h := newServer(store, noClicks{}, nil, nil, nil, config{}, nil, discardLog).Handler
	create := func(body string) (*httptest.ResponseRecorder, string, string) {
		rec := do(t, h, "POST", "http://example.com/shorten", body)
		var got struct{ Code, Token string }
		if rec.Code == http.StatusCreated {
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("decode %q: %v", rec.Body, err)
			}
		}
		return rec, got.Code, got.Token
	}
	rec, code, token := create(`{"url":"https://go.dev/a","alias":"Go-Launch_2"}`)
	if rec.Code != http.StatusCreated || code != "Go-Launch_2" {
		t.Fatalf("create with alias: %d %q, want 201 and code Go-Launch_2", rec.Code, rec.Body)
	}
	if rec := do(t, h, "GET", "/Go-Launch_2", ""); rec.Code != http.StatusFound || rec.Header().Get("Location") != "https://go.dev/a" {
		t.Fatalf("GET /Go-Launch_2: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	if rec := do(t, h, "GET", "/go-launch_2", ""); rec.Code != http.StatusNotFound {
		t.Errorf("GET /go-launch_2 (another case) = %d, want 404: aliases are case-sensitive", rec.Code)
	}
	n := countLinks(t, store)
	rec, _, _ = create(`{"url":"https://go.dev/b","alias":"Go-Launch_2"}`)
	if rec.Code != http.StatusConflict || !strings.Contains(jsonError(t, rec), "alias taken") {
		t.Fatalf("second create with the alias: %d %q, want 409 alias taken", rec.Code, rec.Body)
	}
	if rec := do(t, h, "GET", "/Go-Launch_2", ""); rec.Header().Get("Location") != "https://go.dev/a" {
		t.Errorf("after the 409 the alias leads to %q, want the first URL", rec.Header().Get("Location"))
	}
	req := httptest.NewRequest("DELETE", "/api/links/Go-Launch_2", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	del := httptest.NewRecorder()
	h.ServeHTTP(del, req)
	if del.Code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %q", del.Code, del.Body)
	}
	if rec, _, _ := create(`{"url":"https://go.dev/c","alias":"Go-Launch_2"}`); rec.Code != http.StatusConflict {
		t.Errorf("create with a deleted link's alias: %d, want 409 (a printed old link must never lead somewhere new)", rec.Code)
	}
	for _, body := range []string{
		`{"url":"https://go.dev/","alias":""}`,
		`{"url":"https://go.dev/","alias":"abc"}`,
		`{"url":"https://go.dev/","alias":"has space"}`,
		`{"url":"https://go.dev/","alias":"-lead"}`,
		`{"url":"https://go.dev/","alias":"HealthZ"}`,
		`{"url":"https://go.dev/","alias":"api"}`,
		`{"url":"https://go.dev/","alias":"` + strings.Repeat("a", 33) + `"}`,
		`{"url":"https://go.dev/","alias":7}`,
		`{"url":"ftp://go.dev/","alias":"fine-alias"}`,
	} {
		if rec, _, _ := create(body); rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %q, want 400", body, rec.Code, rec.Body)
		}
	}
	if got := countLinks(t, store); got != n {
		t.Errorf("links = %d after refused creates, want %d", got, n)
	}
	if rec, code, _ := create(`{"url":"https://go.dev/d","alias":null}`); rec.Code != http.StatusCreated || len(code) != codeLength {
		t.Errorf("alias null: %d, code %q; want 201 and a generated code", rec.Code, code)
	}
}
