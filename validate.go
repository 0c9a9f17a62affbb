package main

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// maxURLLength is the longest URL the shortener stores, before and after
// normalization. 2,048 bytes is the figure most browsers and CDNs handle.
const maxURLLength = 2048

// hostProfile turns a Unicode host name into the ASCII (punycode) form a
// Location header needs. It is idna's lookup profile with two rules relaxed,
// because real host names break them: labels like "r3---sn-4g5e" (hyphens in
// positions 3 and 4) and "_dmarc" (underscore). asciiHost checks the
// characters itself instead.
var hostProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.CheckHyphens(false),
	idna.StrictDomainName(false),
	idna.VerifyDNSLength(true),
)

// normalizeURL checks that raw is an absolute http or https URL that is safe
// to redirect to, and returns it in the form that is stored and sent in the
// Location header: lower-case scheme, ASCII host, and everything else
// percent-encoded where it was not ASCII.
func normalizeURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: url is empty", ErrInvalidURL)
	}
	if len(raw) > maxURLLength {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalidURL, maxURLLength)
	}
	if err := checkChars(raw); err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole input; the client already has it.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme must be http or https", ErrInvalidURL)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, fmt.Errorf("%w: must be absolute, with a host (like https://example.com/path)", ErrInvalidURL)
	}
	if u.User != nil {
		// https://bank.com@evil.example goes to evil.example.
		return nil, fmt.Errorf("%w: must not contain user info (user@ or user:password@)", ErrInvalidURL)
	}
	// The host may be percent-encoded ("http://%80"): check what it decodes to.
	if err := checkChars(u.Hostname()); err != nil {
		return nil, err
	}
	host, err := asciiHost(u.Hostname())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if why := thisMachine(host); why != "" {
		return nil, fmt.Errorf("%w: host %s %s: a link to it would send each visitor to their own machine", ErrInvalidURL, host, why)
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6 literal
	}
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: port %q is out of range", ErrInvalidURL, port)
		}
		host += ":" + strconv.Itoa(n)
	}
	u.Host = host
	u.RawQuery = escapeNonASCII(u.RawQuery)
	out := u.String()
	if len(out) > maxURLLength {
		return nil, fmt.Errorf("%w: longer than %d bytes once percent-encoded", ErrInvalidURL, maxURLLength)
	}
	return u, nil
}

// checkChars refuses invalid UTF-8, whitespace, control characters and
// invisible formatting characters (such as U+202E, which reverses the text
// after it and is used to disguise links).
//
// U+200C and U+200D (zero-width non-joiner and joiner) are formatting
// characters too, but Persian, Urdu and the Indic scripts need them to spell
// ordinary words, and emoji sequences use the joiner. They cannot reorder
// text, so they are let through here: in the host, IDNA2008's CONTEXTJ rules
// (applied by hostProfile) decide where they may stand, which refuses them
// between Latin letters or at the start of a label; in the path, query and
// fragment the stored URL percent-encodes them (%E2%80%8C), so nothing
// invisible reaches the Location header. Every other formatting character,
// the bidi controls among them, is refused everywhere.
func checkChars(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidURL)
	}
	for _, r := range s {
		if r == '\u200c' || r == '\u200d' {
			continue
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("%w: contains whitespace, a control or an invisible formatting character (%U)", ErrInvalidURL, r)
		}
	}
	return nil
}

// asciiHost returns host (without port or brackets) in the canonical form a
// browser would connect to: IPv6 addresses compressed and lower-case, names
// converted to lower-case punycode, and any name whose last label is a
// number read as an IPv4 address and written as four decimal parts.
//
// Browsers follow the WHATWG URL standard, under which "127.1",
// "2130706433", "0x7f000001" and "0177.0.0.1" all mean 127.0.0.1. Comparing
// hosts as text would miss that, so every host is first put in this form.
func asciiHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("host is empty")
	}
	if strings.Contains(host, ":") {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return "", fmt.Errorf("host %q is not a valid IPv6 address", host)
		}
		if ip.Zone() != "" {
			// A zone ("%en0") names an interface of the visitor's machine.
			return "", fmt.Errorf("host %q has an IPv6 zone, which only means something on one machine", host)
		}
		return ip.String(), nil
	}
	ascii, err := hostProfile.ToASCII(host)
	if err != nil {
		return "", fmt.Errorf("host %q is not a valid domain name", host)
	}
	for i := 0; i < len(ascii); i++ {
		c := ascii[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("host %q is not a valid domain name", host)
		}
	}
	if endsInNumber(ascii) {
		ip, err := parseIPv4(ascii)
		if err != nil {
			return "", fmt.Errorf("host %q ends in a number, so browsers read it as an IPv4 address, but it is not one: %v", host, err)
		}
		return ip.String(), nil
	}
	// One trailing dot is the DNS root ("example.com." is fully
	// qualified); any other empty label ("a..b", ".a", "a..") is a typo
	// that resolvers and browsers treat differently.
	for _, label := range strings.Split(strings.TrimSuffix(ascii, "."), ".") {
		if label == "" {
			return "", fmt.Errorf("host %q has an empty label (two dots in a row)", host)
		}
	}
	return ascii, nil
}

// endsInNumber is the WHATWG URL standard's "ends in a number" checker: it
// reports whether the last label of host (ignoring one trailing dot) is all
// decimal digits or parses as an IPv4 number ("0x1f", "017"), in which case
// browsers parse the whole host as an IPv4 address.
func endsInNumber(host string) bool {
	labels := strings.Split(host, ".")
	if labels[len(labels)-1] == "" {
		if len(labels) == 1 {
			return false
		}
		labels = labels[:len(labels)-1]
	}
	last := labels[len(labels)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := parseIPv4Number(last)
	return ok
}

// parseIPv4 is the WHATWG URL standard's IPv4 parser. The host has one to
// four dot-separated numbers (with one trailing dot allowed); every number
// but the last is one byte, and the last fills the bytes that remain, so
// "127.1" is 127.0.0.1 and "2130706433" is 127.0.0.1 too.
func parseIPv4(host string) (netip.Addr, error) {
	parts := strings.Split(host, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return netip.Addr{}, errors.New("more than four parts")
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, fmt.Errorf("part %q is not a number", p)
		}
		nums[i] = n
	}
	last := len(nums) - 1
	for _, n := range nums[:last] {
		if n > 255 {
			return netip.Addr{}, fmt.Errorf("part %d is over 255", n)
		}
	}
	if nums[last] >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, errors.New("last part is out of range")
	}
	ipv4 := nums[last]
	for i, n := range nums[:last] {
		ipv4 += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(ipv4 >> 24), byte(ipv4 >> 16), byte(ipv4 >> 8), byte(ipv4)}), nil
}

// parseIPv4Number is the WHATWG URL standard's IPv4 number parser: decimal,
// hexadecimal after "0x" or "0X", octal after a leading "0"; "0x" alone is
// zero. Values past 2^32 are returned as 2^32, which every caller refuses as
// out of range, so that a long string of digits cannot overflow.
func parseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, base = s[1:], 8
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		var d uint64
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		n = min(n*base+d, 1<<32)
	}
	return n, true
}

// thisMachine says why host (from asciiHost) can only mean the machine the
// browser runs on, or returns "". Loopback addresses and the names under
// "localhost" (which RFC 6761 reserves for loopback) reach the visitor's own
// machine; browsers send the unspecified address (0.0.0.0, ::) there too.
func thisMachine(host string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
		switch {
		case ip.IsLoopback():
			return "is a loopback address"
		case ip.IsUnspecified():
			return "is the unspecified address"
		}
		return ""
	}
	name := strings.TrimSuffix(host, ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return "is a localhost name"
	}
	return ""
}

// sameHost reports whether two hosts from asciiHost name the same machine,
// ignoring a trailing root dot ("example.com." is "example.com") and reading
// an IPv4-mapped IPv6 address as the IPv4 address it maps
// ([::ffff:192.0.2.1] is 192.0.2.1).
func sameHost(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if ipA, err := netip.ParseAddr(a); err == nil {
		ipB, err := netip.ParseAddr(b)
		return err == nil && ipA.Unmap() == ipB.Unmap()
	}
	return strings.TrimSuffix(a, ".") == strings.TrimSuffix(b, ".")
}

// escapeNonASCII percent-encodes every byte of s outside ASCII. url.URL
// escapes the path and fragment itself but sends RawQuery as it came.
func escapeNonASCII(s string) string {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		if c := s[i]; c < utf8.RuneSelf {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
