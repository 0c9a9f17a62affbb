package main

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizeURL(t *testing.T) {
	long := "https://example.com/" + strings.Repeat("a", maxURLLength)
	tests := []struct {
		in   string
		want string // "" means the URL must be refused
	}{
		{"https://go.dev", "https://go.dev"},
		{"HTTP://Example.COM/Path?q=1#top", "http://example.com/Path?q=1#top"},
		{"https://example.com:8443/x", "https://example.com:8443/x"},
		{"https://example.com:08443/x", "https://example.com:8443/x"},
		{"https://example.com:/x", "https://example.com/x"},
		{"http://192.0.2.1:8080/", "http://192.0.2.1:8080/"},
		{"http://[2001:db8::1]:8080/a", "http://[2001:db8::1]:8080/a"},
		{"http://[2001:DB8::1]/", "http://[2001:db8::1]/"},
		{"http://[2001:0DB8:0:0::1]/", "http://[2001:db8::1]/"},
		{"http://[::ffff:192.0.2.1]/", "http://[::ffff:192.0.2.1]/"},
		// Numeric hosts as a browser reads them (WHATWG URL standard).
		{"http://3221225985/", "http://192.0.2.1/"},
		{"http://0xC0000201/", "http://192.0.2.1/"},
		{"http://0300.0.2.1/", "http://192.0.2.1/"},
		{"http://192.0.513/", "http://192.0.2.1/"},
		{"http://192.513/", "http://192.0.2.1/"},
		{"http://0xc0.0.0x2.01/", "http://192.0.2.1/"},
		{"http://192.0.2.1./", "http://192.0.2.1/"},
		{"http://１９２.０.２.１/", "http://192.0.2.1/"},
		{"http://08.example/", "http://08.example/"},
		{"http://example.0x1g/", "http://example.0x1g/"},
		{"http://localhost.example/", "http://localhost.example/"},
		// Zero-width (non-)joiners where IDNA2008's CONTEXTJ allows them,
		// and percent-encoded in the path.
		{"https://می\u200cخواهم.ir/", "https://xn--mgbn2ecje63gr19l.ir/"},
		{"https://क्\u200dष.in/", "https://xn--11b2ezcw70k.in/"},
		{"https://fa.wikipedia.org/wiki/می\u200cخواهم", "https://fa.wikipedia.org/wiki/%D9%85%DB%8C%E2%80%8C%D8%AE%D9%88%D8%A7%D9%87%D9%85"},
		{"https://example.com/👨\u200d👩\u200d👧", "https://example.com/%F0%9F%91%A8%E2%80%8D%F0%9F%91%A9%E2%80%8D%F0%9F%91%A7"},
		{"https://bücher.example/straße?q=größe#fuß", "https://xn--bcher-kva.example/stra%C3%9Fe?q=gr%C3%B6%C3%9Fe#fu%C3%9F"},
		{"https://例え.テスト/", "https://xn--r8jz45g.xn--zckzah/"},
		{"https://r3---sn-4g5e.googlevideo.com/v", "https://r3---sn-4g5e.googlevideo.com/v"},
		{"https://_dmarc.example.com/", "https://_dmarc.example.com/"},
		{"https://example.com/a%20b", "https://example.com/a%20b"},
		{"https://example.com./", "https://example.com./"},

		{"", ""},
		{"go.dev", ""},
		{"/relative/path", ""},
		{"//example.com/x", ""},
		{"ftp://example.com/", ""},
		{"javascript:alert(1)", ""},
		{"data:text/html,<script>alert(1)</script>", ""},
		{"http:example.com", ""},
		{"http:///path", ""},
		{"https://bank.com@evil.example", ""},
		{"https://user:pass@example.com/", ""},
		{"https://@example.com/", ""},
		{"https://exa mple.com/", ""},
		{"https://example.com/a b", ""},
		{"https://example.com/a\tb", ""},
		{"https://example.com/\r\nSet-Cookie: x=1", ""},
		{"https://example.com/\x00", ""},
		{"https://example.com/\u00a0", ""},
		{"https://example.com/\u202egnp.exe", ""},
		{"https://exa\u200bmple.com/", ""},
		{"https://example.com/\xff", ""},
		{"https://example.com:0/", ""},
		{"https://example.com:65536/", ""},
		{"https://example.com:99999999999999999999/", ""},
		{"https://exa<mple.com/", ""},
		{"https://a..b/", ""},
		{"https://[fe80::1%25en0]/", ""},
		{"https://%zz/", ""},
		{long, ""},
	}
	for _, tt := range tests {
		u, err := normalizeURL(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("normalizeURL(%q) = %q, want an error", tt.in, u)
			} else if !errors.Is(err, ErrInvalidURL) {
				t.Errorf("normalizeURL(%q) error %v, want it to wrap ErrInvalidURL", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("normalizeURL(%q) error %v, want %q", tt.in, err, tt.want)
			continue
		}
		if got := u.String(); got != tt.want {
			t.Errorf("normalizeURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestNormalizeURLRefusesWithReason checks the refusals whose message says
// what is wrong with the host.
func TestNormalizeURLRefusesWithReason(t *testing.T) {
	tests := []struct{ in, errHas string }{
		// Every spelling of the loopback address a browser accepts.
		{"http://127.0.0.1:8080/", "host 127.0.0.1 is a loopback address"},
		{"http://127.1/", "host 127.0.0.1 is a loopback address"},
		{"http://2130706433/", "host 127.0.0.1 is a loopback address"},
		{"http://0x7f000001/", "host 127.0.0.1 is a loopback address"},
		{"http://0X7F.1/", "host 127.0.0.1 is a loopback address"},
		{"http://0177.0.0.1/", "host 127.0.0.1 is a loopback address"},
		{"http://127.0.0.1./", "host 127.0.0.1 is a loopback address"},
		{"http://127.255.255.254/", "host 127.255.255.254 is a loopback address"},
		{"http://１２７.０.０.１/", "host 127.0.0.1 is a loopback address"},
		{"http://127\u30020\u30020\u30021/", "host 127.0.0.1 is a loopback address"},
		{"http://[::1]:8080/a", "host ::1 is a loopback address"},
		{"http://[0:0::1]/", "host ::1 is a loopback address"},
		{"http://[::ffff:127.0.0.1]/", "loopback address"},
		{"http://[::ffff:7f00:1]/", "loopback address"},
		{"http://localhost:8080/", "host localhost is a localhost name"},
		{"http://LocalHost./", "is a localhost name"},
		{"http://api.localhost/", "host api.localhost is a localhost name"},
		{"http://0.0.0.0/", "host 0.0.0.0 is the unspecified address"},
		{"http://0/", "host 0.0.0.0 is the unspecified address"},
		{"http://0x/", "host 0.0.0.0 is the unspecified address"},
		{"http://[::]/", "host :: is the unspecified address"},
		{"http://[::ffff:0.0.0.0]/", "unspecified address"},
		// A last label that is a number makes the host an IPv4 address to
		// a browser, and these are not valid ones.
		{"http://1.2.3.4.5/", "more than four parts"},
		{"http://256.1.1.1/", "is over 255"},
		{"http://1.2.3.256/", "out of range"},
		{"http://1.2.65536/", "out of range"},
		{"http://1.16777216/", "out of range"},
		{"http://4294967296/", "out of range"},
		{"http://99999999999999999999999999/", "out of range"},
		{"http://09/", `part "09" is not a number`},
		{"http://1.08/", `part "08" is not a number`},
		{"http://example.123/", `part "example" is not a number`},
		{"http://example.0x/", "ends in a number"},
		{"http://1.2.3.4../", "empty label"},
		// Empty labels: one trailing root dot is fine, anything else is not.
		{"https://example.com../", "empty label"},
		{"https://example..com/", "not a valid domain name"},
		{"https://.example.com/", "not a valid domain name"},
		// Joiners where CONTEXTJ forbids them, and other invisible characters.
		{"https://\u200cمی.ir/", "not a valid domain name"},
		{"https://ab\u200ccd.com/", "not a valid domain name"},
		{"https://exa\u200dmple.com/", "not a valid domain name"},
		{"https://example.com/\u202egnp.exe", "U+202E"},
		{"https://example.com/a\u200fb", "U+200F"},
		{"https://exa\u200bmple.com/", "U+200B"},
		{"https://[fe80::1%25en0]/", "zone"},
	}
	for _, tt := range tests {
		u, err := normalizeURL(tt.in)
		if err == nil {
			t.Errorf("normalizeURL(%q) = %q, want an error containing %q", tt.in, u, tt.errHas)
			continue
		}
		if !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), tt.errHas) {
			t.Errorf("normalizeURL(%q) error %q, want one wrapping ErrInvalidURL and containing %q", tt.in, err, tt.errHas)
		}
	}
}

// TestAsciiHost covers the forms config.go and requestHost rely on: the
// same canonical host as normalizeURL stores, and localhost still allowed
// (a BASE_URL may use it; only link targets may not).
func TestAsciiHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Sho.RT", "sho.rt"},
		{"sho.rt.", "sho.rt."},
		{"localhost", "localhost"},
		{"127.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"::FFFF:7F00:1", "::ffff:127.0.0.1"},
		{"0:0::1", "::1"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"", ""},
		{"1.2.3.4.5", ""},
		{"a..b", ""},
		{"a.b..", ""},
		{"fe80::1%en0", ""},
		{"1.2.3.4:80", ""},
	}
	for _, tt := range tests {
		got, err := asciiHost(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("asciiHost(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("asciiHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSameHost(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"sho.rt", "sho.rt", true},
		{"sho.rt.", "sho.rt", true},
		{"sho.rt", "sho.rt.example", false},
		{"192.0.2.1", "192.0.2.1", true},
		{"192.0.2.1", "::ffff:192.0.2.1", true},
		{"::ffff:192.0.2.1", "192.0.2.1", true},
		{"::1", "0:0::1", true},
		{"192.0.2.1", "192.0.2.2", false},
		{"192.0.2.1", "sho.rt", false},
		{"sho.rt", "192.0.2.1", false},
		{"", "", false},
		{"sho.rt", "", false},
	}
	for _, tt := range tests {
		if got := sameHost(tt.a, tt.b); got != tt.want {
			t.Errorf("sameHost(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzNormalizeURL checks the promises the redirect handler relies on for any
// input: an accepted URL is ASCII without spaces or controls (so it can go in
// a Location header), absolute http(s) with a host and no user info, within
// the length limit, not pointing at the visitor's own machine, with a
// numeric host only in dotted IPv4 form, and normalizing it again changes
// nothing.
func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"https://go.dev", "http://[::1]:80/", "https://bücher.example/ß?ä#ö",
		"https://bank.com@evil.example", "javascript:x", "https://a.b/%zz", "http://x:0",
		"http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/",
		"http://192.0.513./", "http://1.2.3.4.5/", "http://[::ffff:127.0.0.1]/", "http://[0:0::1]/",
		"http://localhost./", "http://a.localhost/", "http://0/", "https://example.com../",
		"https://می\u200cخواهم.ir/", "https://ab\u200ccd.com/", "http://[::ffff:0.0.0.1]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := normalizeURL(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidURL) {
				t.Fatalf("normalizeURL(%q) error %v does not wrap ErrInvalidURL", in, err)
			}
			return
		}
		out := u.String()
		if len(out) > maxURLLength {
			t.Fatalf("normalizeURL(%q) = %d bytes, over %d", in, len(out), maxURLLength)
		}
		for i := 0; i < len(out); i++ {
			if c := out[i]; c <= ' ' || c >= utf8.RuneSelf {
				t.Fatalf("normalizeURL(%q) = %q has byte %#x at %d", in, out, c, i)
			}
		}
		p, err := url.Parse(out)
		if err != nil {
			t.Fatalf("normalizeURL(%q) = %q, which does not parse: %v", in, out, err)
		}
		if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil {
			t.Fatalf("normalizeURL(%q) = %q: scheme %q host %q user %v", in, out, p.Scheme, p.Host, p.User)
		}
		if why := thisMachine(p.Hostname()); why != "" {
			t.Fatalf("normalizeURL(%q) = %q, whose host %s", in, out, why)
		}
		if h := p.Hostname(); !strings.Contains(h, ":") && endsInNumber(h) {
			if ip, err := netip.ParseAddr(h); err != nil || !ip.Is4() || ip.String() != h {
				t.Fatalf("normalizeURL(%q) = %q, whose host ends in a number but is not dotted IPv4", in, out)
			}
		}
		again, err := normalizeURL(out)
		if err != nil {
			t.Fatalf("normalizeURL(%q) = %q, which is then refused: %v", in, out, err)
		}
		if again.String() != out {
			t.Fatalf("normalizeURL not idempotent: %q → %q → %q", in, out, again)
		}
	})
}
