package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTargetsAndExactCounts: one target per code read, each with its
// headers; the exact counts are of distinct browser visitors; the same
// seed writes the same files.
func TestTargetsAndExactCounts(t *testing.T) {
	codes := strings.Repeat("aaaaaaa\nbbbbbbb\naaaaaaa\n", 100)
	gen := func() (targets, exact string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "targets")
		var out strings.Builder
		if err := run([]string{"-base", "http://127.0.0.1:1", "-targets", f, "-visitors", "20", "-seed", "3"},
			strings.NewReader(codes), &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), out.String()
	}
	targets, exact := gen()
	if n := strings.Count(targets, "GET http://127.0.0.1:1/"); n != 300 {
		t.Errorf("%d targets, want 300", n)
	}
	if a, b := strings.Count(targets, "X-Forwarded-For: 10."), strings.Count(targets, "User-Agent: "); a != 300 || b != 300 {
		t.Errorf("%d addresses and %d agents, want 300 each", a, b)
	}
	lines := strings.Split(strings.TrimSpace(exact), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "aaaaaaa ") || !strings.HasPrefix(lines[2], "bbbbbbb ") {
		t.Fatalf("exact counts:\n%s\nwant a header and one line per code", exact)
	}
	for _, l := range lines[1:] {
		var code string
		var n int
		if _, err := fmt.Sscan(l, &code, &n); err != nil || n < 1 || n > 20 {
			t.Errorf("%q: want a count from 1 to the 20 visitors of the pool", l)
		}
	}
	if t2, e2 := gen(); t2 != targets || e2 != exact {
		t.Error("the same seed wrote different files")
	}
	if err := run([]string{"-base", "http://x", "-targets", filepath.Join(t.TempDir(), "t")}, strings.NewReader(""), io.Discard, io.Discard); err == nil {
		t.Error("no codes: no error, want one")
	}
}
