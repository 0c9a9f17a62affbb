package main

import (
	"strconv"
	"strings"
	"time"
)

// The body of a link's Redis value: "L1|<version>|<status>|<expires>|<limited>|<url>",
// where expires is "-" or microseconds since 1970 and limited is 0 or 1;
// or "L1|<version>|gone" for a deleted link. L1 names the format, so that
// a later one can be told apart; the bare URL that earlier versions of
// this program stored is not in it, so it reads as a miss and is
// overwritten. Since step 26 Redis holds the body sealed (redisAuth.seal):
// "A1|<until>|<mac>|L1|...".
const cacheValueTag = "L1|"

func formatCacheValue(t Target) string {
	b := make([]byte, 0, len(cacheValueTag)+40+len(t.URL))
	b = append(b, cacheValueTag...)
	b = strconv.AppendInt(b, t.Version, 10)
	if t.Deleted {
		return string(append(b, "|gone"...))
	}
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(t.Status), 10)
	b = append(b, '|')
	if t.ExpiresAt.IsZero() {
		b = append(b, '-')
	} else {
		b = strconv.AppendInt(b, t.ExpiresAt.UnixMicro(), 10)
	}
	if t.Limited {
		b = append(b, "|1|"...)
	} else {
		b = append(b, "|0|"...)
	}
	return string(append(b, t.URL...))
}

// parseCacheValue reads a value formatCacheValue wrote, every part
// strictly: what comes back from Redis is input like any request, and a
// value another program, a bug or an attacker put there must not become a
// redirect to javascript:, to the visitor's own machine, or with a status
// this program never sends. Anything else is not a link (false).
func parseCacheValue(v string) (Target, bool) {
	rest, ok := strings.CutPrefix(v, cacheValueTag)
	if !ok {
		return Target{}, false
	}
	field, rest, ok := strings.Cut(rest, "|")
	version, vok := parseDecimal(field, 15)
	if !ok || !vok || version < 1 {
		return Target{}, false
	}
	if rest == "gone" {
		return Target{Deleted: true, Version: version}, true
	}
	t := Target{Version: version}
	field, rest, ok = strings.Cut(rest, "|")
	status, sok := parseDecimal(field, 3)
	if !ok || !sok || !validRedirect(int(status)) {
		return Target{}, false
	}
	t.Status = int(status)
	field, rest, ok = strings.Cut(rest, "|")
	if !ok {
		return Target{}, false
	}
	if field != "-" {
		us, ok := parseDecimal(field, 17)
		if !ok || us == 0 {
			return Target{}, false
		}
		t.ExpiresAt = time.UnixMicro(us).UTC()
	}
	field, rest, ok = strings.Cut(rest, "|")
	if !ok || (field != "0" && field != "1") {
		return Target{}, false
	}
	t.Limited = field == "1"
	if !storableURL(rest) {
		return Target{}, false
	}
	t.URL = rest
	return t, true
}

// storableURL reports whether v, read back from Redis, is a URL that a
// create could have stored: exactly the form normalizeURL returns for it.
// What comes back from Redis is input like any request: a value that
// another program, a bug or an attacker put there must not become a
// redirect to javascript:, to the visitor's own machine, to a URL with
// user info, or to a broken Location header.
//
// This bounds what a value can say; who wrote it is the seal's question
// (redisauth.go, step 26): a value is parsed only once its MAC verifies.
// The check stays, for a value sealed by an older version of this program
// whose rules were looser.
//
// It runs on every Redis hit (the local cache answers the hottest links
// before Redis is asked), so plausibleURL, which allocates nothing, turns
// away most garbage before normalizeURL parses the value.
func storableURL(v string) bool {
	if !plausibleURL(v) {
		return false
	}
	u, err := normalizeURL(v)
	return err == nil && u.String() == v
}

// plausibleURL reports whether v has the shape of a URL that normalizeURL
// returns: http or https, no longer than maxURLLength, printable ASCII with
// no spaces. It is the cheap half of storableURL.
func plausibleURL(v string) bool {
	if len(v) > maxURLLength || !(strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "http://")) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}
