package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// getPage sends a GET with the given headers (name, value, ...) to h.
func getPage(t *testing.T, h http.Handler, target string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func pageHandler() http.Handler {
	return newHandler(newMemoryStore(), noClicks{}, nil, nil, nil, config{}, discardLog)
}

// TestEmbeddedSite: the files built into the binary make a site, every
// file a page names is there, and every static file is named by a page
// (one no page names is weight shipped for nothing).
func TestEmbeddedSite(t *testing.T) {
	if embeddedSiteErr != nil {
		t.Fatal(embeddedSiteErr)
	}
	named := map[string]bool{}
	for _, page := range []*asset{embeddedSite.index, embeddedSite.link} {
		if placeholderRE.Match(page.plain) {
			t.Errorf("a page still holds a placeholder: %s", placeholderRE.Find(page.plain))
		}
		for _, m := range regexp.MustCompile(`/static/([^"]+)`).FindAllSubmatch(page.plain, -1) {
			if embeddedSite.static[string(m[1])] == nil {
				t.Errorf("a page names /static/%s, which is not served", m[1])
			}
			named[string(m[1])] = true
		}
	}
	for name := range embeddedSite.static {
		if !named[name] {
			t.Errorf("/static/%s is named by no page", name)
		}
	}
}

func TestNewSiteRefusesUnknownFile(t *testing.T) {
	files := fstest.MapFS{
		"web/index.html": {Data: []byte(`<script src="/static/{{app.js}}"></script>`)},
		"web/link.html":  {Data: []byte(`<link href="/static/{{app.css}}">`)},
		"web/app.css":    {Data: []byte(`body{}`)},
	}
	_, err := newSite(files)
	if err == nil || !strings.Contains(err.Error(), "app.js") {
		t.Fatalf("newSite = %v, want an error naming app.js", err)
	}
	files["web/app.js"] = &fstest.MapFile{Data: []byte(`"use strict";`)}
	s, err := newSite(files)
	if err != nil {
		t.Fatal(err)
	}
	// The name is the content's: change a byte, and it changes.
	before := string(s.index.plain)
	files["web/app.js"] = &fstest.MapFile{Data: []byte(`"use strict"; `)}
	s, err = newSite(files)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.index.plain) == before || !regexp.MustCompile(`/static/app\.[0-9a-f]{12}\.js`).Match(s.index.plain) {
		t.Fatalf("index after a change to app.js: %s (before: %s)", s.index.plain, before)
	}
}

func TestPageServed(t *testing.T) {
	h := pageHandler()
	for _, path := range []string{"/", "/stats/AbC1234", "/stats/my-alias_2"} {
		rec := getPage(t, h, path)
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %q", path, rec.Code, rec.Header().Get("Content-Type"))
		}
		for k, want := range map[string]string{
			"Cache-Control":           pageCacheControl,
			"Content-Security-Policy": pageSecurity["Content-Security-Policy"],
			"X-Content-Type-Options":  "nosniff",
			"Vary":                    "Accept-Encoding",
		} {
			if got := rec.Header().Get(k); got != want {
				t.Errorf("GET %s: %s = %q, want %q", path, k, got, want)
			}
		}
		// The policy's teeth, whatever else it says.
		csp := rec.Header().Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, d+";") && !strings.HasSuffix(csp, d) {
				t.Errorf("GET %s: the CSP lacks %s: %q", path, d, csp)
			}
		}
		if strings.Contains(csp, "unsafe") || rec.Header().Get("Referrer-Policy") != "same-origin" {
			t.Errorf("GET %s: CSP %q, Referrer-Policy %q", path, csp, rec.Header().Get("Referrer-Policy"))
		}
		if !strings.Contains(rec.Body.String(), "<!doctype html>") || rec.Header().Get("ETag") == "" {
			t.Errorf("GET %s: body %.40q, ETag %q", path, rec.Body, rec.Header().Get("ETag"))
		}
	}
	// Not a page: a code that cannot be, more segments, an unknown file.
	for _, path := range []string{"/stats/a.b", "/stats/x/y", "/static/app.css", "/static/app.000000000000.css", "/index.html"} {
		rec := getPage(t, h, path)
		if rec.Code != 404 {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
			continue
		}
		jsonError(t, rec)
	}
	// The mux's own 405 for / and the pages: it lists GET and HEAD.
	if rec := do(t, h, http.MethodPost, "/", ""); rec.Code != 405 || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q; want 405, GET, HEAD", rec.Code, rec.Header().Get("Allow"))
	}
}

func TestStaticCachedForever(t *testing.T) {
	h := pageHandler()
	for name, a := range embeddedSite.static {
		rec := getPage(t, h, "/static/"+name)
		if rec.Code != 200 || rec.Header().Get("Cache-Control") != staticCacheControl ||
			rec.Header().Get("Content-Type") != a.contentType || !bytes.Equal(rec.Body.Bytes(), a.plain) {
			t.Errorf("GET /static/%s: %d, Cache-Control %q, Content-Type %q", name, rec.Code,
				rec.Header().Get("Cache-Control"), rec.Header().Get("Content-Type"))
		}
		if rec.Header().Get("Content-Security-Policy") != "" {
			t.Errorf("GET /static/%s has a CSP: only pages need one", name)
		}
	}
}

// TestPageGzipAndETag: gzip for a client that asks (and not for one that
// refuses it with q=0), the same bytes once unzipped, a 304 without a body
// for the ETag of what the client holds, and a 200 for the other
// representation's ETag.
func TestPageGzipAndETag(t *testing.T) {
	h := pageHandler()
	plain := getPage(t, h, "/")
	zipped := getPage(t, h, "/", "Accept-Encoding", "br, gzip;q=0.8")
	if zipped.Header().Get("Content-Encoding") != "gzip" || zipped.Body.Len() >= plain.Body.Len() {
		t.Fatalf("with gzip: Content-Encoding %q, %d bytes against %d", zipped.Header().Get("Content-Encoding"), zipped.Body.Len(), plain.Body.Len())
	}
	if zipped.Header().Get("Content-Length") != strconv.Itoa(zipped.Body.Len()) {
		t.Errorf("Content-Length %q for %d bytes", zipped.Header().Get("Content-Length"), zipped.Body.Len())
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, plain.Body.Bytes()) {
		t.Fatalf("gunzipped body differs from the plain one (%v)", err)
	}
	if refused := getPage(t, h, "/", "Accept-Encoding", "gzip;q=0, identity"); refused.Header().Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 got Content-Encoding %q", refused.Header().Get("Content-Encoding"))
	}
	pe, ze := plain.Header().Get("ETag"), zipped.Header().Get("ETag")
	if pe == ze {
		t.Fatalf("one ETag %s for two representations", pe)
	}
	if rec := getPage(t, h, "/", "Accept-Encoding", "gzip", "If-None-Match", ze); rec.Code != 304 || rec.Body.Len() != 0 {
		t.Errorf("If-None-Match of what is held: %d with %d bytes, want 304 and none", rec.Code, rec.Body.Len())
	}
	if rec := getPage(t, h, "/", "If-None-Match", `"other", `+pe); rec.Code != 304 {
		t.Errorf("If-None-Match listing the ETag: %d, want 304", rec.Code)
	}
	if rec := getPage(t, h, "/", "If-None-Match", ze); rec.Code != 200 {
		t.Errorf("the gzip ETag from a client not asking for gzip: %d, want 200", rec.Code)
	}
	if rec := do(t, h, http.MethodHead, "/", ""); rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != strconv.Itoa(plain.Body.Len()) {
		t.Errorf("HEAD /: %d, %d bytes, Content-Length %q", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"))
	}
}

// TestPageConditionsOverTheWire: the conditions ServeContent answers,
// over a real connection, gzipped: each answer's length must be the
// bytes sent, or the client waits for bytes that never come.
func TestPageConditionsOverTheWire(t *testing.T) {
	srv := httptest.NewServer(pageHandler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}
	a := embeddedSite.index
	for _, tc := range []struct {
		name, header, value string
		status, bytes       int
	}{
		{"If-Match of another", "If-Match", `"nope"`, 412, 0},
		{"If-Match of this", "If-Match", a.etagGz, 200, len(a.gz)},
		{"If-Match *", "If-Match", "*", 200, len(a.gz)},
		{"If-None-Match of this", "If-None-Match", a.etagGz, 304, 0},
		{"If-None-Match of another", "If-None-Match", `"nope"`, 200, len(a.gz)},
		{"Range", "Range", "bytes=0-9", 206, 10},
		{"Range past the end", "Range", "bytes=100000-", 416, -1},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Set(tc.header, tc.value)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("%s: reading the body: %v (Content-Length %q)", tc.name, err, resp.Header.Get("Content-Length"))
			continue
		}
		if resp.StatusCode != tc.status || (tc.bytes >= 0 && len(body) != tc.bytes) {
			t.Errorf("%s: %d with %d bytes, want %d with %d", tc.name, resp.StatusCode, len(body), tc.status, tc.bytes)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip", true},
		{"GZIP", true},
		{"deflate, gzip", true},
		{"br;q=1.0, gzip;q=0.5", true},
		{"x-gzip", true},
		{"*", true},
		{"gzip;q=0", false},
		{"gzip; q=0.000", false},
		{"gzip;q=abc", false},
		{"identity", false},
		{"gzipped", false},
		{"br, *;q=0", false},
		{"br, *", true},
		{"gzip;q=0, *", false}, // * stands for codings not named
		{"*, gzip;q=0", false},
		{"gzip;q=0, x-gzip", true},
	} {
		var values []string
		if tc.header != "" {
			values = []string{tc.header}
		}
		if got := acceptsGzip(values); got != tc.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

// TestCrossSiteWritesRefused: a write a browser sends from another site's
// page is a 403 in JSON and changes nothing; the same from this site's own
// page, or from a client that is no browser, goes through.
func TestCrossSiteWritesRefused(t *testing.T) {
	store := newMemoryStore()
	h := newHandler(store, noClicks{}, nil, nil, nil, config{}, discardLog)
	send := func(method, target, body string, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	body := `{"url":"https://example.com/?a=b"}`
	for _, headers := range [][]string{
		{"Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
	} {
		rec := send(http.MethodPost, "http://sho.rt/shorten", body, headers...)
		if rec.Code != http.StatusForbidden || !strings.Contains(jsonError(t, rec), "cross-site") {
			t.Errorf("POST with %q: %d %s, want 403", headers, rec.Code, rec.Body)
		}
	}
	if n := len(store.links); n != 0 {
		t.Fatalf("%d links made by refused posts", n)
	}
	var code, token string
	for _, headers := range [][]string{
		nil, // curl
		{"Sec-Fetch-Site", "same-origin"},
		{"Sec-Fetch-Site", "none"}, // typed by the user, a bookmark
		{"Origin", "http://sho.rt"},
	} {
		rec := send(http.MethodPost, "http://sho.rt/shorten", body, headers...)
		if rec.Code != http.StatusCreated {
			t.Fatalf("POST with %q: %d %s, want 201", headers, rec.Code, rec.Body)
		}
		code, token = field(t, rec, "code"), field(t, rec, "token")
	}
	for _, method := range []string{http.MethodPatch, http.MethodDelete} {
		rec := send(method, "http://sho.rt/api/links/"+code, `{"url":"https://example.com/evil"}`,
			"Authorization", "Bearer "+token, "Sec-Fetch-Site", "cross-site")
		if rec.Code != http.StatusForbidden {
			t.Errorf("%s with a good token from another site: %d, want 403", method, rec.Code)
		}
	}
	// Reads that draw on the allowance: refused from another site too,
	// before they count.
	for fetchSite, want := range map[string]int{"cross-site": 403, "same-site": 403, "same-origin": 501, "": 501} {
		rec := send(http.MethodGet, "http://sho.rt/api/links/"+code+"/stats", "", "Sec-Fetch-Site", fetchSite)
		if rec.Code != want {
			t.Errorf("GET stats with Sec-Fetch-Site %q: %d, want %d (501: stats off in this test)", fetchSite, rec.Code, want)
		}
	}
	if l, err := store.Link(context.Background(), code); err != nil || l.URL != "https://example.com/?a=b" || l.Version != 1 {
		t.Fatalf("the link after refused edits: %+v, %v", l, err)
	}
}

// field is a string field of a JSON answer.
func field(t *testing.T, rec *httptest.ResponseRecorder, name string) string {
	t.Helper()
	m := regexp.MustCompile(`"` + name + `":"([^"]*)"`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatalf("no %q in %s", name, rec.Body)
	}
	return m[1]
}
