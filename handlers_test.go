package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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
	h := newServer(store, config{baseURL: "https://sho.rt", baseHost: "sho.rt"}, discardLog).Handler
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
			h := newServer(store, tt.cfg, discardLog).Handler
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
	h := newServer(store, config{}, discardLog).Handler
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/healthz", 200, ""},
		{"GET", "/abcdefg", 404, ""},  // valid code, no link
		{"GET", "/abc", 404, ""},      // cannot be a code
		{"GET", "/abcdefgh", 404, ""}, // too long
		{"GET", "/abc-efg", 404, ""},  // not base62
		{"GET", "/a/b", 404, ""},      // no route
		{"GET", "/", 404, ""},         // no route
		{"GET", "/shorten", 404, ""},  // a reserved word, never a code
		{"DELETE", "/abcdefg", 405, "GET, HEAD"},
		{"PUT", "/shorten", 405, "GET, HEAD, POST"},
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

// TestConcurrentShortenAndRedirect runs writers and readers at once; under
// go test -race it fails if the memory store is touched without its lock.
func TestConcurrentShortenAndRedirect(t *testing.T) {
	forEachStore(t, testConcurrentShortenAndRedirect)
}

func testConcurrentShortenAndRedirect(t *testing.T, store Store) {
	h := newServer(store, config{}, discardLog).Handler
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
