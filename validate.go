package main

import (
	"errors"
	"fmt"
	"net"
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

// ErrInvalidURL is wrapped by every reason normalizeURL refuses a URL; the
// text after it is safe to show to the client.
var ErrInvalidURL = errors.New("invalid url")

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
func checkChars(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidURL)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("%w: contains whitespace, a control or an invisible formatting character (%U)", ErrInvalidURL, r)
		}
	}
	return nil
}

// asciiHost returns host (without port or brackets) in lower-case ASCII:
// IP addresses as they are, names converted to punycode.
func asciiHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("host is empty")
	}
	if ip := net.ParseIP(host); ip != nil {
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
	return ascii, nil
}

// sameHost reports whether two hosts from asciiHost name the same machine,
// ignoring a trailing root dot ("example.com." is "example.com").
func sameHost(a, b string) bool {
	return a != "" && strings.TrimSuffix(a, ".") == strings.TrimSuffix(b, ".")
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
