package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxBodyBytes bounds a POST /shorten body: a 2,048-byte URL, JSON-escaped,
// fits with room to spare, and a client cannot make the server read more.
const maxBodyBytes = 8 << 10

// bodyTimeout bounds reading a POST /shorten body: at most 8 KB, which
// arrives with the headers on any connection that works.
const bodyTimeout = 2 * time.Second

// maxCodeAttempts is how many fresh codes handleShorten tries before giving
// up. With 62^7 codes a second attempt is already a once-in-millions event.
const maxCodeAttempts = 5

func handleShorten(store Store, cfg config, log *slog.Logger) http.Handler {
	type request struct {
		URL       string    `json:"url"`
		ExpiresAt jsonField `json:"expires_at"` // RFC 3339; absent or null: never
		MaxClicks jsonField `json:"max_clicks"` // absent or null: no limit
		Redirect  jsonField `json:"redirect"`   // absent: 302
		Alias     *string   `json:"alias"`      // absent or null: a generated code
	}
	type response struct {
		Code      string     `json:"code"`
		ShortURL  string     `json:"short_url"`
		URL       string     `json:"url"`
		Redirect  int        `json:"redirect"`
		ExpiresAt *time.Time `json:"expires_at"`
		MaxClicks *int64     `json:"max_clicks"`
		// Token is returned here and nowhere else, ever: only its hash
		// is stored. It is what PATCH and DELETE /api/links/{code} ask for.
		Token string `json:"token"`
	}
	now := cfg.clock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body gets bodyTimeout to arrive, not what is left of the
		// server's ReadTimeout: a create waiting for its body holds one
		// of MAX_IN_FLIGHT's places, and a few clients trickling bodies
		// could otherwise hold them all. (A test's ResponseRecorder has
		// no connection, hence ErrNotSupported.)
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout)); err != nil &&
			!errors.Is(err, http.ErrNotSupported) {
			writeError(w, r, log, fmt.Errorf("set body deadline: %w", err))
			return
		}
		var req request
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, r, log, err)
			return
		}
		if req.URL == "" {
			writeError(w, r, log, fmt.Errorf(`%w: field "url" is required`, ErrBadRequest))
			return
		}
		target, err := checkTarget(cfg, r, req.URL)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		link := NewLink{URL: target, Redirect: defaultRedirect}
		if req.ExpiresAt.set && !req.ExpiresAt.null() {
			if link.ExpiresAt, err = parseExpiresAt(req.ExpiresAt.raw, now()); err != nil {
				writeError(w, r, log, err)
				return
			}
		}
		if req.MaxClicks.set && !req.MaxClicks.null() {
			if link.MaxClicks, err = parseMaxClicks(req.MaxClicks.raw); err != nil {
				writeError(w, r, log, err)
				return
			}
		}
		if req.Redirect.set {
			if link.Redirect, err = parseRedirect(req.Redirect.raw); err != nil {
				writeError(w, r, log, err)
				return
			}
		}
		if req.Alias != nil {
			if err := checkAlias(*req.Alias); err != nil {
				writeError(w, r, log, err)
				return
			}
		}
		token, hash := newToken()
		link.TokenHash = hash
		var code string
		if req.Alias != nil {
			code = *req.Alias
			if err = store.Save(r.Context(), code, link); errors.Is(err, ErrCodeTaken) {
				err = ErrAliasTaken
			}
		} else {
			code, err = saveWithNewCode(r.Context(), store, cfg.codeSource(), link)
		}
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		short := shortURL(cfg, r, code)
		resp := response{Code: code, ShortURL: short, URL: target, Redirect: link.Redirect, Token: token}
		if !link.ExpiresAt.IsZero() {
			resp.ExpiresAt = &link.ExpiresAt
		}
		if link.MaxClicks > 0 {
			resp.MaxClicks = &link.MaxClicks
		}
		w.Header().Set("Location", short)
		// The token is a secret: no cache between here and the client
		// may keep this answer.
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, r, log, http.StatusCreated, resp)
	})
}

// checkTarget checks a URL a client wants a link to lead to, on a create
// and on an edit alike, and returns it as it is stored: normalizeURL's
// form, and never this shortener itself.
func checkTarget(cfg config, r *http.Request, raw string) (string, error) {
	u, err := normalizeURL(raw)
	if err != nil {
		return "", err
	}
	if cfg.baseURL == "" && r.Host == "" {
		// HTTP/1.0 may leave Host out, and there is then no short
		// URL to give back, nor a host to compare with.
		return "", fmt.Errorf("%w: a Host header is required", ErrBadRequest)
	}
	if h := u.Hostname(); sameHost(h, cfg.baseHost) || sameHost(h, requestHost(r)) {
		return "", ErrOwnHost
	}
	return u.String(), nil
}

// saveWithNewCode stores link under a fresh code from codes, drawing
// again if the code is taken.
func saveWithNewCode(ctx context.Context, store Store, codes codeSource, link NewLink) (string, error) {
	for range maxCodeAttempts {
		code, err := codes.next(ctx)
		if err != nil {
			return "", err
		}
		if reserved(code) {
			continue
		}
		err = store.Save(ctx, code, link)
		if errors.Is(err, ErrCodeTaken) {
			continue
		}
		if err != nil {
			return "", err
		}
		return code, nil
	}
	return "", fmt.Errorf("save: no free code after %d attempts", maxCodeAttempts)
}

// handleRedirect answers a code with a redirect to its URL, with the
// link's own status (302 unless it was made with another), and counts a
// click for a GET (a HEAD asks about the link without following it). A
// link deleted, past its expiry or out of clicks is 410.
//
// A link with max_clicks is not counted through the click queue: each GET
// is one statement on Postgres that counts the click only if one is left
// (Store.TakeClick), so that fifty visitors at once on a link with ten
// clicks get exactly ten redirects. That costs a write per click, and
// its round trip, for those links only; every other link is served from
// the caches and counted off the request's path, as before. (Its click
// still goes through the queue, marked counted, for its stats alone.)
func handleRedirect(store Store, clicks clickRecorder, now func() time.Time, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := r.PathValue("code")
		if !validCode(code) {
			writeError(w, r, log, ErrNotFound)
			return
		}
		target, err := store.Lookup(r.Context(), code)
		if err == nil {
			err = target.check(now)
		}
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		count := r.Method == http.MethodGet
		if target.Limited {
			left, err := store.TakeClick(r.Context(), code, count)
			if err == nil && !left {
				err = fmt.Errorf("%w: no clicks left", ErrGone)
			}
			if err != nil {
				writeError(w, r, log, err)
				return
			}
		}
		if count {
			// The headers are copied as sent; the worker reads them.
			// (Indexed directly: the keys are canonical already.)
			c := click{code: code, at: now(), client: clientIPFrom(r.Context()), counted: target.Limited}
			if v := r.Header["Referer"]; len(v) > 0 {
				c.referer = v[0]
			}
			if v := r.Header["User-Agent"]; len(v) > 0 {
				c.agent = v[0]
			}
			clicks.Click(r.Context(), c)
		}
		// Set directly: the key is in canonical form already, and
		// Header.Set would check that on every redirect.
		w.Header()["Location"] = []string{target.URL}
		w.WriteHeader(target.Status)
	})
}

// linkJSON is a link as GET, PATCH and DELETE /api/links/{code} show it:
// never its token, which is not kept. expires_at and max_clicks are null
// when not set; expired says whether the link is past either. redirects
// counts every GET that redirected, bots' too; the stats' "clicks" are
// people's alone (stats_postgres.go), so the two are named apart. clicks
// is the same count as redirects, under the name steps 07 to 23 gave it,
// kept for the clients that read it.
type linkJSON struct {
	Code      string     `json:"code"`
	URL       string     `json:"url"`
	CreatedAt time.Time  `json:"created_at"`
	Redirects int64      `json:"redirects"`
	Clicks    int64      `json:"clicks"` // = Redirects; deprecated (step 24)
	Redirect  int        `json:"redirect"`
	ExpiresAt *time.Time `json:"expires_at"`
	MaxClicks *int64     `json:"max_clicks"`
	Expired   bool       `json:"expired"`
}

func newLinkJSON(l Link, now time.Time) linkJSON {
	j := linkJSON{Code: l.Code, URL: l.URL, CreatedAt: l.CreatedAt, Redirects: l.Clicks, Clicks: l.Clicks, Redirect: l.Redirect}
	if !l.ExpiresAt.IsZero() {
		j.ExpiresAt = &l.ExpiresAt
		j.Expired = !now.Before(l.ExpiresAt)
	}
	if l.MaxClicks > 0 {
		j.MaxClicks = &l.MaxClicks
		j.Expired = j.Expired || l.Clicks >= l.MaxClicks
	}
	return j
}

// handleLinkInfo answers GET /api/links/{code} with the link and its clicks.
// Clicks that are still in the queue are not counted yet (at most
// CLICK_FLUSH behind). A deleted link is 410.
func handleLinkInfo(store Store, now func() time.Time, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := r.PathValue("code")
		if !validCode(code) {
			writeError(w, r, log, ErrNotFound)
			return
		}
		l, err := liveLink(r.Context(), store, code)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeJSON(w, r, log, http.StatusOK, newLinkJSON(l, now()))
	})
}

// maxStatsPoints bounds the points one stats request asks for: a month
// of hours, or nearly three years of days.
const maxStatsPoints = 1000

// handleStats answers GET /api/links/{code}/stats?from=&to=&by=hour|day
// with the link's points in [from, to) (RFC 3339 times, rounded out to
// whole hours or days in UTC; by default the last 24 hours, or the last
// 30 days with by=day). Clicks still queued, or summed and not yet
// flushed, are not in them yet (at most CLICK_FLUSH + STATS_FLUSH behind).
func handleStats(store Store, stats *statsStore, now func() time.Time, log *slog.Logger) http.Handler {
	type response struct {
		Code   string       `json:"code"`
		By     string       `json:"by"`
		From   time.Time    `json:"from"`
		To     time.Time    `json:"to"`
		Points []statsPoint `json:"points"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := r.PathValue("code")
		if !validCode(code) {
			writeError(w, r, log, ErrNotFound)
			return
		}
		// Parsed here, not with r.URL.Query(), which drops what it
		// cannot parse: "?from=%zz" would get the default range, not a 400.
		v, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, r, log, fmt.Errorf("%w: the query string does not parse", ErrBadRequest))
			return
		}
		q, err := parseStatsQuery(v, now())
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if stats == nil {
			writeError(w, r, log, errStatsOff)
			return
		}
		if _, err := liveLink(r.Context(), store, code); err != nil {
			writeError(w, r, log, err)
			return
		}
		points, err := stats.points(r.Context(), code, q.by, q.from, q.to)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeJSON(w, r, log, http.StatusOK, response{Code: code, By: q.by, From: q.from, To: q.to, Points: points})
	})
}

// statsQuery is a stats request's range, checked and rounded out.
type statsQuery struct {
	by       string // "hour" or "day"
	from, to time.Time
}

// parseStatsQuery reads from, to and by; each mistake is a 400 that says
// which parameter and why.
func parseStatsQuery(v url.Values, now time.Time) (statsQuery, error) {
	for k := range v {
		if k != "from" && k != "to" && k != "by" {
			return statsQuery{}, fmt.Errorf("%w: unknown parameter %q: want from, to or by", ErrBadRequest, k)
		}
		if len(v[k]) > 1 {
			return statsQuery{}, fmt.Errorf("%w: %s given more than once", ErrBadRequest, k)
		}
	}
	q := statsQuery{by: v.Get("by")}
	if q.by == "" {
		q.by = "hour"
	}
	if q.by != "hour" && q.by != "day" {
		return statsQuery{}, fmt.Errorf("%w: by=%q: want hour or day", ErrBadRequest, q.by)
	}
	floor := func(t time.Time) time.Time {
		t = t.UTC()
		if q.by == "hour" {
			return t.Truncate(time.Hour)
		}
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	ceil := func(t time.Time) time.Time {
		f := floor(t)
		if f.Equal(t) {
			return f
		}
		return next(f, q.by)
	}
	parse := func(name string) (time.Time, bool, error) {
		raw := v.Get(name)
		if raw == "" {
			return time.Time{}, false, nil
		}
		t, err := time.Parse(time.RFC3339, raw)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%w: %s=%q: want an RFC 3339 time, like 2026-12-01T00:00:00Z", ErrBadRequest, name, raw)
		}
		if t.Year() < 2000 || t.Year() > 9000 {
			return time.Time{}, false, fmt.Errorf("%w: %s=%q: want a year from 2000 to 9000", ErrBadRequest, name, raw)
		}
		return t, true, nil
	}
	to, set, err := parse("to")
	if err != nil {
		return statsQuery{}, err
	}
	if !set {
		to = now
	}
	// The bucket holding to is wanted whole: "up to now" includes this hour.
	q.to = ceil(to)
	if !set {
		q.to = next(floor(now), q.by)
	}
	from, set, err := parse("from")
	if err != nil {
		return statsQuery{}, err
	}
	if set {
		q.from = floor(from)
	} else if q.by == "hour" {
		q.from = q.to.Add(-24 * time.Hour)
	} else {
		q.from = q.to.AddDate(0, 0, -30)
	}
	if !q.from.Before(q.to) {
		return statsQuery{}, fmt.Errorf("%w: from must come before to", ErrBadRequest)
	}
	n := int(q.to.Sub(q.from) / time.Hour)
	if q.by == "day" {
		n = int(q.to.Sub(q.from) / (24 * time.Hour))
	}
	if n > maxStatsPoints {
		return statsQuery{}, fmt.Errorf("%w: %d %ss asked for: at most %d points at a time", ErrBadRequest, n, q.by, maxStatsPoints)
	}
	return q, nil
}

// liveLink is the link with that code, or ErrNotFound, or ErrGone once
// it is deleted.
func liveLink(ctx context.Context, store Store, code string) (Link, error) {
	l, err := store.Link(ctx, code)
	if err == nil && !l.DeletedAt.IsZero() {
		err = fmt.Errorf("%w: deleted", ErrGone)
	}
	return l, err
}

// handleMethodNotAllowed answers 405 with the given Allow header, for a path
// where the mux would otherwise pick the wrong route or list the wrong methods.
func handleMethodNotAllowed(allow string, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeJSON(w, r, log, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	})
}

func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok") //nolint:errcheck // a failed write means the client left; nothing to do
	})
}

func writeJSON(w http.ResponseWriter, r *http.Request, log *slog.Logger, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		log.ErrorContext(r.Context(), "encode response", "method", r.Method, "path", r.URL.Path, "err", err)
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n')) //nolint:errcheck // a failed write means the client left; nothing to do
}

// shortURL is BASE_URL/code, or, without BASE_URL, built from the host the
// client asked for (port kept) and the scheme it used (see requestScheme).
func shortURL(cfg config, r *http.Request, code string) string {
	if cfg.baseURL != "" {
		return cfg.baseURL + "/" + code
	}
	return requestScheme(cfg.trustedProxies, r) + "://" + r.Host + "/" + code
}

// requestScheme is "https" or "http": what a trusted proxy says the client
// used (X-Forwarded-Proto; nginx terminates TLS and talks plain HTTP to
// us), else whether our own connection is TLS. Only X-Forwarded-Proto is
// read, and only its two values: X-Forwarded-Host and Forwarded would let
// a proxy's client choose the host too.
func requestScheme(tp trustedProxies, r *http.Request) string {
	if p := r.Header.Get("X-Forwarded-Proto"); (p == "https" || p == "http") && tp.trusts(peerAddr(r)) {
		return p
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// requestHost is the host name the client used to reach us, in asciiHost's
// form, or "" if there is none.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host, err := asciiHost(strings.Trim(host, "[]"))
	if err != nil {
		return ""
	}
	return host
}
