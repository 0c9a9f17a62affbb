package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testTimeout bounds every test's calls to Postgres: generous, a hang is a
// failure, not a wait.
const testTimeout = 30 * time.Second

// adminURL is the Postgres the tests create their databases from. This is
// a benchmark's module, so without TEST_DATABASE_URL its tests that need
// Postgres are skipped, loudly; CI sets it, and fails if any was skipped.
func adminURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		t.Skip("SKIPPED: TEST_DATABASE_URL is not set, and this test needs a real Postgres (CI sets it)")
	}
	return u
}

// seededTestDB is a database of the test's own, seeded with rows links by
// the app's sql/seed.sql, dropped when the test ends.
func seededTestDB(t *testing.T, rows int) string {
	t.Helper()
	admin := adminURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	name, dsn, err := createDatabase(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(admin, name); err != nil {
			t.Error(err)
		}
	})
	if err := seedDatabase(ctx, dsn, "../../sql/schema.sql", "../../sql/seed.sql", rows); err != nil {
		t.Fatal(err)
	}
	return dsn
}

func openVariant(t *testing.T, v variant, dsn string) lookuper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l, err := v.open(ctx, dsn)
	if err != nil {
		t.Fatalf("%s: %v", v.name, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("%s: close: %v", v.name, err)
		}
	})
	return l
}

// databaseExists says whether admin's server has a database named name.
func databaseExists(t *testing.T, admin, name string) bool {
	t.Helper()
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// The codes sql/seed.sql's own comment gives.
func TestSeededCode(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{1, "015ftgN"}, {250000, "zOC1qfw"}} {
		if got := seededCode(tc.n); got != tc.want {
			t.Errorf("seededCode(%d): got %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestDriversAgree asks every variant the same codes, found and not, and
// each must give the seeded answer; then drives each at concurrency 8,
// checking every answer.
func TestDriversAgree(t *testing.T) {
	t.Parallel()
	const rows = 1000
	dsn := seededTestDB(t, rows)
	// Each lookup gets testTimeout, not the sitting's dbTimeout: under CI,
	// with the suite's other packages beside it, 3 lookups of 1,600 once
	// took longer than dbTimeout, and "no timeouts" below failed (step 18).
	w := newWorkload(rows, 0.3, testTimeout)
	cases := []struct {
		code  string
		want  string
		found bool
	}{
		{w.code(1), seedURLPrefix + "1", true},
		{w.code(500), seedURLPrefix + "500", true},
		{w.code(rows), seedURLPrefix + strconv.Itoa(rows), true},
		{w.unknownCode(0), "", false},
		{w.unknownCode(unknownCodes - 1), "", false},
		{"nope", "", false},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			l := openVariant(t, v, dsn)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			for _, tc := range cases {
				got, found, err := l.lookup(ctx, tc.code)
				if err != nil {
					t.Fatalf("lookup %s: %v", tc.code, err)
				}
				if got != tc.want || found != tc.found {
					t.Errorf("lookup %s: got %q, %v, want %q, %v", tc.code, got, found, tc.want, tc.found)
				}
			}
			const conc, each = 8, 200
			c, _, err := drive(ctx, l, w, runSpec{conc: conc, perWorker: each, seed: 7}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.lookups != conc*each || c.found+c.notFound != c.lookups || c.found == 0 || c.notFound == 0 || c.timeouts != 0 {
				t.Errorf("drive: got %+v, want %d lookups, found and not found both, no timeouts", c, conc*each)
			}
			// A lookup past its deadline is counted, not failed, and
			// not taken for an answer.
			late := *w
			late.timeout = -1 // a deadline already past
			c, _, err = drive(ctx, l, &late, runSpec{conc: 2, perWorker: 10, seed: 7}, nil)
			if err != nil || c != (counts{timeouts: 20}) {
				t.Errorf("drive, every deadline past: got %+v, %v; want 20 timeouts, nothing else", c, err)
			}
		})
	}
}

// TestDriveCatchesWrongAnswers gives drive workloads whose expectations
// the database contradicts: a wrong answer must be an error.
func TestDriveCatchesWrongAnswers(t *testing.T) {
	t.Parallel()
	const rows = 10
	dsn := seededTestDB(t, rows)
	for _, tc := range []struct {
		name string
		w    *workload
		want string
	}{
		// Link 2's code where link 1's should be: the URL is link 2's.
		{"wrong url", &workload{rows: 1, codes: seededCode(2), unknown: seededCode(rows + 1), timeout: dbTimeout},
			fmt.Sprintf("got %q, want %q", seedURLPrefix+"2", seedURLPrefix+"1")},
		// A seeded code taken for an unknown one.
		{"found, want not found", &workload{rows: 1, codes: seededCode(1), unknown: seededCode(5), miss: 1, timeout: dbTimeout},
			"want not found"},
		// An unknown code taken for link 1's.
		{"not found, want found", &workload{rows: 1, codes: seededCode(rows + 1), unknown: seededCode(rows + 2), timeout: dbTimeout},
			"not found, want " + seedURLPrefix + "1"},
	} {
		for _, v := range variants {
			t.Run(tc.name+"/"+v.name, func(t *testing.T) {
				l := openVariant(t, v, dsn)
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				_, _, err := drive(ctx, l, tc.w, runSpec{conc: 4, perWorker: 20, seed: 1}, nil)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("drive: got error %v, want one saying %q", err, tc.want)
				}
			})
		}
	}
}

// cancelOn is a writer that cancels a context once a line containing
// marker has been written to it.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if c.marker != "" && strings.Contains(c.buf.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

var createdRE = regexp.MustCompile(`created database (shortener_drivers_[0-9a-f]{8})`)

// TestRun runs the whole program, small: its output has every table and
// one checked line per run, and its database is gone at the end.
func TestRun(t *testing.T) {
	t.Parallel()
	admin := adminURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	var stdout bytes.Buffer
	stderr := &cancelOn{cancel: cancel}
	const rounds, each = 2, 50
	err := run(ctx, []string{"-admin", admin, "-rows", "200", "-n", strconv.Itoa(rounds), "-lookups", strconv.Itoa(each), "-warmup", "10"},
		func(string) string { return "" }, &stdout, stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr)
	}
	m := createdRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("stderr names no database it created:\n%s", stderr)
	}
	if databaseExists(t, admin, m[1]) {
		t.Errorf("database %s still there after run", m[1])
	}
	out := stdout.String()
	for _, s := range []string{"# A. per lookup", "# B. the spread", "# C. ratios to pq", "# D. every run"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	raw := 0
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 14 {
			t.Fatalf("raw line %q: %d fields, want 14", line, len(f))
		}
		n := make([]int64, 0, len(f))
		for _, x := range append(f[:2:2], f[3:7]...) {
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				t.Fatalf("raw line %q: %v", line, err)
			}
			n = append(n, v)
		}
		round, conc, lookups, found, notFound, timeouts := n[0], n[1], n[2], n[3], n[4], n[5]
		if lookups+timeouts != conc*each || found+notFound != lookups || round < 1 || round > rounds {
			t.Errorf("raw line %q: want %d lookups and timeouts, found + not found = lookups, round 1 to %d", line, conc*each, rounds)
		}
		raw++
	}
	if want := rounds * 2 * len(variants); raw != want {
		t.Errorf("got %d raw lines, want %d:\n%s", raw, want, out)
	}
}

// TestRunDropsDatabaseWhenInterrupted cancels run's context (as Ctrl-C
// does) once it has seeded its database: the database must still go.
func TestRunDropsDatabaseWhenInterrupted(t *testing.T) {
	t.Parallel()
	admin := adminURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	stderr := &cancelOn{cancel: cancel, marker: "seeded"}
	var stdout bytes.Buffer
	err := run(ctx, []string{"-admin", admin, "-rows", "100", "-n", "1000", "-d", "1h"}, func(string) string { return "" }, &stdout, stderr)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("run: got error %v, want context.Canceled", err)
	}
	m := createdRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("stderr names no database it created:\n%s", stderr)
	}
	if databaseExists(t, admin, m[1]) {
		t.Errorf("database %s still there after an interrupted run", m[1])
	}
	if stdout.Len() > 0 {
		t.Errorf("an interrupted run wrote output:\n%s", stdout.String())
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in              string
		name            string
		ticks, children int64
		err             bool
	}{
		{"2217 (postgres) S 1 2217 2217 0 -1 4194304 4149 34041 0 15 11 29 20 3 20 0 1 0 34", "postgres", 40, 23, false},
		{"42 (a (b) c) R 1 42 42 0 -1 0 0 0 0 0 7 8 0 0 20 0 1 0 9", "a (b) c", 15, 0, false},
		{"42 (short) R 1 42 42 0 -1 0 0 0 0 0 7 8 0", "", 0, 0, true},
		{"42 (neg) R 1 42 42 0 -1 0 0 0 0 0 -7 8 0 0 20 0 1 0 9", "", 0, 0, true},
		{"42 (neg) R 1 42 42 0 -1 0 0 0 0 0 7 8 0 x 20 0 1 0 9", "", 0, 0, true},
		{"42 no name here", "", 0, 0, true},
	} {
		name, ticks, children, err := parseStat([]byte(tc.in))
		if (err != nil) != tc.err || name != tc.name || ticks != tc.ticks || children != tc.children {
			t.Errorf("parseStat(%q): got %q, %d, %d, %v; want %q, %d, %d, error %v", tc.in, name, ticks, children, err, tc.name, tc.ticks, tc.children, tc.err)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v): got %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRoundOrder(t *testing.T) {
	vs := []variant{{name: "pq"}, {name: "pgx"}, {name: "pgxpool"}}
	for _, tc := range []struct {
		round int
		want  string
	}{{1, "pq pgx pgxpool"}, {2, "pgxpool pgx pq"}, {3, "pq pgx pgxpool"}} {
		var got []string
		for _, v := range roundOrder(vs, tc.round) {
			got = append(got, v.name)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("round %d: got %v, want %s", tc.round, got, tc.want)
		}
	}
	if vs[0].name != "pq" {
		t.Errorf("roundOrder changed its argument: %v", vs)
	}
}

func TestParseOptions(t *testing.T) {
	env := func(string) string { return "" }
	o, err := parseOptions(nil, env, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.concs) != "[1 8]" || o.variants[0].name != "pq" || o.rows != 500000 {
		t.Errorf("defaults: got concs %v, first variant %s, rows %d", o.concs, o.variants[0].name, o.rows)
	}
	_, err = parseOptions([]string{"-rows", "0", "-c", "1,x", "-v", "pq,mysql,pq", "-miss", "2"}, env, &bytes.Buffer{})
	if err == nil {
		t.Fatal("bad options: no error")
	}
	for _, want := range []string{"-rows", `"x"`, `"mysql"`, `"pq" twice`, "-miss"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("bad options: error %q does not mention %s", err, want)
		}
	}
}
