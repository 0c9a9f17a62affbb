package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Links that change: a link may expire at a time (expires_at) or after a
// number of clicks (max_clicks), answers with the redirect status it was
// made with, and can be edited or deleted by whoever holds the token its
// create returned.

// Target is what a redirect needs to know of a link, and what every cache
// keeps: where to, with which status, until when, whether its clicks are
// limited, whether it was deleted, and the version of the row it was read
// from (each edit adds one), which the Redis cache compares so that an
// older answer never overwrites a newer one.
type Target struct {
	URL       string
	Status    int       // 301, 302, 307 or 308
	ExpiresAt time.Time // zero: never
	Limited   bool      // max_clicks is set: each click goes through Postgres (Store.TakeClick)
	Deleted   bool      // a tombstone: the row stays, so that the code is never reused
	Version   int64
}

// check says whether the link may be followed now: ErrGone once it was
// deleted, and from its expiry on. It is checked on every redirect, on
// whatever a cache answered, so an expired link is 410 even when the
// process's own memory still holds it. The clock is read only for a link
// that expires: most do not, and the warm redirect is a few microseconds.
func (t Target) check(now func() time.Time) error {
	switch {
	case t.Deleted:
		return fmt.Errorf("%w: deleted", ErrGone)
	case !t.ExpiresAt.IsZero() && !now().Before(t.ExpiresAt):
		return fmt.Errorf("%w: expired", ErrGone)
	}
	return nil
}

// NewLink is what a create stores.
type NewLink struct {
	URL       string
	Redirect  int       // 0 is the default, 302
	ExpiresAt time.Time // zero: never
	MaxClicks int64     // 0: no limit
	TokenHash []byte    // nil: no token (the link cannot be edited)
}

// LinkChange is an edit (PATCH) or a delete: only what is set changes.
type LinkChange struct {
	Delete    bool
	URL       string // "" = unchanged
	Redirect  int    // 0 = unchanged
	SetExpiry bool   // change expires_at to ExpiresAt (zero: clear it)
	ExpiresAt time.Time
	SetMax    bool // change max_clicks to MaxClicks (0: clear it)
	MaxClicks int64
}

// The bounds of the new fields, so that a value a client sends is either
// one the service means to honour or a 400.
const (
	// maxExpiresIn is how far ahead expires_at may be: ten years. Past
	// that "expires" means nothing a reader could check, and a time in
	// year 9999 is more likely a client's bug.
	maxExpiresIn = 10 * 365 * 24 * time.Hour
	// maxMaxClicks is the greatest max_clicks: a billion clicks, far
	// beyond a link meant to run out, and well inside a bigint.
	maxMaxClicks = 1_000_000_000
	// defaultRedirect is the status of a link made without "redirect".
	defaultRedirect = http.StatusFound
)

// Redirect statuses, as a link stores them. What each does to a browser:
//
//   - 301 Moved Permanently and 308 Permanent Redirect are cached by
//     browsers (and by proxies) with no expiry unless told one: a visitor
//     who followed the link once goes straight to the old URL from then
//     on, so later clicks are never seen (not counted, not limited by
//     max_clicks) and an edit or a delete never reaches that visitor.
//   - 302 Found and 307 Temporary Redirect are asked again each time: every
//     click reaches the server, is counted, and sees edits at once.
//   - 307 and 308 keep the method and body (a POST stays a POST); 301 and
//     302 let the browser turn a POST into a GET, as browsers do.
//
// 302 is the default for that reason: a shortener that counts clicks and
// lets links change must see every click.
func validRedirect(s int) bool {
	return s == http.StatusMovedPermanently || s == http.StatusFound ||
		s == http.StatusTemporaryRedirect || s == http.StatusPermanentRedirect
}

// tokenBytes is the size of an edit token: 256 bits from crypto/rand.
const tokenBytes = 32

// tokenLen is its length once encoded: base64url without padding.
var tokenLen = base64.RawURLEncoding.EncodedLen(tokenBytes)

// newToken makes a token for a new link and returns it with its hash, which
// is all that is stored.
//
// The hash is one SHA-256, with no salt and no slow function like bcrypt.
// Those exist for passwords, which people choose from a small space an
// attacker can enumerate: bcrypt makes each guess expensive, a salt keeps
// one guess from testing every account. A token is 256 random bits: there
// is nothing to enumerate, and no two links share one. SHA-256 of it
// cannot be turned back into it, so a stolen copy of the table gives no
// token; and it is fast, which matters because it runs on every edit.
func newToken() (token string, hash []byte) {
	b := make([]byte, tokenBytes)
	rand.Read(b) // never returns an error (crypto/rand's documentation); it crashes the program instead
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, hashToken(b)
}

// hashToken is what is stored and compared: SHA-256 of the token's bytes.
func hashToken(raw []byte) []byte {
	h := sha256.Sum256(raw)
	return h[:]
}

// tokenMatches reports whether presented (a hash) is the hash stored for
// a link. subtle.ConstantTimeCompare takes as long whatever the bytes,
// so the time an answer takes says nothing of how many leading bytes
// matched. (Comparing hashes rather than tokens already denies a timing
// attack a target it can steer; this costs nothing more.) A link without
// a hash (made before tokens existed) matches nothing.
func tokenMatches(stored, presented []byte) bool {
	return len(stored) == sha256.Size && subtle.ConstantTimeCompare(stored, presented) == 1
}

// bearerHash reads "Authorization: Bearer <token>" and returns the token's
// hash. A header that is missing, repeated, of another scheme, or holding
// anything but a token of the right length and alphabet is
// ErrUnauthorized (401): no store is asked. The token itself never goes
// into an error, so it cannot reach a log.
func bearerHash(h http.Header) ([]byte, error) {
	values := h.Values("Authorization")
	if len(values) != 1 {
		return nil, fmt.Errorf("%w: send one header Authorization: Bearer TOKEN", ErrUnauthorized)
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	// The scheme is case-insensitive (RFC 9110, section 11.1); the token
	// is compared by its length first, so that a 10 KB one costs nothing.
	if !ok || !strings.EqualFold(scheme, "Bearer") || len(token) != tokenLen {
		return nil, fmt.Errorf("%w: send Authorization: Bearer TOKEN, the token the create answered with", ErrUnauthorized)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) != tokenBytes {
		return nil, fmt.Errorf("%w: the token is not one this service makes", ErrUnauthorized)
	}
	return hashToken(raw), nil
}

// jsonField is a field of a request body that may be absent (set false),
// null (raw "null"), or a value, which the field's own parser checks.
// encoding/json calls UnmarshalJSON only for a field that is present, and
// with "null" for a null, so the three are told apart; a plain *int64
// would read null and absent alike.
type jsonField struct {
	set bool
	raw []byte
}

func (f *jsonField) UnmarshalJSON(b []byte) error {
	f.set = true
	f.raw = append(f.raw[:0], b...)
	return nil
}

func (f jsonField) null() bool { return string(f.raw) == "null" }

// parseExpiresAt reads expires_at: a JSON string in RFC 3339 (fractions
// of a second allowed, kept to the microsecond as Postgres keeps them),
// after now and at most maxExpiresIn ahead.
func parseExpiresAt(raw []byte, now time.Time) (time.Time, error) {
	bad := fmt.Errorf(`%w: field "expires_at" must be a time in RFC 3339, like "2030-01-02T15:04:05Z", after now and at most %d days ahead`,
		ErrBadRequest, int(maxExpiresIn/(24*time.Hour)))
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || len(s) > 64 {
		return time.Time{}, bad
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, bad
	}
	t = t.UTC().Truncate(time.Microsecond)
	if !t.After(now) || t.Sub(now) > maxExpiresIn {
		return time.Time{}, bad
	}
	return t, nil
}

// parseMaxClicks reads max_clicks: a JSON integer written as digits alone
// (no sign, fraction or exponent: 10.0 and 1e1 are refused, not rounded),
// from 1 to maxMaxClicks.
func parseMaxClicks(raw []byte) (int64, error) {
	n, ok := parseDecimal(string(raw), 10)
	if !ok || n < 1 || n > maxMaxClicks {
		return 0, fmt.Errorf(`%w: field "max_clicks" must be a whole number from 1 to %d`, ErrBadRequest, maxMaxClicks)
	}
	return n, nil
}

// parseRedirect reads redirect: one of the four numbers, as digits alone.
func parseRedirect(raw []byte) (int, error) {
	n, ok := parseDecimal(string(raw), 3)
	if !ok || !validRedirect(int(n)) {
		return 0, fmt.Errorf(`%w: field "redirect" must be 301, 302, 307 or 308`, ErrBadRequest)
	}
	return int(n), nil
}

// parseDecimal reads s as a number of at most maxLen decimal digits, with
// no sign and no leading zero (but "0" itself). strconv.ParseInt would
// take "+5" and "007", which a client sending JSON, or this program
// writing to Redis, never means.
func parseDecimal(s string, maxLen int) (int64, bool) {
	if len(s) == 0 || len(s) > maxLen || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
