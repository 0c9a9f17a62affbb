package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// webFiles are the page's files, built into the binary: no directory to
// ship beside it, no build step, and a file that is missing is a compile
// error, not a 404 in production.
//
//go:embed web
var webFiles embed.FS

// embeddedSite is the site made from webFiles when the program starts;
// run refuses to start if embeddedSiteErr is set (a page naming a file
// web/ does not have), and a test checks it.
var embeddedSite, embeddedSiteErr = newSite(webFiles)

// asset is one file of the site, ready to send: its bytes as they are and
// gzipped (both made once, at start-up), and the ETag of each. A strong
// ETag names one representation, so the gzipped bytes have their own.
type asset struct {
	contentType  string
	cacheControl string
	plain, gz    []byte
	etag, etagGz string
	page         bool // an HTML page: gets the page's security headers
	// The headers of each answer, made once: serve copies them in
	// without the work of Header.Set (a canonical key made, a slice
	// allocated) on every request.
	header, headerGz http.Header
}

// site is every file of the page, looked up by what a request names.
type site struct {
	index, link *asset
	// static holds the CSS and scripts by their fingerprinted names
	// ("app.3f9c0a1b2d4e.css"): the name changes when the content does,
	// so a browser may keep each for a year without asking again.
	static map[string]*asset
}

// Pages are asked for on every visit (no-cache: "ask before you use your
// copy"), and their ETag makes the asking cheap, a 304 with no body; they
// are what names the current scripts. The scripts and CSS never change
// under their names, hence immutable.
const (
	pageCacheControl   = "no-cache"
	staticCacheControl = "public, max-age=31536000, immutable"
)

// pageSecurity are the headers of every page. The CSP lets a page run
// only this site's own scripts and styles (no inline ones, so a link's URL
// that somehow reached the page as markup could not run), fetch only from
// this site, and be framed by no one (clickjacking of the Shorten button).
var pageSecurity = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
		"img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"Referrer-Policy": "same-origin",
}

// placeholderRE is how a page names a static file: {{app.css}}.
var placeholderRE = regexp.MustCompile(`\{\{([^{}]*)\}\}`)

// newSite reads web/ and makes every asset: the static files first, each
// named by the first 12 hex digits of its SHA-256, then the pages, with
// each placeholder replaced by the name it stands for. A placeholder that
// names no file is an error, so a typo fails at start-up (and in a test).
func newSite(files fs.FS) (*site, error) {
	s := &site{static: make(map[string]*asset)}
	names := make(map[string]string) // "app.css" → "app.3f9c0a1b2d4e.css"
	entries, err := fs.ReadDir(files, "web")
	if err != nil {
		return nil, fmt.Errorf("read web/: %w", err)
	}
	var pages []string
	for _, e := range entries {
		name := e.Name()
		if path.Ext(name) == ".html" {
			pages = append(pages, name)
			continue
		}
		body, err := fs.ReadFile(files, "web/"+name)
		if err != nil {
			return nil, fmt.Errorf("read web/%s: %w", name, err)
		}
		sum := sha256.Sum256(body)
		ext := path.Ext(name)
		fingerprinted := strings.TrimSuffix(name, ext) + "." + hex.EncodeToString(sum[:6]) + ext
		a, err := newAsset(name, body, staticCacheControl, false)
		if err != nil {
			return nil, err
		}
		names[name] = fingerprinted
		s.static[fingerprinted] = a
	}
	for _, name := range pages {
		body, err := fs.ReadFile(files, "web/"+name)
		if err != nil {
			return nil, fmt.Errorf("read web/%s: %w", name, err)
		}
		var missing []string
		body = placeholderRE.ReplaceAllFunc(body, func(m []byte) []byte {
			key := string(m[2 : len(m)-2])
			if to, ok := names[key]; ok {
				return []byte(to)
			}
			missing = append(missing, key)
			return m
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("web/%s names files that web/ does not have: %s", name, strings.Join(missing, ", "))
		}
		a, err := newAsset(name, body, pageCacheControl, true)
		if err != nil {
			return nil, err
		}
		switch name {
		case "index.html":
			s.index = a
		case "link.html":
			s.link = a
		default:
			return nil, fmt.Errorf("web/%s: a page no route serves", name)
		}
	}
	if s.index == nil || s.link == nil {
		return nil, fmt.Errorf("web/ must hold index.html and link.html")
	}
	return s, nil
}

func newAsset(name string, body []byte, cacheControl string, page bool) (*asset, error) {
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		return nil, fmt.Errorf("web/%s: no content type for %q", name, path.Ext(name))
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("gzip web/%s: %w", name, err)
	}
	if _, err := zw.Write(body); err != nil {
		return nil, fmt.Errorf("gzip web/%s: %w", name, err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip web/%s: %w", name, err)
	}
	sum := sha256.Sum256(body)
	tag := hex.EncodeToString(sum[:12])
	a := &asset{contentType: ct, cacheControl: cacheControl, plain: body, etag: `"` + tag + `"`, page: page}
	// A file too small to gain from gzip is sent as it is.
	if buf.Len() < len(body) {
		a.gz = buf.Bytes()
		a.etagGz = `"` + tag + `-gz"`
	}
	a.header = a.headers(false)
	if a.gz != nil {
		a.headerGz = a.headers(true)
	}
	return a, nil
}

// headers are the headers of a's answer, gzipped or not.
func (a *asset) headers(gz bool) http.Header {
	h := http.Header{}
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", a.cacheControl)
	h.Set("X-Content-Type-Options", "nosniff")
	if a.page {
		for k, v := range pageSecurity {
			h.Set(k, v)
		}
	}
	body, etag := a.plain, a.etag
	if a.gz != nil {
		// The answer depends on Accept-Encoding: a cache between us and
		// the browser must not hand gzip to a client that did not ask.
		h.Set("Vary", "Accept-Encoding")
	}
	if gz {
		body, etag = a.gz, a.etagGz
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("ETag", etag)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return h
}

// serve sends a with its headers. A plain GET or HEAD, the common case,
// gets its bytes at once; a request with a condition or a Range goes
// through http.ServeContent, which does them right: If-None-Match against
// the ETag (a 304 without a body), If-Match, Range. (A draft that sent
// every request through ServeContent: benchmarks/19-drafts, docs/19.)
func (a *asset) serve(w http.ResponseWriter, r *http.Request) {
	body, from := a.plain, a.header
	if a.gz != nil && acceptsGzip(r.Header.Values("Accept-Encoding")) {
		body, from = a.gz, a.headerGz
	}
	h := w.Header()
	// The slices are shared by every answer: safe, as nothing changes
	// a value in place (Set and Del replace or drop the map's entry,
	// and Add appends to a slice that is full, so it is copied).
	for k, v := range from {
		h[k] = v
	}
	if r.Header.Get("If-None-Match") == "" && r.Header.Get("Range") == "" && r.Header.Get("If-Match") == "" &&
		r.Header.Get("If-Modified-Since") == "" && r.Header.Get("If-Unmodified-Since") == "" && r.Header.Get("If-Range") == "" {
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			w.Write(body) //nolint:errcheck // the client has gone: nothing to tell it
		}
		return
	}
	// ServeContent works out Content-Length itself, for the answer it
	// chooses: a 412 or a 304 has no body, a 206 a part. (For a whole
	// encoded body it leaves it out, and the answer goes chunked: rare,
	// as it takes a condition that holds.)
	delete(h, "Content-Length")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip:
// "gzip" or "x-gzip" with a q-value other than 0 (RFC 9110, 12.5.3), or,
// if neither is named, "*" with one. "gzip;q=0" is a refusal, and so is
// "gzip;q=0, *": "*" stands only for the codings not named.
func acceptsGzip(values []string) bool {
	named, star := false, false
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(item, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" && coding != "*" {
				continue
			}
			ok := qNotZero(params)
			if coding == "*" {
				star = star || ok
				continue
			}
			if ok {
				return true
			}
			named = true
		}
	}
	return star && !named
}

// qNotZero reads the parameters of one Accept-Encoding item ("q=0.5"):
// true unless q is 0 or cannot be read (a q we cannot read is not a yes).
func qNotZero(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			return err == nil && f > 0
		}
	}
	return true
}

// handleIndex serves the page to shorten a link, at / only.
func handleIndex(s *site) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.index.serve(w, r) })
}

// handleLinkPage serves a link's stats page. The page is the same for
// every link (its script reads the code from the address and asks the
// API), so one copy is cached for all; a code that cannot exist is a 404
// here rather than a page that says so later.
func handleLinkPage(s *site, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !validCode(r.PathValue("code")) {
			writeJSON(w, r, log, http.StatusNotFound, map[string]string{"error": "not found"})
			return
		}
		s.link.serve(w, r)
	})
}

// handleStatic serves the CSS and scripts by their fingerprinted names.
// An old name (a page cached before a deploy asking for last week's
// script) is a 404: the page that names it is revalidated on every visit,
// so only a page open across a deploy can ask.
func handleStatic(s *site, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := s.static[r.PathValue("name")]
		if !ok {
			writeJSON(w, r, log, http.StatusNotFound, map[string]string{"error": "not found"})
			return
		}
		a.serve(w, r)
	})
}

// crossSite refuses a write (POST, PATCH, DELETE) that a browser sends
// from another site's page: a form on evil.example posting text/plain
// that spells JSON ({"url":"https://evil.example/?a=b"} is a valid body)
// needs no CORS preflight, and the service would take it. Browsers say
// where a request comes from, in Sec-Fetch-Site (every current browser)
// or Origin; http.CrossOriginProtection (Go 1.25) checks both, and lets
// through what carries neither: curl, hey, a server. The refusal is a 403
// in JSON, like every other error.
func crossSite(log *slog.Logger) *http.CrossOriginProtection {
	c := http.NewCrossOriginProtection()
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, log, http.StatusForbidden, map[string]string{"error": "cross-site request refused: use this site's own page, or a client that is not a browser"})
	}))
	return c
}

// crossSiteReads refuses a read that a browser sends from another site's
// page, before it draws on the client's allowance: a stats read counts
// against CREATE_RATE, and without this any site could spend a visitor's
// allowance with <img src="…/stats"> and leave them unable to shorten a
// link. Sec-Fetch-Site is what tells: a browser sends no Origin with a GET
// from an <img> or a link (it does with a cross-origin fetch, which
// Sec-Fetch-Site marks as well). A request without it (curl, a script, an
// older browser) is let through.
func crossSiteReads(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Sec-Fetch-Site") {
		case "cross-site", "same-site":
			writeJSON(w, r, log, http.StatusForbidden, map[string]string{"error": "cross-site request refused: use this site's own page, or a client that is not a browser"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
