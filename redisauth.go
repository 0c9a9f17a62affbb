package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// redisAuth signs what this program writes to Redis and checks it when it
// comes back. Step 12 made every value read back from Redis pass the
// checks a create passes; that bounds what a value can say, not who wrote
// it. Whoever could write to Redis could point any code at any URL a
// create would accept (a phishing page), for good, and undo a delete
// (docs/26). Now each cache value and each feed message carries an
// HMAC-SHA-256 over what it says and where it was put (the key or the
// channel), made with a key that lives in Postgres (redis_keys), which
// the writer to Redis does not have. A value without a valid MAC is a miss
// and is overwritten; a message without one is ignored and counted.
//
// What a MAC cannot tell is whether a value that this program really
// wrote is still current: an old value, copied aside and written back,
// verifies. Each cache value therefore also says until when it is good
// (its write plus CACHE_TTL, signed with it), which bounds such a replay
// to CACHE_TTL after the value's last write. docs/26 says what that
// leaves open and what would close it.
type redisAuth struct {
	pool sync.Pool // of *macState: hmac.New allocates, and so would a Write of each part
}

// macState is one HMAC in use, with the buffers it writes and sums into.
type macState struct {
	h   hash.Hash
	in  []byte // the parts, each followed by a zero byte
	out [sha256.Size]byte
}

// redisKeyLen is the MAC key's length: SHA-256's block is 64 bytes, and a
// key of 32 random bytes is the strength of the hash.
const redisKeyLen = 32

// macLen is how much of the HMAC-SHA-256 is kept: 128 bits, as in
// NIST SP 800-107's guidance for a truncated HMAC; macTextLen is its
// length in unpadded base64url.
const (
	macLen     = 16
	macTextLen = 22
)

func newRedisAuth(key []byte) (*redisAuth, error) {
	if len(key) != redisKeyLen {
		return nil, fmt.Errorf("redis auth: key of %d bytes, want %d", len(key), redisKeyLen)
	}
	k := append([]byte(nil), key...)
	return &redisAuth{pool: sync.Pool{New: func() any {
		return &macState{h: hmac.New(sha256.New, k), in: make([]byte, 0, 256)}
	}}}, nil
}

// randomRedisAuth is for an instance without Postgres (the memory store),
// which is alone by construction: a key of its own, which no other
// process shares.
func randomRedisAuth() *redisAuth {
	key := make([]byte, redisKeyLen)
	rand.Read(key)
	a, err := newRedisAuth(key)
	if err != nil {
		panic(err) // redisKeyLen bytes, always
	}
	return a
}

// redisKeyTimeout bounds the read of the key at start, when DB_TIMEOUT is
// shorter: a start can wait a little longer than a request.
const redisKeyTimeout = 5 * time.Second

// redisKeySQL makes the key on first use and returns it, as codeKeySQL
// does: every instance gets the first one made.
const redisKeySQL = `INSERT INTO redis_keys (id, key) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET key = redis_keys.key
RETURNING key`

// loadRedisAuth reads (or makes) the key every instance shares.
func loadRedisAuth(ctx context.Context, db *sql.DB, timeout time.Duration) (*redisAuth, error) {
	fresh := make([]byte, redisKeyLen)
	rand.Read(fresh)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var key []byte
	if err := db.QueryRowContext(ctx, redisKeySQL, fresh).Scan(&key); err != nil {
		return nil, fmt.Errorf("redis auth: read the key: %w", err)
	}
	a, err := newRedisAuth(key) // what comes back from Postgres is checked too
	if err != nil {
		return nil, fmt.Errorf("redis auth: the key in redis_keys: %w", err)
	}
	return a, nil
}

// sum appends to dst the base64url text of the truncated HMAC of parts,
// each followed by a zero byte (no part this program signs holds one, so
// the parts cannot be shifted from one to the next).
func (a *redisAuth) sum(dst []byte, parts ...string) []byte {
	s := a.pool.Get().(*macState)
	s.in = s.in[:0]
	for _, p := range parts {
		s.in = append(s.in, p...)
		s.in = append(s.in, 0)
	}
	s.h.Reset()
	s.h.Write(s.in) // a hash's Write never fails
	dst = base64.RawURLEncoding.AppendEncode(dst, s.h.Sum(s.out[:0])[:macLen])
	a.pool.Put(s)
	return dst
}

// verify reports whether mac is the MAC of parts, in constant time.
func (a *redisAuth) verify(mac string, parts ...string) bool {
	if len(mac) != macTextLen {
		return false
	}
	var buf [macTextLen]byte
	return hmac.Equal(a.sum(buf[:0], parts...), []byte(mac))
}

// The Redis value of a link, sealed: "A1|<until>|<mac>|<body>", where body
// is formatCacheValue's "L1|..." (cachevalue.go), until is the Unix second
// after which the value is no longer good, and mac is over the domain
// "cache", the Redis key, until and body.
const sealTag = "A1|"

// maxSealedLen bounds a sealed value: the tag, until (at most 12 digits),
// the MAC, and the longest body (the tag, a 15-digit version, a status,
// a 17-digit expiry, the limited flag, four separators and the longest
// URL). Redis is asked for this many bytes and one more (GETRANGE): a
// longer value is refused without being read whole (docs/26: one value
// of 30 MB made every read of it time out and opened the breaker).
const maxSealedLen = len(sealTag) + 12 + 1 + macTextLen + 1 + len(cacheValueTag) + 15 + 1 + 3 + 1 + 17 + 1 + 1 + 1 + maxURLLength

// seal wraps body for key, good until until.
func (a *redisAuth) seal(key, body string, until time.Time) string {
	u := strconv.FormatInt(until.Unix(), 10)
	b := make([]byte, 0, len(sealTag)+len(u)+1+macTextLen+1+len(body))
	b = append(b, sealTag...)
	b = append(b, u...)
	b = append(b, '|')
	b = a.sum(b, "cache", key, u, body)
	b = append(b, '|')
	return string(append(b, body...))
}

// open returns the body sealed in v for key, if its MAC verifies and it
// is still good at now.
func (a *redisAuth) open(key, v string, now time.Time) (string, bool) {
	rest, ok := strings.CutPrefix(v, sealTag)
	if !ok || len(v) > maxSealedLen {
		return "", false
	}
	u, rest, ok := strings.Cut(rest, "|")
	until, uok := parseDecimal(u, 12)
	if !ok || !uok || now.Unix() > until {
		return "", false
	}
	mac, body, ok := strings.Cut(rest, "|")
	if !ok || !a.verify(mac, "cache", key, u, body) {
		return "", false
	}
	return body, true
}
