//go:build unix

package main

import (
	"io"
	"strings"
	"testing"
)

// TestSeedCodes: a code read from the stream maps back to the link
// sql/seed.sql gives it (the seed's comment names two).
func TestSeedCodes(t *testing.T) {
	for _, tt := range []struct {
		code string
		url  string
	}{{"015ftgN", "https://example.com/seed/1"}, {"zOC1qfw", "https://example.com/seed/250000"}} {
		v, ok := parseCode(tt.code)
		if !ok {
			t.Fatalf("parseCode(%q) refused it", tt.code)
		}
		if got := seedURL(v); got != tt.url {
			t.Errorf("seedURL(%s) = %s, want %s", tt.code, got, tt.url)
		}
		if got := codeString(v); got != tt.code {
			t.Errorf("codeString(parseCode(%s)) = %s", tt.code, got)
		}
	}
	for n := uint64(1); n < 100_000; n += 997 {
		if got := linkOf(n * codePrime % codeSpace); got != n {
			t.Fatalf("linkOf(code of %d) = %d", n, got)
		}
	}
}

func TestReadStreamRefusesWhatIsNotACode(t *testing.T) {
	for _, in := range []string{"015ftgN\nzOC1qf\n", "015ftgN\nzOC1qf!\n", "015ftgN \n", "015ftgNN\n"} {
		if _, err := readStream(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("readStream(%q) = %v, want an error naming the line", in, err)
		}
	}
	got, err := readStream(strings.NewReader("015ftgN\nzOC1qfw\n"))
	if err != nil || len(got) != 2 {
		t.Errorf("readStream of two codes = %v, %v", got, err)
	}
}

func TestParseBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
	}{{"1024", 1024}, {"8KiB", 8 << 10}, {"32MiB", 32 << 20}, {"2GiB", 2 << 30}} {
		if got, err := parseBytes(tt.in); err != nil || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.5MiB", "8MB", "8 MiB", "99999999999999999999", "9999999999GiB"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}

// TestMeasureFindsTheBudget: each policy's bound is searched until the
// heap its cache holds is the budget (or the most under it), and the
// caches are filled; the LRU's hit ratio is the same on every replay.
func TestMeasureFindsTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a stream many times")
	}
	// 60,000 lookups over 12,000 links, the low ones more often: more
	// than a MiB of links, so that the cache fills and evicts.
	var stream []uint64
	for i := range 60_000 {
		n := uint64(i%12_000 + 1)
		if i%3 == 0 {
			n = uint64(i%500 + 1)
		}
		stream = append(stream, n*codePrime%codeSpace)
	}
	const budget = 1 << 20
	for _, p := range []policy{lruPolicy{}, otterPolicy{}, otterPolicy{inline: true}} {
		r, err := measure(p, budget, p.firstKnob(budget), stream, 10_000, 12_000, 3, 1000, 100)
		if err != nil {
			t.Fatalf("%s: %v", p.name(), err)
		}
		if !r.full || r.heap > budget*101/100 || r.heap < budget*80/100 {
			t.Errorf("%s: full %v, heap %d bytes; want it full and close to %d", p.name(), r.full, r.heap, budget)
		}
		if len(r.hits) != 3 || r.hits[0] <= 0 || r.hits[2] >= 1 {
			t.Errorf("%s: hit ratios %v, want three between 0 and 1", p.name(), r.hits)
		}
		if _, ok := p.(lruPolicy); ok && r.hits[0] != r.hits[2] {
			t.Errorf("lru: hit ratios %v, want the same on every replay", r.hits)
		}
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"cachesim"},
		{"cachesim", "-stream", "x", "-budgets", "8MB"},
		{"cachesim", "-stream", "x", "-budgets", "512KiB"},
		{"cachesim", "-stream", "x", "-warmup", "1"},
		{"cachesim", "-stream", "x", "-runs", "0"},
		{"cachesim", "-stream", "x", "extra"},
	} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
