// Command zipf writes the codes a long-tail benchmark asks for: a stream of
// link codes drawn from a Zipf distribution over the links sql/seed.sql
// makes, or those links themselves in the form Postgres's COPY reads, which
// seeds ten million links in a fraction of seed.sql's time.
//
//	go run ./benchmarks/zipf -links 10000000 -s 1.0 -n 1000000 -seed 1 >stream
//	go run ./benchmarks/zipf -seed-copy 10000000 | psql "$DATABASE_URL" -c 'COPY links (code, url) FROM STDIN'
//	go run ./benchmarks/zipf -code 250000   # zOC1qfw
//
// Rank r is link number r, whose code is n * 1000000007 mod 62^7 written in
// base 62, seven digits, exactly as sql/seed.sql writes it, so rank 1, the
// most requested link, is the first seeded one. P(r) is proportional to
// r^-s over ranks 1..links; s may be any positive number. math/rand/v2's
// Zipf needs s > 1, and measured traffic to short links is often flatter
// than that, so this draws with rejection-inversion (Hörmann and Derflinger,
// "Rejection-inversion to generate variates from monotone discrete
// distributions", 1996), which needs neither a table of ten million
// cumulative weights nor s > 1. The same flags and seed give the same lines
// on every machine.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "zipf:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("zipf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	links := fs.Int64("links", 10_000_000, "ranks 1..`N`: the seeded links the stream draws from")
	s := fs.Float64("s", 1.0, "Zipf exponent `S` > 0: P(rank r) is proportional to r^-S")
	n := fs.Int64("n", 1_000_000, "`COUNT` codes to print, one a line")
	seed := fs.Uint64("seed", 1, "seed `K` of the random stream: the same K, the same lines")
	seedCopy := fs.Int64("seed-copy", 0, "instead of a stream, print `N` lines \"code<TAB>url\" for links 1..N, for COPY links (code, url) FROM STDIN")
	codeOf := fs.Int64("code", 0, "instead of a stream, print the code of link `N`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	if *codeOf != 0 {
		if *codeOf < 0 || *codeOf >= codeSpace {
			return fmt.Errorf("-code %d: want 1..%d", *codeOf, codeSpace-1)
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", appendCode(nil, *codeOf)); err != nil {
			return fmt.Errorf("write code: %w", err)
		}
		return nil
	}
	if *seedCopy != 0 {
		if *seedCopy < 0 || *seedCopy >= codeSpace {
			return fmt.Errorf("-seed-copy %d: want 1..%d", *seedCopy, codeSpace-1)
		}
		if err := writeSeedCopy(w, *seedCopy); err != nil {
			return fmt.Errorf("write seed rows: %w", err)
		}
		return nil
	}
	if *links < 1 || *links >= codeSpace {
		return fmt.Errorf("-links %d: want 1..%d", *links, codeSpace-1)
	}
	if !(*s > 0) || math.IsInf(*s, 0) {
		return fmt.Errorf("-s %v: want a number > 0", *s)
	}
	if *n < 0 {
		return fmt.Errorf("-n %d: want 0 or more", *n)
	}
	z := newZipf(rand.New(rand.NewPCG(*seed, 0x5eed)), *s, *links)
	buf := make([]byte, 0, 8)
	for range *n {
		buf = append(appendCode(buf[:0], z.next()), '\n')
		if _, err := w.Write(buf); err != nil {
			return fmt.Errorf("write stream: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write stream: %w", err)
	}
	return nil
}

const (
	codeDigits = 7
	codeSpace  = 3521614606208 // 62^7
	codePrime  = 1000000007    // shares no factor with 62^7: n -> code is one-to-one
	alphabet   = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// appendCode appends the code sql/seed.sql gives link n (1 <= n < 62^7).
func appendCode(b []byte, n int64) []byte {
	v := uint64(n) * codePrime % codeSpace // n < 62^7 < 2^42: no overflow
	var d [codeDigits]byte
	for i := codeDigits - 1; i >= 0; i-- {
		d[i] = alphabet[v%62]
		v /= 62
	}
	return append(b, d[:]...)
}

// writeSeedCopy writes links 1..n as sql/seed.sql makes them, in COPY's
// text format: no field holds a tab, a newline or a backslash.
func writeSeedCopy(w *bufio.Writer, n int64) error {
	b := make([]byte, 0, 64)
	for i := int64(1); i <= n; i++ {
		b = appendCode(b[:0], i)
		b = append(b, "\thttps://example.com/seed/"...)
		b = strconv.AppendInt(b, i, 10)
		b = append(b, '\n')
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return w.Flush()
}

// zipf draws ranks 1..n with P(k) proportional to k^-s, s > 0, by
// rejection-inversion: a uniform draw under the integral of the continuous
// hat function h(x) = x^-s is inverted to x and rounded to k; k is kept if
// it falls under the bar of the true weight h(k) (the quick test k-x <= t
// accepts most draws without a log). The algorithm and its helper functions follow
// Apache Commons RNG's RejectionInversionZipfSampler, which handles s = 1
// (where the integral becomes a logarithm) through helper1 and helper2.
type zipf struct {
	r                *rand.Rand
	s                float64
	n                float64
	hIntegralX1      float64
	hIntegralN       float64
	quickAcceptLimit float64
}

func newZipf(r *rand.Rand, s float64, n int64) *zipf {
	z := &zipf{r: r, s: s, n: float64(n)}
	z.hIntegralX1 = z.hIntegral(1.5) - 1
	z.hIntegralN = z.hIntegral(z.n + 0.5)
	z.quickAcceptLimit = 2 - z.hIntegralInverse(z.hIntegral(2.5)-z.h(2))
	return z
}

func (z *zipf) next() int64 {
	for {
		// u is uniform in (hIntegralX1, hIntegralN]: Float64 is in [0, 1).
		u := z.hIntegralN + z.r.Float64()*(z.hIntegralX1-z.hIntegralN)
		x := z.hIntegralInverse(u)
		k := math.Floor(x + 0.5)
		k = min(max(k, 1), z.n) // rounding at the ends
		if k-x <= z.quickAcceptLimit || u >= z.hIntegral(k+0.5)-z.h(k) {
			return int64(k)
		}
	}
}

// h is the hat function x^-s.
func (z *zipf) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

// hIntegral is an antiderivative of h: (x^(1-s) - 1) / (1-s), log(x) at s = 1.
func (z *zipf) hIntegral(x float64) float64 {
	logX := math.Log(x)
	return helper2((1-z.s)*logX) * logX
}

// hIntegralInverse is hIntegral's inverse.
func (z *zipf) hIntegralInverse(x float64) float64 {
	t := x * (1 - z.s)
	if t < -1 {
		t = -1 // rounding can take t just past the domain of log1p
	}
	return math.Exp(helper1(t) * x)
}

// helper1 is log(1+x)/x, and its limit 1 near 0.
func helper1(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(0.5-x*(1.0/3.0-0.25*x))
}

// helper2 is (exp(x)-1)/x, and its limit 1 near 0.
func helper2(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x*0.5*(1+x/3*(1+0.25*x))
}
