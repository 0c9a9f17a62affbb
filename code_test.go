package main

import (
	"errors"
	"strings"
	"testing"
)

func TestNewCode(t *testing.T) {
	seen := make(map[string]bool)
	counts := make(map[rune]int)
	const n = 20000
	for range n {
		c := newCode()
		if !validCode(c) {
			t.Fatalf("newCode() = %q, not a valid code", c)
		}
		if seen[c] {
			t.Fatalf("newCode() returned %q twice in %d draws", c, n)
		}
		seen[c] = true
		for _, r := range c {
			counts[r]++
		}
	}
	// Each character is expected n*7/62 ≈ 2258 times; a modulo bias would
	// put the first eight near 2540 and the rest near 2222.
	want := float64(n*codeLength) / 62
	for _, r := range alphabet {
		if got := float64(counts[r]); got < want*0.85 || got > want*1.15 {
			t.Errorf("character %q drawn %v times, want about %.0f", r, got, want)
		}
	}
}

func TestValidCode(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"abcDEF1", true},
		{"0000000", true},
		{"zzzzzzz", true},
		// Since step 18 an alias's shape is a code's too.
		{"abcd", true},
		{"abcdef", true},
		{"abcdefgh", true},
		{"abc-def", true},
		{"abc_def", true},
		{"a-_-b", true},
		{strings.Repeat("a", 32), true},
		{"", false},
		{"abc", false},
		{strings.Repeat("a", 33), false},
		{"-abcdef", false},
		{"abcdef_", false},
		{"abc.def", false},
		{"abcdéf", false},
		{"abc def", false},
		{"abc/def", false},
		{"abc%2Fdef", false},
		{strings.Repeat("a", 1000), false},
	}
	for _, tt := range tests {
		if got := validCode(tt.in); got != tt.want {
			t.Errorf("validCode(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCheckAlias(t *testing.T) {
	for _, ok := range []string{"launch", "Q3-report", "my_link", "abcd", strings.Repeat("x", 32), "HealthzX", "apis"} {
		if err := checkAlias(ok); err != nil {
			t.Errorf("checkAlias(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "abc", strings.Repeat("x", 33), "-lead", "trail-", "sp ace", "dot.ted", "sl/ash",
		"healthz", "HEALTHZ", "Shorten", "metrics", "admin", "Stats", "well-known", "favicon"} {
		err := checkAlias(bad)
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("checkAlias(%q) = %v, want an ErrBadRequest", bad, err)
		}
	}
}

// TestReservedCoversRoutes: every one-segment path a route owns is a
// reserved alias, so that no link can shadow it.
func TestReservedCoversRoutes(t *testing.T) {
	for _, p := range []string{"healthz", "shorten", "api", "metrics"} {
		if !reserved(p) || !reserved(strings.ToUpper(p)) {
			t.Errorf("%q is a route, and not reserved", p)
		}
	}
}
