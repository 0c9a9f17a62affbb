package main

// Fuzz targets for what parses input the service does not control: the
// X-Forwarded-For header and the peer address, the TRUSTED_PROXIES
// setting, a create's JSON body, and the URL a create stores (which the
// cache must accept back). Run one with
//
//	go test -run='^$' -fuzz='^FuzzClientIP$' -fuzztime=30s .
//
// Without -fuzz, go test runs each target on its f.Add seeds and on the
// inputs saved under testdata/fuzz/, as ordinary tests.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzClientIP checks that clientIP never panics and that what it returns is
// explained by its input: an invalid address only for a peer that is not an
// address; otherwise the peer itself, or an X-Forwarded-For entry that a
// trusted peer passed on, with only parsed, trusted entries to its right.
func FuzzClientIP(f *testing.F) {
	for _, s := range []struct{ proxies, remote, xff1, xff2 string }{
		{"", "192.0.2.1:1234", "", ""},
		{"", "192.0.2.1:1234", "198.51.100.7", ""},
		{"127.0.0.1/32", "127.0.0.1:5555", "198.51.100.7", ""},
		{"127.0.0.1/32", "127.0.0.1:5555", "1.1.1.1, 198.51.100.7", ""},
		{"127.0.0.1/32,10.0.0.0/8", "127.0.0.1:5555", "198.51.100.7, 10.1.2.3", ""},
		{"127.0.0.1/32,10.0.0.0/8", "127.0.0.1:5555", "198.51.100.7", "10.1.2.3"},
		{"127.0.0.1/32,10.0.0.0/8", "127.0.0.1:5555", "10.9.9.9, 10.1.2.3", ""},
		{"127.0.0.1/32", "127.0.0.1:5555", "198.51.100.7, garbage", ""},
		{"127.0.0.1/32", "127.0.0.1:5555", "garbage, 198.51.100.7", ""},
		{"127.0.0.1/32", "127.0.0.1:5555", "::ffff:198.51.100.7", ""},
		{"::1", "[::1]:443", "2001:db8::1", ""},
		{"::1", "[::1]:443", "[2001:db8::1]:80", ""},
		{"fe80::/10", "[fe80::1%eth0]:443", "2001:db8::1", ""},
		{"::ffff:127.0.0.1", "[::ffff:127.0.0.1]:1", "192.0.2.9", ""},
		{"127.0.0.1", "127.0.0.1", "192.0.2.9", ""},
		{"127.0.0.1", "@", "192.0.2.9", ""},
		{"127.0.0.1", "", ",,,", ""},
	} {
		f.Add(s.proxies, s.remote, s.xff1, s.xff2)
	}
	f.Fuzz(func(t *testing.T, proxies, remote, xff1, xff2 string) {
		tp, err := parseTrustedProxies(proxies, true)
		if err != nil {
			return // FuzzParseTrustedProxies covers refused settings
		}
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		// Set without canonical checks: a header value a server would
		// refuse still must not panic here. xff2, if any, is a second
		// X-Forwarded-For header.
		if xff1 != "" || xff2 != "" {
			r.Header["X-Forwarded-For"] = []string{xff1}
			if xff2 != "" {
				r.Header.Add("X-Forwarded-For", xff2)
			}
		}
		got := tp.clientIP(r)
		peer := peerAddr(r)

		if !got.IsValid() {
			if peer.IsValid() {
				t.Fatalf("clientIP = invalid with peer %v (RemoteAddr %q, XFF %q)", peer, remote, r.Header.Values("X-Forwarded-For"))
			}
			return
		}
		if got.Is4In6() {
			t.Fatalf("clientIP = %v, an IPv4-mapped address: one client would have two rate limit keys", got)
		}
		if !tp.trusts(peer) {
			if got != peer {
				t.Fatalf("clientIP = %v, want the untrusted peer %v (XFF %q must be ignored)", got, peer, r.Header.Values("X-Forwarded-For"))
			}
			return
		}

		var hops []string
		for _, h := range r.Header.Values("X-Forwarded-For") {
			hops = append(hops, strings.Split(h, ",")...)
		}
		parsed := make([]netip.Addr, len(hops)) // invalid where the entry is not an address
		for i, h := range hops {
			if a, err := netip.ParseAddr(strings.TrimSpace(h)); err == nil {
				parsed[i] = a.Unmap()
			}
		}
		// trustedRight reports whether every entry right of i parsed and
		// is a trusted proxy: the only way the walk from the right gets
		// past them.
		trustedRight := func(i int) bool {
			for _, a := range parsed[i+1:] {
				if !a.IsValid() || !tp.trusts(a) {
					return false
				}
			}
			return true
		}

		// The peer stands when there is nothing to read, or when the
		// rightmost entry, which our own proxy wrote, is not an address.
		if got == peer && (len(hops) == 0 || !parsed[len(parsed)-1].IsValid()) {
			return
		}
		for i := len(parsed) - 1; i >= 0; i-- {
			if parsed[i] != got || !trustedRight(i) {
				continue
			}
			// The walk stops at the first untrusted entry; it stops at a
			// trusted one only at the left end or before an entry that
			// is not an address.
			if !tp.trusts(got) || i == 0 || !parsed[i-1].IsValid() {
				return
			}
		}
		t.Fatalf("clientIP = %v with trusted peer %v and X-Forwarded-For %q: not the rightmost entry that is not a trusted proxy",
			got, peer, r.Header.Values("X-Forwarded-For"))
	})
}

// FuzzParseTrustedProxies checks that parseTrustedProxies never panics, that
// a refusal is an error with a message, and that an accepted list is
// consistent: its prefixes are masked, written out and read back they give
// the same list, and each one trusts the address it was written with.
func FuzzParseTrustedProxies(f *testing.F) {
	for _, s := range []string{
		"", " ", ",", "127.0.0.1", "127.0.0.1/32,10.0.0.0/8,::1", "10.1.2.3/8",
		"::1/128, fd00::/8 ,", "0.0.0.0/0", "::/0", "192.168.0.1/33", "::ffff:10.0.0.1",
		"fe80::1%eth0", "1.2.3", "[::1]", "10.0.0.1:80", "a,b", "::ffff:0.0.0.0/96",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tp, err := parseTrustedProxies(raw, true)
		if err != nil {
			if tp != nil {
				t.Fatalf("parseTrustedProxies(%q) = %v and error %v: want no list with an error", raw, tp, err)
			}
			if err.Error() == "" {
				t.Fatalf("parseTrustedProxies(%q): error with an empty message", raw)
			}
			return
		}
		var entries []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				entries = append(entries, s)
			}
		}
		if len(tp) != len(entries) {
			t.Fatalf("parseTrustedProxies(%q) = %d prefixes, want one per entry (%d)", raw, len(tp), len(entries))
		}
		written := make([]string, len(tp))
		for i, p := range tp {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("parseTrustedProxies(%q)[%d] = %v: want a valid, masked prefix", raw, i, p)
			}
			if p.Bits() == 0 {
				t.Fatalf("parseTrustedProxies(%q)[%d] = %v: trusts every address", raw, i, p)
			}
			written[i] = p.String()
		}
		again, err := parseTrustedProxies(strings.Join(written, ","), true)
		if err != nil || !slices.Equal(again, tp) {
			t.Fatalf("parseTrustedProxies(%q) = %v; written out and read back: %v, %v", raw, tp, again, err)
		}
		for i, s := range entries {
			a, err := netip.ParseAddr(s)
			if err != nil {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					t.Fatalf("parseTrustedProxies(%q) accepted %q, which is neither an address nor a prefix", raw, s)
				}
				a = p.Addr()
			}
			if !tp.trusts(a.WithZone("")) {
				t.Fatalf("parseTrustedProxies(%q): entry %q gave %v, which does not trust %v, the address it names", raw, s, tp[i], a)
			}
		}
	})
}

// timeoutError is a read error like the one a body deadline gives.
type timeoutError struct{}

func (timeoutError) Error() string   { return "read tcp 10.0.0.5:8080->192.0.2.1:5555: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// cutReader returns the first n bytes of a body, then err, as a client
// that went away (or stalled) part way through sending it.
type cutReader struct {
	body []byte
	err  error
}

func (c *cutReader) Read(p []byte) (int, error) {
	if len(c.body) == 0 {
		return 0, c.err
	}
	n := copy(p, c.body)
	c.body = c.body[n:]
	return n, nil
}

// FuzzDecodeJSON checks that whatever body a create sends, and wherever its
// reading fails, decodeJSON and writeError answer 2xx or 4xx (never a 5xx,
// never a panic), with a JSON error that does not leak a read error's text.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"url":"https://go.dev"}`, `{"url":"https://go.dev"}{}`, `{"url":"https://go.dev"} x`,
		`{"url":1}`, `[]`, `"x"`, `null`, `{}`, ``, `{`, `{"url":"a","other":1}`,
		`{"URL":"https://go.dev"}`, `{"url":"\ud800"}`, "\xff", `{"url":"https://go.dev"}` + "\n\n",
		strings.Repeat(" ", maxBodyBytes) + `{}`, `{"url":"` + strings.Repeat("a", maxBodyBytes) + `"}`,
	} {
		f.Add([]byte(s), uint16(0), uint8(0))
		f.Add([]byte(s), uint16(len(s)/2), uint8(1))
		f.Add([]byte(s), uint16(len(s)/2), uint8(2))
	}
	log := slog.New(slog.DiscardHandler)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL string `json:"url"`
		}
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	f.Fuzz(func(t *testing.T, body []byte, cut uint16, how uint8) {
		// how: 0 the whole body arrives; 1 the client goes away after cut
		// bytes; 2 the body deadline passes after cut bytes.
		var rd io.Reader = strings.NewReader(string(body))
		switch how % 3 {
		case 1:
			rd = &cutReader{body: body[:min(int(cut), len(body))], err: io.ErrUnexpectedEOF}
		case 2:
			rd = &cutReader{body: body[:min(int(cut), len(body))], err: timeoutError{}}
		}
		req := httptest.NewRequest(http.MethodPost, "/shorten", rd)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)

		code := rec.Code
		if code/100 != 2 && code/100 != 4 {
			t.Fatalf("body %q (cut %d, how %d): status %d, want 2xx or 4xx; body %s", body, cut, how%3, code, rec.Body)
		}
		if code/100 == 2 {
			// Accepted: the object named "url" at most once, and
			// exactly so (step 27's checkJSONKeys), by the decoder's own
			// reading.
			if keys := topKeysByDecoder(body); len(keys) > 1 || len(keys) == 1 && keys[0] != "url" {
				t.Fatalf("body %q accepted, with top-level keys %q matching \"url\": want at most one, written \"url\"", body, keys)
			}
			return
		}
		var resp struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Error == "" {
			t.Fatalf("body %q: status %d with %q, want a JSON error: %v", body, code, rec.Body, err)
		}
		if strings.Contains(resp.Error, "10.0.0.5") || strings.Contains(resp.Error, "i/o timeout") {
			t.Fatalf("body %q: the error %q shows the read error's text", body, resp.Error)
		}
	})
}

// FuzzNormalizedURLIsCacheable checks what the cache relies on: a URL that
// normalizeURL accepts is, in its normalized form, a fixed point of
// normalizeURL (so that checking a cached value as strictly as a create
// gives it back unchanged) and passes the cache's own check, so that a
// stored link is never refused when it is read back from Redis.
// (FuzzNormalizeURL, in validate_test.go, checks the form of the output.)
func FuzzNormalizedURLIsCacheable(f *testing.F) {
	for _, s := range []string{
		"https://go.dev", "HTTPS://Go.Dev/a b", "http://[2001:db8::1]:80/", "https://bücher.example/ß?ä#ö",
		"https://example.com:0443/", "https://example.com./", "https://xn--bcher-kva.example/",
		"https://a.b/%zz", "https://a.b/%41?%41#%41", "https://a.b/?q=ä&r=%E2%80%8C", "https://a.b/#frag ment",
		"http://192.0.2.1:8080/x;y", "https://a.b/\u200c", "https://a.b/" + strings.Repeat("é", 700),
		"https://a.b?", "https://a.b#", "https://a.b/..%2f", "https://a.b/p?q#f?g",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := normalizeURL(in)
		if err != nil {
			return
		}
		out := u.String()
		if !storableURL(out) {
			t.Fatalf("normalizeURL(%q) = %q, which the cache's storableURL refuses", in, out)
		}
		again, err := normalizeURL(out)
		if err != nil {
			t.Fatalf("normalizeURL(%q) = %q, which normalizeURL then refuses: %v", in, out, err)
		}
		if got := again.String(); got != out {
			t.Fatalf("normalizeURL(%q) = %q, but normalizeURL(%q) = %q: want the same", in, out, out, got)
		}
	})
}

// FuzzStatsInput: what a click brings (Referer, User-Agent) and a stats
// query never panic; a referrer host is one of the two markers or a
// lower-case host of at most 253 characters of the allowed ones; an
// accepted query is a non-empty range on its buckets' boundaries, within
// maxStatsPoints.
func FuzzStatsInput(f *testing.F) {
	f.Add("https://news.example.com/x?y=1", "Mozilla/5.0 Firefox", "from=2026-12-01T00:00:00Z&by=day")
	f.Add("", "", "")
	f.Add("http://[::1]:80/", "curl/8", "to=2026-12-01T10:30:00%2B05:30")
	f.Fuzz(func(t *testing.T, referer, agent, query string) {
		host := referrerHost(referer)
		if host != refNone && host != refOther {
			if len(host) > maxHostLen || host != strings.ToLower(host) || strings.ContainsAny(host, "/?#@ \"'<>") {
				t.Errorf("referrerHost(%q) = %q", referer, host)
			}
		}
		if c := classify(agent); c >= agentClasses {
			t.Errorf("classify(%q) = %d", agent, c)
		}
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		now := time.Date(2026, 12, 1, 15, 42, 0, 0, time.UTC)
		q, err := parseStatsQuery(v, now)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("%q: error %v is not a 400", query, err)
			}
			return
		}
		step := time.Hour
		if q.by == "day" {
			step = 24 * time.Hour
		}
		if !q.from.Before(q.to) || q.to.Sub(q.from) > maxStatsPoints*step || q.from.Truncate(step) != q.from || q.to.Truncate(step) != q.to {
			t.Errorf("%q: accepted %s %v to %v", query, q.by, q.from, q.to)
		}
	})
}

// topKeysByDecoder is the top-level keys of the object body holds that
// fold to "url", as encoding/json's Token reads them: the reference
// FuzzDecodeJSON holds checkJSONKeys's own scanner to.
func topKeysByDecoder(body []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return keys
		}
		if k, _ := tok.(string); strings.EqualFold(k, "url") {
			keys = append(keys, k)
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
	}
	return keys
}
