package main

import (
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
		{"", false},
		{"abcdef", false},
		{"abcdefgh", false},
		{"abc-def", false},
		{"abc_def", false},
		{"abc.def", false},
		{"abcdéf", false},
		{"abc def", false},
		{strings.Repeat("a", 1000), false},
	}
	for _, tt := range tests {
		if got := validCode(tt.in); got != tt.want {
			t.Errorf("validCode(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
