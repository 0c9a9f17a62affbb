package main

import (
	"errors"
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
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080/"},
		{"http://[::1]:8080/a", "http://[::1]:8080/a"},
		{"http://[2001:DB8::1]/", "http://[2001:db8::1]/"},
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

// FuzzNormalizeURL checks the promises the redirect handler relies on for any
// input: an accepted URL is ASCII without spaces or controls (so it can go in
// a Location header), absolute http(s) with a host and no user info, within
// the length limit, and normalizing it again changes nothing.
func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"https://go.dev", "http://[::1]:80/", "https://bücher.example/ß?ä#ö",
		"https://bank.com@evil.example", "javascript:x", "https://a.b/%zz", "http://x:0",
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
		again, err := normalizeURL(out)
		if err != nil {
			t.Fatalf("normalizeURL(%q) = %q, which is then refused: %v", in, out, err)
		}
		if again.String() != out {
			t.Fatalf("normalizeURL not idempotent: %q → %q → %q", in, out, again)
		}
	})
}
