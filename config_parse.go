package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// checkRedisPool refuses pool settings in a REDIS_URL that go-redis would
// crash on.
func checkRedisPool(o *redis.Options) error {
	for _, n := range []struct {
		name string
		v    int
	}{{"pool_size", o.PoolSize}, {"min_idle_conns", o.MinIdleConns}, {"max_idle_conns", o.MaxIdleConns}, {"max_active_conns", o.MaxActiveConns}} {
		if n.v < 0 || n.v > maxRedisConns {
			return fmt.Errorf("%s=%d: want 0 to %d", n.name, n.v, maxRedisConns)
		}
	}
	return nil
}

// checkBaseURL accepts a BASE_URL that short links can be appended to
// (BASE_URL + "/" + code) and returns its host in asciiHost's form.
func checkBaseURL(raw string) (host string, ok bool) {
	// A '?' or '#' would turn the code into a query or a fragment, and
	// "//" in the path is a different URL from the one the mux serves.
	// (url.Parse lets an empty "?" or "#" through, hence the raw checks.)
	if strings.ContainsAny(raw, "?#") || strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Opaque != "" || strings.Contains(u.Path, "//") {
		return "", false
	}
	if strings.HasSuffix(u.Host, ":") {
		return "", false // an empty port
	}
	if p := u.Port(); p != "" {
		n, err := parseDigits(p)
		if err != nil || n < 1 || n > 65535 {
			return "", false
		}
	}
	host, err = asciiHost(u.Hostname())
	if err != nil || host == "" {
		return "", false
	}
	return host, true
}

// loopbackAddr says whether addr (host:port, as net.Listen takes it) can
// only be reached from this machine: a loopback IP or "localhost". An
// empty host is every interface; any other name may resolve anywhere.
func loopbackAddr(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false, nil // a name, or nothing: maybe public
	}
	return a.Unmap().IsLoopback(), nil
}

// envReader reads typed settings from the environment. A bad value is
// remembered and the default kept, so that loadConfig can go on and report
// every bad variable together.
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (e *envReader) fail(name, raw, want string) {
	e.errs = append(e.errs, fmt.Errorf("config: %s=%q: %s", name, raw, want))
}

func (e *envReader) err() error { return errors.Join(e.errs...) }

func (e *envReader) str(name, def string) string {
	if raw := e.getenv(name); raw != "" {
		return raw
	}
	return def
}

// durationOrZero reads 0 or a duration from lo to hi (where 0 means "no
// limit", the caller says so).
func (e *envReader) durationOrZero(name string, def, lo, hi time.Duration) time.Duration {
	return read(e, name, def, fmt.Sprintf("want 0 or a duration from %s to %s", lo, hi), func(raw string) (time.Duration, bool) {
		d, err := time.ParseDuration(raw)
		return d, err == nil && (d == 0 || d >= lo && d <= hi)
	})
}

// bool reads true or false (or 1 or 0).
func (e *envReader) bool(name string, def bool) bool {
	return read(e, name, def, "want true or false", func(raw string) (bool, bool) {
		b, err := strconv.ParseBool(raw)
		return b, err == nil
	})
}

// read is the one shape every typed getter shares: unset gives def, a value
// parse refuses is recorded as an error. (A method cannot have type
// parameters in Go, so this is a function taking the reader.)
func read[T any](e *envReader, name string, def T, want string, parse func(string) (T, bool)) T {
	raw := e.getenv(name)
	if raw == "" {
		return def
	}
	v, ok := parse(raw)
	if !ok {
		e.fail(name, raw, want)
		return def
	}
	return v
}

// oneOf reads one of the words given; the first is not special.
func (e *envReader) oneOf(name, def string, words ...string) string {
	return read(e, name, def, "want one of "+strings.Join(words, ", "), func(raw string) (string, bool) {
		return raw, slices.Contains(words, raw)
	})
}

// intIn reads a whole number from lo to hi: every integer setting comes
// through here, so that all of them take the same spelling.
func (e *envReader) intIn(name string, def, lo, hi int) int {
	return read(e, name, def, fmt.Sprintf("want a whole number from %d to %d", lo, hi), func(raw string) (int, bool) {
		n, err := parseDigits(strings.TrimPrefix(raw, "-"))
		if err != nil {
			return 0, false
		}
		if raw[0] == '-' {
			n = -n
		}
		return n, n >= lo && n <= hi
	})
}

// parseDigits reads a number written in ASCII digits only: no sign, no
// spaces, no underscores (strconv.Atoi takes "+5"; a setting should not
// have two spellings), and an error instead of a wrap past the int range.
func parseDigits(s string) (int, error) {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("parse %q: want digits only", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("parse %q: %w", s, err)
	}
	return n, nil
}

// parseFPRate reads a false-positive rate: digits with at most one decimal
// point ("0.01", ".001"), no sign, exponent, spaces or words (ParseFloat
// alone takes "1e-2", "+0.01", "NaN" and "Inf"), above 0 and below 0.5: a
// filter that lets half the unknown codes through is not worth its memory.
func parseFPRate(raw string) (float64, bool) {
	if strings.Count(raw, ".") > 1 || strings.ContainsFunc(raw, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }) {
		return 0, false
	}
	p, err := strconv.ParseFloat(raw, 64)
	return p, err == nil && p > 0 && p < 0.5
}

// parseBytes reads a size: digits alone (bytes), or digits followed by KiB,
// MiB or GiB, powers of 1024 as GOMEMLIMIT writes them. No decimal
// point, space or other unit (is "MB" 10^6 or 2^20?), and an error instead of
// a wrap past the int64 range.
func parseBytes(s string) (int64, error) {
	digits, mult := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if d, ok := strings.CutSuffix(s, u.suffix); ok {
			digits, mult = d, u.mult
			break
		}
	}
	n, err := parseDigits(digits)
	if err != nil {
		return 0, fmt.Errorf("parse size %q: %w", s, err)
	}
	if int64(n) > math.MaxInt64/mult {
		return 0, fmt.Errorf("parse size %q: past %d bytes", s, int64(math.MaxInt64))
	}
	return int64(n) * mult, nil
}

// durationIn reads a duration from lo to hi.
func (e *envReader) durationIn(name string, def, lo, hi time.Duration) time.Duration {
	return read(e, name, def, fmt.Sprintf("want a duration from %s to %s", lo, hi), func(raw string) (time.Duration, bool) {
		d, err := time.ParseDuration(raw)
		return d, err == nil && d >= lo && d <= hi
	})
}

// parseHostPorts reads a comma-separated list of host:port, at most 16,
// each port a number from 1 to 65535.
func parseHostPorts(raw string) ([]string, bool) {
	parts := strings.Split(raw, ",")
	if len(parts) > 16 {
		return nil, false
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		host, port, err := net.SplitHostPort(p)
		if err != nil || host == "" {
			return nil, false
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

// parseMasterName reads the name a Sentinel knows a master by.
func parseMasterName(raw string) (string, bool) {
	if len(raw) > 64 {
		return "", false
	}
	for _, r := range raw {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return "", false
		}
	}
	return raw, true
}
