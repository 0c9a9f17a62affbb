package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// linkClock is the clock of the tests of links that change: a fixed time,
// moved by hand.
type linkClock struct {
	mu sync.Mutex
	t  time.Time
}

func newLinkClock() *linkClock {
	return &linkClock{t: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)}
}

func (c *linkClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *linkClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *linkClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// linkServer is the handler of a server on store whose links expire by
// clock.
func linkServer(store Store, clock *linkClock) http.Handler {
	return newServer(store, noClicks{}, nil, nil, nil, config{now: clock.now}, nil, discardLog).Handler
}

// doAuth sends one request to h with an Authorization header (none if
// auth is "") and returns the recorded response.
func doAuth(t *testing.T, h http.Handler, method, target, body string, auth ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// created is the answer to a create.
type created struct {
	Code      string     `json:"code"`
	URL       string     `json:"url"`
	Redirect  int        `json:"redirect"`
	ExpiresAt *time.Time `json:"expires_at"`
	MaxClicks *int64     `json:"max_clicks"`
	Token     string     `json:"token"`
}

// create posts body to /shorten on h and returns the answer, failing the
// test unless it is a 201.
func create(t *testing.T, h http.Handler, body string) created {
	t.Helper()
	rec := do(t, h, "POST", "http://example.com/shorten", body)
	if rec.Code != http.StatusCreated {
		t.Fatalf("POST /shorten %s = %d %s, want 201", body, rec.Code, rec.Body)
	}
	var c created
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		t.Fatalf("decode %q: %v", rec.Body, err)
	}
	return c
}

// follow asks h for /code and returns the status and Location.
func follow(t *testing.T, h http.Handler, method, code string) (int, string) {
	t.Helper()
	rec := do(t, h, method, "/"+code, "")
	if rec.Code >= 400 && method != "HEAD" {
		jsonError(t, rec)
	}
	return rec.Code, rec.Header().Get("Location")
}

// unwrap is the store at the bottom of the caches and wrappers in front:
// each of them embeds the Store it wraps (the primary, for replicaReads).
func unwrap(store Store) Store {
	for {
		v := reflect.ValueOf(store)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return store
		}
		f := v.FieldByName("Store")
		if !f.IsValid() || f.Kind() != reflect.Interface || f.IsNil() {
			return store
		}
		store = f.Interface().(Store)
	}
}

// storedTokenHash is what the store keeps of code's token.
func storedTokenHash(t *testing.T, store Store, code string) []byte {
	t.Helper()
	switch s := unwrap(store).(type) {
	case *memoryStore:
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.links[code].tokenHash
	case *pgStore:
		var h []byte
		if err := s.db.QueryRow(`SELECT token_hash FROM links WHERE code = $1`, code).Scan(&h); err != nil {
			t.Fatalf("read token_hash: %v", err)
		}
		return h
	default:
		panic(fmt.Sprintf("storedTokenHash: unknown store %T", store))
	}
}

// linkNow is the link as the store at the bottom holds it (no cache).
func linkNow(t *testing.T, store Store, code string) Link {
	t.Helper()
	l, err := unwrap(store).Link(context.Background(), code)
	if err != nil {
		t.Fatalf("Link(%s): %v", code, err)
	}
	return l
}

func TestCreateNewFields(t *testing.T) {
	forEachStore(t, testCreateNewFields)
}

func testCreateNewFields(t *testing.T, store Store) {
	clock := newLinkClock()
	h := linkServer(store, clock)
	expires := clock.now().Add(time.Hour).Add(123456789 * time.Nanosecond)
	c := create(t, h, fmt.Sprintf(`{"url":"https://go.dev/x","expires_at":%q,"max_clicks":5,"redirect":307}`,
		expires.In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano)))
	wantExpires := expires.Truncate(time.Microsecond)
	if c.Redirect != 307 || c.ExpiresAt == nil || !c.ExpiresAt.Equal(wantExpires) || c.MaxClicks == nil || *c.MaxClicks != 5 {
		t.Errorf("create answered %+v, want redirect 307, expires_at %v, max_clicks 5", c, wantExpires)
	}
	if len(c.Token) != 43 {
		t.Errorf("token %q: %d characters, want 43 (32 bytes, base64url)", c.Token, len(c.Token))
	}
	// Only the hash is stored.
	raw, err := base64Raw(c.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := storedTokenHash(t, store, c.Code), sha256.Sum256(raw); !bytes.Equal(got, want[:]) {
		t.Errorf("stored token_hash %x, want SHA-256 of the token %x", got, want)
	}
	l := linkNow(t, store, c.Code)
	if l.Redirect != 307 || !l.ExpiresAt.Equal(wantExpires) || l.MaxClicks != 5 || l.Version != 1 {
		t.Errorf("stored %+v, want redirect 307, expiry %v, max_clicks 5, version 1", l, wantExpires)
	}
	rec := do(t, h, "GET", "/api/links/"+c.Code, "")
	if rec.Code != 200 || strings.Contains(rec.Body.String(), c.Token) ||
		!strings.Contains(rec.Body.String(), `"redirect":307`) || !strings.Contains(rec.Body.String(), `"max_clicks":5`) {
		t.Errorf("GET /api/links/%s = %d %s, want the new fields and no token", c.Code, rec.Code, rec.Body)
	}

	// Each status is sent as stored; 302 when none is asked for.
	for _, tt := range []struct {
		body string
		want int
	}{
		{`{"url":"https://go.dev/s"}`, 302},
		{`{"url":"https://go.dev/s","redirect":301}`, 301},
		{`{"url":"https://go.dev/s","redirect":302}`, 302},
		{`{"url":"https://go.dev/s","redirect":307}`, 307},
		{`{"url":"https://go.dev/s","redirect":308}`, 308},
		{`{"url":"https://go.dev/s","expires_at":null,"max_clicks":null}`, 302},
	} {
		c := create(t, h, tt.body)
		for range 2 { // the second from the caches, if any
			for _, method := range []string{"GET", "HEAD"} {
				if status, loc := follow(t, h, method, c.Code); status != tt.want || loc != "https://go.dev/s" {
					t.Errorf("%s: %s /%s = %d %q, want %d https://go.dev/s", tt.body, method, c.Code, status, loc, tt.want)
				}
			}
		}
	}
}

// base64Raw decodes a token.
func base64Raw(token string) ([]byte, error) {
	return base64.RawURLEncoding.Strict().DecodeString(token)
}

func TestCreateRefusesBadNewFields(t *testing.T) {
	forEachStore(t, testCreateRefusesBadNewFields)
}

func testCreateRefusesBadNewFields(t *testing.T, store Store) {
	clock := newLinkClock()
	h := linkServer(store, clock)
	now := clock.now()
	at := func(d time.Duration) string { return fmt.Sprintf("%q", now.Add(d).Format(time.RFC3339Nano)) }
	tests := []struct {
		field, value string
	}{
		{"expires_at", at(0)},
		{"expires_at", at(-time.Second)},
		{"expires_at", at(-24 * time.Hour)},
		{"expires_at", at(maxExpiresIn + time.Second)},
		{"expires_at", `"9999-12-31T23:59:59Z"`},
		{"expires_at", `"tomorrow"`},
		{"expires_at", `""`},
		{"expires_at", `"2032-01-01"`},
		{"expires_at", `"2032-01-01T00:00:00"`}, // no zone
		{"expires_at", `"2032-13-01T00:00:00Z"`},
		{"expires_at", `"2032-01-01 00:00:00Z"`},
		{"expires_at", `"+2032-01-01T00:00:00Z"`},
		{"expires_at", `"2032-01-01T00:00:00Z` + strings.Repeat("0", 100) + `"`},
		{"expires_at", `1956000000`},
		{"expires_at", `true`},
		{"expires_at", `{}`},
		{"expires_at", `["2032-01-01T00:00:00Z"]`},
		{"max_clicks", `0`},
		{"max_clicks", `-1`},
		{"max_clicks", `1.5`},
		{"max_clicks", `1.0`},
		{"max_clicks", `1e3`},
		{"max_clicks", `"5"`},
		{"max_clicks", `true`},
		{"max_clicks", `[]`},
		{"max_clicks", `{}`},
		{"max_clicks", fmt.Sprint(maxMaxClicks + 1)},
		{"max_clicks", `99999999999999999999999`},
		{"max_clicks", `-0`},
		{"redirect", `0`},
		{"redirect", `200`},
		{"redirect", `300`},
		{"redirect", `303`},
		{"redirect", `304`},
		{"redirect", `3020`},
		{"redirect", `-302`},
		{"redirect", `302.0`},
		{"redirect", `"302"`},
		{"redirect", `null`},
		{"redirect", `true`},
	}
	for _, tt := range tests {
		body := fmt.Sprintf(`{"url":"https://go.dev/","%s":%s}`, tt.field, tt.value)
		rec := do(t, h, "POST", "http://example.com/shorten", body)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: status %d %s, want 400", body, rec.Code, rec.Body)
			continue
		}
		if msg := jsonError(t, rec); !strings.Contains(msg, tt.field) {
			t.Errorf("%s: error %q does not name the field", body, msg)
		}
	}
	// A JSON number that is not one: the decoder's own 400.
	if rec := do(t, h, "POST", "http://example.com/shorten", `{"url":"https://go.dev/","max_clicks":01}`); rec.Code != http.StatusBadRequest {
		t.Errorf("max_clicks 01: status %d, want 400", rec.Code)
	}
	if n := countLinks(t, store); n != 0 {
		t.Errorf("store holds %d links after refused creates, want 0", n)
	}
}

func TestEditNeedsItsToken(t *testing.T) {
	forEachStore(t, testEditNeedsItsToken)
}

func testEditNeedsItsToken(t *testing.T, store Store) {
	clock := newLinkClock()
	h := linkServer(store, clock)
	a := create(t, h, `{"url":"https://go.dev/a"}`)
	b := create(t, h, `{"url":"https://go.dev/b"}`)
	// A link made before tokens existed: no hash.
	if err := store.Save(context.Background(), "notoken", NewLink{URL: "https://go.dev/old"}); err != nil {
		t.Fatal(err)
	}
	other, _ := newToken()
	tests := []struct {
		name   string
		code   string
		auth   []string
		status int
	}{
		{"none", a.Code, nil, 401},
		{"empty", a.Code, []string{""}, 401},
		{"basic", a.Code, []string{"Basic x"}, 401},
		{"basic with the token", a.Code, []string{"Basic " + a.Token}, 401},
		{"bearer alone", a.Code, []string{"Bearer"}, 401},
		{"bearer empty", a.Code, []string{"Bearer "}, 401},
		{"two spaces", a.Code, []string{"Bearer  " + a.Token}, 401},
		{"token and more", a.Code, []string{"Bearer " + a.Token + "x"}, 401},
		{"token cut short", a.Code, []string{"Bearer " + a.Token[:42]}, 401},
		{"token in std base64", a.Code, []string{"Bearer " + strings.NewReplacer("-", "+", "_", "/").Replace(a.Token) + "+"}, 401},
		{"not base64", a.Code, []string{"Bearer " + strings.Repeat("!", 43)}, 401},
		{"10 KB", a.Code, []string{"Bearer " + strings.Repeat("A", 10<<10)}, 401},
		{"twice", a.Code, []string{"Bearer " + a.Token, "Bearer " + a.Token}, 401},
		{"another token", a.Code, []string{"Bearer " + other}, 403},
		{"another link's token", a.Code, []string{"Bearer " + b.Token}, 403},
		{"link without a token", "notoken", []string{"Bearer " + a.Token}, 403},
	}
	before := map[string]Link{a.Code: linkNow(t, store, a.Code), "notoken": linkNow(t, store, "notoken")}
	for _, tt := range tests {
		for _, method := range []string{"PATCH", "DELETE"} {
			rec := doAuth(t, h, method, "/api/links/"+tt.code, `{"url":"https://evil.example/"}`, tt.auth...)
			if rec.Code != tt.status {
				t.Errorf("%s with %s: status %d %s, want %d", method, tt.name, rec.Code, rec.Body, tt.status)
				continue
			}
			msg := jsonError(t, rec)
			if strings.Contains(msg, a.Token) || strings.Contains(msg, b.Token) {
				t.Errorf("%s with %s: the error %q shows a token", method, tt.name, msg)
			}
			if got := rec.Header().Get("WWW-Authenticate"); (tt.status == 401) != strings.HasPrefix(got, "Bearer") {
				t.Errorf("%s with %s: WWW-Authenticate %q", method, tt.name, got)
			}
			if l := linkNow(t, store, tt.code); l != before[tt.code] {
				t.Errorf("%s with %s changed the link: %+v, was %+v", method, tt.name, l, before[tt.code])
			}
		}
	}
	if status, loc := follow(t, h, "GET", a.Code); status != 302 || loc != "https://go.dev/a" {
		t.Errorf("after the refused edits GET /%s = %d %q, want 302 https://go.dev/a", a.Code, status, loc)
	}
	// The scheme is case-insensitive.
	if rec := doAuth(t, h, "PATCH", "/api/links/"+a.Code, `{"redirect":307}`, "bearer "+a.Token); rec.Code != 200 {
		t.Errorf("PATCH with bearer in lower case = %d %s, want 200", rec.Code, rec.Body)
	}
}

func TestEditAndDelete(t *testing.T) {
	forEachStore(t, testEditAndDelete)
}

func testEditAndDelete(t *testing.T, store Store) {
	clock := newLinkClock()
	h := linkServer(store, clock)
	c := create(t, h, `{"url":"https://go.dev/v1"}`)
	bearer := "Bearer " + c.Token
	patch := func(body string) *httptest.ResponseRecorder {
		t.Helper()
		return doAuth(t, h, "PATCH", "/api/links/"+c.Code, body, bearer)
	}
	// Fill every cache first: the edit must reach past them.
	for range 2 {
		if status, loc := follow(t, h, "GET", c.Code); status != 302 || loc != "https://go.dev/v1" {
			t.Fatalf("GET /%s = %d %q, want 302 https://go.dev/v1", c.Code, status, loc)
		}
	}
	// Refused edits change nothing.
	for _, body := range []string{
		``, `{}`, `null`, `[]`, `{"code":"x"}`, `{"url":"https://go.dev/v2","token":"x"}`,
		`{"url":null}`, `{"url":""}`, `{"url":5}`, `{"url":"javascript:alert(1)"}`, `{"url":"http://example.com/own"}`,
		`{"url":"http://127.0.0.1/"}`, `{"url":"https://go.dev/` + strings.Repeat("a", maxURLLength) + `"}`,
		`{"redirect":303}`, `{"redirect":null}`, `{"max_clicks":0}`, `{"max_clicks":"1"}`,
		`{"expires_at":"yesterday"}`, `{"expires_at":1}`,
		`{"url":"https://go.dev/v2","redirect":303}`, // one bad field spoils the lot
	} {
		if rec := patch(body); rec.Code != 400 {
			t.Errorf("PATCH %s = %d %s, want 400", body, rec.Code, rec.Body)
		}
	}
	if l := linkNow(t, store, c.Code); l.Version != 1 || l.URL != "https://go.dev/v1" {
		t.Errorf("after refused edits: %+v, want version 1, url v1", l)
	}

	steps := []struct {
		body       string
		wantStatus int
		wantURL    string
		check      func(j linkJSON) bool
	}{
		{`{"url":"https://go.dev/v2"}`, 302, "https://go.dev/v2", func(j linkJSON) bool { return j.URL == "https://go.dev/v2" }},
		{`{"redirect":301}`, 301, "https://go.dev/v2", func(j linkJSON) bool { return j.Redirect == 301 }},
		{`{"url":"https://go.dev/v3","redirect":308,"max_clicks":100}`, 308, "https://go.dev/v3",
			func(j linkJSON) bool { return j.MaxClicks != nil && *j.MaxClicks == 100 && j.Redirect == 308 }},
		{`{"max_clicks":null,"expires_at":"` + clock.now().Add(time.Hour).Format(time.RFC3339) + `"}`, 308, "https://go.dev/v3",
			func(j linkJSON) bool { return j.MaxClicks == nil && j.ExpiresAt != nil }},
		{`{"expires_at":null,"redirect":302}`, 302, "https://go.dev/v3",
			func(j linkJSON) bool { return j.ExpiresAt == nil && j.Redirect == 302 }},
	}
	for i, s := range steps {
		rec := patch(s.body)
		if rec.Code != 200 {
			t.Fatalf("PATCH %s = %d %s, want 200", s.body, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), c.Token) {
			t.Errorf("PATCH answer shows the token: %s", rec.Body)
		}
		var j linkJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &j); err != nil || !s.check(j) {
			t.Errorf("PATCH %s answered %s (%v)", s.body, rec.Body, err)
		}
		for range 2 {
			if status, loc := follow(t, h, "GET", c.Code); status != s.wantStatus || loc != s.wantURL {
				t.Errorf("after PATCH %s: GET /%s = %d %q, want %d %s", s.body, c.Code, status, loc, s.wantStatus, s.wantURL)
			}
		}
		if l := linkNow(t, store, c.Code); l.Version != int64(i)+2 {
			t.Errorf("after %d edits: version %d, want %d", i+1, l.Version, i+2)
		}
	}

	unknown := doAuth(t, h, "PATCH", "/api/links/nosuch1", `{"redirect":307}`, bearer)
	if unknown.Code != 404 {
		t.Errorf("PATCH of an unknown code = %d, want 404", unknown.Code)
	}
	if rec := doAuth(t, h, "DELETE", "/api/links/"+c.Code, "", bearer); rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("DELETE = %d %q, want 204 and no body", rec.Code, rec.Body)
	}
	for range 2 {
		for _, method := range []string{"GET", "HEAD"} {
			if status, _ := follow(t, h, method, c.Code); status != http.StatusGone {
				t.Errorf("%s /%s after the delete = %d, want 410", method, c.Code, status)
			}
		}
	}
	if rec := do(t, h, "GET", "/api/links/"+c.Code, ""); rec.Code != http.StatusGone {
		t.Errorf("GET /api/links/%s after the delete = %d, want 410", c.Code, rec.Code)
	} else {
		jsonError(t, rec)
	}
	for _, method := range []string{"PATCH", "DELETE"} {
		if rec := doAuth(t, h, method, "/api/links/"+c.Code, `{"redirect":307}`, bearer); rec.Code != http.StatusGone {
			t.Errorf("%s after the delete = %d, want 410", method, rec.Code)
		}
	}
	if l := linkNow(t, store, c.Code); l.URL != "" || l.DeletedAt.IsZero() {
		t.Errorf("deleted link %+v, want its URL blanked and deleted_at set", l)
	}
	// The code is not given out again: Save refuses it.
	if err := store.Save(context.Background(), c.Code, NewLink{URL: "https://go.dev/new"}); !errors.Is(err, ErrCodeTaken) {
		t.Errorf("Save of a deleted link's code = %v, want ErrCodeTaken", err)
	}
}

func TestExpiry(t *testing.T) {
	forEachStore(t, testExpiry)
}

// testExpiry moves the clock past a link's expires_at: from then on it is
// 410, even though every cache still holds it.
func testExpiry(t *testing.T, store Store) {
	clock := newLinkClock()
	h := linkServer(store, clock)
	c := create(t, h, fmt.Sprintf(`{"url":"https://go.dev/e","expires_at":%q}`, clock.now().Add(time.Hour).Format(time.RFC3339)))
	for range 2 {
		if status, _ := follow(t, h, "GET", c.Code); status != 302 {
			t.Fatalf("GET /%s before its expiry = %d, want 302", c.Code, status)
		}
	}
	clock.add(time.Hour - time.Microsecond)
	if status, _ := follow(t, h, "GET", c.Code); status != 302 {
		t.Errorf("GET /%s a microsecond before its expiry = %d, want 302", c.Code, status)
	}
	clock.add(time.Microsecond)
	for _, method := range []string{"GET", "HEAD", "GET"} {
		if status, _ := follow(t, h, method, c.Code); status != http.StatusGone {
			t.Errorf("%s /%s at its expiry = %d, want 410", method, c.Code, status)
		}
	}
	rec := do(t, h, "GET", "/api/links/"+c.Code, "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"expired":true`) {
		t.Errorf("GET /api/links/%s after expiry = %d %s, want 200 with expired true", c.Code, rec.Code, rec.Body)
	}
	// Clearing the expiry brings it back.
	if rec := doAuth(t, h, "PATCH", "/api/links/"+c.Code, `{"expires_at":null}`, "Bearer "+c.Token); rec.Code != 200 {
		t.Fatalf("PATCH = %d %s", rec.Code, rec.Body)
	}
	if status, _ := follow(t, h, "GET", c.Code); status != 302 {
		t.Errorf("GET /%s with its expiry cleared = %d, want 302", c.Code, status)
	}
}

func TestMaxClicks(t *testing.T) {
	forEachStore(t, testMaxClicks)
}

func testMaxClicks(t *testing.T, store Store) {
	clock := newLinkClock()
	h := linkServer(store, clock)
	c := create(t, h, `{"url":"https://go.dev/m","max_clicks":3}`)
	for i := range 5 { // HEAD never counts
		if status, _ := follow(t, h, "HEAD", c.Code); status != 302 {
			t.Fatalf("HEAD %d = %d, want 302", i, status)
		}
	}
	for i := range 3 {
		if status, _ := follow(t, h, "GET", c.Code); status != 302 {
			t.Fatalf("click %d of 3 = %d, want 302", i+1, status)
		}
	}
	for _, method := range []string{"GET", "HEAD", "GET"} {
		if status, _ := follow(t, h, method, c.Code); status != http.StatusGone {
			t.Errorf("%s past max_clicks = %d, want 410", method, status)
		}
	}
	if l := linkNow(t, store, c.Code); l.Clicks != 3 {
		t.Errorf("clicks = %d, want 3: a click past max_clicks is not counted", l.Clicks)
	}

	// Fifty at once on a link with ten.
	const clients, limit = 50, 10
	c = create(t, h, fmt.Sprintf(`{"url":"https://go.dev/m","max_clicks":%d}`, limit))
	var wg sync.WaitGroup
	statuses := make(chan int, clients)
	start := make(chan struct{})
	for range clients {
		wg.Go(func() {
			<-start
			rec := do(t, h, "GET", "/"+c.Code, "")
			statuses <- rec.Code
		})
	}
	close(start)
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	if counts[302] != limit || counts[410] != clients-limit {
		t.Errorf("%d clicks at once on max_clicks %d: %v, want %d × 302 and %d × 410", clients, limit, counts, limit, clients-limit)
	}
	if l := linkNow(t, store, c.Code); l.Clicks != limit {
		t.Errorf("clicks = %d, want %d", l.Clicks, limit)
	}
	// Raising the limit gives clicks back; clearing it removes it.
	if rec := doAuth(t, h, "PATCH", "/api/links/"+c.Code, `{"max_clicks":11}`, "Bearer "+c.Token); rec.Code != 200 {
		t.Fatalf("PATCH = %d %s", rec.Code, rec.Body)
	}
	if status, _ := follow(t, h, "GET", c.Code); status != 302 {
		t.Errorf("click 11 of 11 = %d, want 302", status)
	}
	if status, _ := follow(t, h, "GET", c.Code); status != 410 {
		t.Errorf("click 12 of 11 = %d, want 410", status)
	}
	if rec := doAuth(t, h, "PATCH", "/api/links/"+c.Code, `{"max_clicks":null}`, "Bearer "+c.Token); rec.Code != 200 {
		t.Fatalf("PATCH = %d %s", rec.Code, rec.Body)
	}
	if status, _ := follow(t, h, "GET", c.Code); status != 302 {
		t.Errorf("click with max_clicks cleared = %d, want 302", status)
	}
}

// FuzzParseCacheValue: whatever Redis holds, a value read as a link is
// one the cache would have written as it is, with a URL a create would
// store and a status this program sends.
func FuzzParseCacheValue(f *testing.F) {
	for _, v := range []string{
		"https://go.dev/",
		"L1|1|302|-|0|https://go.dev/",
		"L1|7|308|1935817689123456|1|https://go.dev/a?b=|c",
		"L1|3|gone",
		"L1|1|302|-|0|javascript:alert(1)",
		"L1|01|302|-|0|https://go.dev/",
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := parseCacheValue(v)
		if !ok {
			return
		}
		if again := formatCacheValue(got); again != v {
			t.Errorf("parseCacheValue(%q) = %+v, written back as %q", v, got, again)
		}
		if !got.Deleted && (!validRedirect(got.Status) || !storableURL(got.URL)) {
			t.Errorf("parseCacheValue(%q) = %+v: a status or URL this program never stores", v, got)
		}
	})
}

// FuzzBearerHash: any Authorization header is either refused as
// ErrUnauthorized or is "Bearer" and 32 bytes of base64url, and its hash
// is the SHA-256 of those bytes.
func FuzzBearerHash(f *testing.F) {
	token, _ := newToken()
	for _, v := range []string{"", "Bearer", "Bearer " + token, "bearer " + token, "Basic " + token, "Bearer  " + token} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		hash, err := bearerHash(http.Header{"Authorization": {v}})
		if err != nil {
			// The error is our text alone: never the header's value.
			if !errors.Is(err, ErrUnauthorized) || len(v) > 8 && strings.Contains(err.Error(), v) {
				t.Errorf("bearerHash(%q): %v", v, err)
			}
			return
		}
		scheme, tok, _ := strings.Cut(v, " ")
		raw, derr := base64.RawURLEncoding.Strict().DecodeString(tok)
		want := sha256.Sum256(raw)
		if !strings.EqualFold(scheme, "bearer") || derr != nil || len(raw) != 32 || !bytes.Equal(hash, want[:]) {
			t.Errorf("bearerHash(%q) accepted it, hash %x", v, hash)
		}
	})
}

// TestLateClickCounts: a click of a link with max_clicks whose request
// ends (a deadline, a client that hangs up) while its statement waits,
// and whose row then comes back, is a redirect: the click it used is the
// client's. On step 26's code TakeClick returned the request's error at
// once while the statement went on and took the click: 503, then 410 on
// the retry, for a link clicked once (issue 24, item 7).
func TestLateClickCounts(t *testing.T) {
	pg := openTestStoreWith(t, generousPool())
	ctx := context.Background()
	const code = "late001"
	if err := pg.Save(ctx, code, NewLink{URL: "https://go.dev/late", MaxClicks: 1}); err != nil {
		t.Fatal(err)
	}
	// An uncommitted row for the code in click_counts holds the click's
	// INSERT ... ON CONFLICT until this transaction ends.
	hold, err := pg.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback() //nolint:errcheck // committed below; a no-op then
	if _, err := hold.ExecContext(ctx, "INSERT INTO click_counts (code, clicks) VALUES ($1, 0)", code); err != nil {
		t.Fatal(err)
	}
	reqCtx, hangUp := context.WithCancel(ctx)
	type answer struct {
		left bool
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		left, err := pg.TakeClick(reqCtx, code, true)
		done <- answer{left, err}
	}()
	waitFor(t, "the click waiting on the held row", func(ctx context.Context) (bool, error) {
		var waiting bool
		err := pg.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO click_counts AS c%')`).Scan(&waiting)
		return waiting, err
	})
	hangUp() // the request ends while the statement waits
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if a := <-done; a.err != nil || !a.left {
		t.Fatalf("TakeClick whose request ended before its row came back = %v, %v; want true (the click was taken)", a.left, a.err)
	}
	if left, err := pg.TakeClick(ctx, code, true); err != nil || left {
		t.Errorf("second click of max_clicks 1 = %v, %v; want false", left, err)
	}
	if l := linkNow(t, pg, code); l.Clicks != 1 {
		t.Errorf("clicks = %d, want 1", l.Clicks)
	}
}

// TestJSONKeysReadOneWay: a body that names a key twice, or in another
// case than its own, is refused with 400 and changes nothing: Go's decoder
// matched keys without regard to case and kept the last, so
// {"url":"https://a","URL":"https://b"} made a link to b, where anything
// reading the first key saw a (issue 24, item 15; 201 on step 26's code).
func TestJSONKeysReadOneWay(t *testing.T) {
	store := newMemoryStore()
	h := linkServer(store, newLinkClock())
	for _, body := range []string{
		`{"url":"https://go.dev/a","URL":"https://go.dev/b"}`,
		`{"url":"https://go.dev/a","url":"https://go.dev/b"}`,
		`{"URL":"https://go.dev/a"}`,
		`{"url":"https://go.dev/a","max_clic\u212as":3}`, // the Kelvin sign folds to k
		`{"url":"https://go.dev/a","max_clicks":3,"Max_Clicks":null}`,
		`{"url":"https://go.dev/a","\u0055RL":"https://go.dev/b"}`, // "URL", escaped
		` { "alias" : "abc-12345" , "url" : "https://go.dev/a" , "url":"https://go.dev/b" } `,
	} {
		rec := do(t, h, "POST", "http://example.com/shorten", body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("POST %s = %d %s, want 400 with a JSON error", body, rec.Code, rec.Body)
		}
	}
	if n := len(store.links); n != 0 {
		t.Errorf("%d links made by refused bodies, want 0", n)
	}
	// Keys inside values are not the object's: these are fine.
	for _, body := range []string{
		`{"url":"https://go.dev/x?{\"url\":1,\"URL\":2}"}`,
		`{"url":"https://go.dev/y","alias":"key-in-value-url"}`,
	} {
		if rec := do(t, h, "POST", "http://example.com/shorten", body); rec.Code != http.StatusCreated {
			t.Errorf("POST %s = %d %s, want 201", body, rec.Code, rec.Body)
		}
	}
	c := create(t, h, `{"url":"https://go.dev/ok","max_clicks":3}`)
	for _, body := range []string{
		`{"url":"https://go.dev/x","URL":"https://go.dev/y"}`,
		`{"max_clicks":5,"max_clicks":null}`,
	} {
		if rec := doAuth(t, h, "PATCH", "/api/links/"+c.Code, body, "Bearer "+c.Token); rec.Code != http.StatusBadRequest {
			t.Errorf("PATCH %s = %d %s, want 400", body, rec.Code, rec.Body)
		}
	}
	if l := linkNow(t, store, c.Code); l.URL != "https://go.dev/ok" || l.MaxClicks != 3 {
		t.Errorf("link after refused PATCHes = %q, max_clicks %d; want it unchanged", l.URL, l.MaxClicks)
	}
}

// BenchmarkDecodeCreate is what decodeJSON costs a create's body, its keys
// checked (checkJSONKeys) and decoded.
func BenchmarkDecodeCreate(b *testing.B) {
	const body = `{"url":"https://example.com/some/path?q=1","max_clicks":10}`
	var req struct {
		URL       string `json:"url"`
		Alias     string `json:"alias"`
		MaxClicks int64  `json:"max_clicks"`
	}
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/shorten", strings.NewReader(body))
		if err := decodeJSON(w, r, &req); err != nil {
			b.Fatal(err)
		}
	}
}
