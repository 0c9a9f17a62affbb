// Command drivers measures what the choice of Postgres driver costs the
// shortener per lookup that reaches the database: lib/pq, which the app
// uses through database/sql, against pgx's database/sql driver
// (pgx/v5/stdlib), with pgx's own pool (pgxpool) beside them for the
// reader's information. In a database of its own, seeded by sql/seed.sql,
// it runs the app's lookup (the same prepared query, the same pool sizes,
// the same per-lookup deadline) for random seeded codes and a share of
// unknown ones, through each driver in turn, in interleaved rounds at
// concurrency 1 and 8, and reports per lookup the CPU of this process and
// of Postgres, the heap allocations, and the wall time. Every answer is
// checked: a wrong one stops the run with an error, never a number.
//
// It is a module of its own, so that pgx never enters the app's go.mod.
// benchmarks/drivers.sh runs it and writes benchmarks/14-drivers.txt:
//
//	cd benchmarks/drivers && go run . -rows 10000 -n 1 -d 1s
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "drivers: %v\n", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	admin      string
	rows       int
	rounds     int
	duration   time.Duration
	perWorker  int64
	warmup     int64
	concs      []int
	variants   []variant
	miss       float64
	seed       uint64
	schemaPath string
	seedPath   string
	procDir    string
}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("drivers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	admin := getenv("ADMIN_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	fs.StringVar(&o.admin, "admin", admin, "a URL of a Postgres database from which to create and drop the benchmark's (default $ADMIN_DATABASE_URL, or the local Postgres)")
	fs.IntVar(&o.rows, "rows", 500000, "links to seed (sql/seed.sql)")
	fs.IntVar(&o.rounds, "n", 5, "rounds: each runs every variant at every concurrency once")
	fs.DurationVar(&o.duration, "d", 3*time.Second, "length of each measured run")
	fs.Int64Var(&o.perWorker, "lookups", 0, "if not 0, each measured run is this many lookups per worker instead of -d long")
	fs.Int64Var(&o.warmup, "warmup", 500, "lookups per worker before each measured run, not measured")
	concs := fs.String("c", "1,8", "concurrencies, comma-separated")
	names := fs.String("v", "pq,pgx,pgxpool,pq-bare", "variants in a round's order, comma-separated; the first is the one ratios divide by")
	fs.Float64Var(&o.miss, "miss", 0.1, "share of lookups for a code no link has")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the codes asked")
	fs.StringVar(&o.schemaPath, "schema", "../../sql/schema.sql", "the app's schema")
	fs.StringVar(&o.seedPath, "seedsql", "../../sql/seed.sql", "the app's seed script")
	fs.StringVar(&o.procDir, "proc", "/proc", "where the processes' CPU times are read")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var bad []string
	if o.rows < 1 {
		bad = append(bad, "-rows must be 1 or more")
	}
	if o.rounds < 1 {
		bad = append(bad, "-n must be 1 or more")
	}
	if o.perWorker < 0 || o.warmup < 0 {
		bad = append(bad, "-lookups and -warmup must not be negative")
	}
	if o.perWorker == 0 && o.duration <= 0 {
		bad = append(bad, "-d must be positive (or -lookups set)")
	}
	if !(o.miss >= 0 && o.miss <= 1) {
		bad = append(bad, "-miss must be between 0 and 1")
	}
	for _, f := range strings.Split(*concs, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 || c > 1024 {
			bad = append(bad, fmt.Sprintf("-c: %q is not a concurrency from 1 to 1024", f))
			continue
		}
		o.concs = append(o.concs, c)
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(*names, ",") {
		v, ok := variantNamed(strings.TrimSpace(f))
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("-v: no variant %q", f))
		case seen[v.name]:
			bad = append(bad, fmt.Sprintf("-v: %q twice", f))
		default:
			seen[v.name] = true
			o.variants = append(o.variants, v)
		}
	}
	if len(bad) > 0 {
		return options{}, errors.New(strings.Join(bad, "; "))
	}
	if o.perWorker > 0 {
		o.duration = 0 // a run is counted, not timed
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	o, err := parseOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	hz, err := clockTicks(ctx)
	if err != nil {
		return err
	}
	name, dsn, err := createDatabase(ctx, o.admin)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "drivers: created database %s\n", name)
	defer func() {
		if dropErr := dropDatabase(o.admin, name); dropErr != nil {
			err = errors.Join(err, dropErr)
			return
		}
		fmt.Fprintf(stderr, "drivers: dropped database %s\n", name)
	}()
	if err := seedDatabase(ctx, dsn, o.schemaPath, o.seedPath, o.rows); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "drivers: seeded %d links\n", o.rows)

	own, err := sql.Open("postgres", dsn)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer own.Close()
	// One connection, always the same: the meter's list of backends leaves
	// out the one asking, so it must be the same one every time.
	own.SetMaxOpenConns(1)
	own.SetMaxIdleConns(1)
	m := &meter{procDir: o.procDir, own: own, hz: hz}

	lookupers := make(map[string]lookuper, len(o.variants))
	defer func() {
		for _, l := range lookupers {
			err = errors.Join(err, l.Close())
		}
	}()
	for _, v := range o.variants {
		l, err := v.open(ctx, dsn)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		lookupers[v.name] = l
	}

	w := newWorkload(o.rows, o.miss, dbTimeout)
	var samples []sample
	for round := 1; round <= o.rounds; round++ {
		order := roundOrder(o.variants, round)
		for _, conc := range o.concs {
			for _, v := range order {
				l := lookupers[v.name]
				// Warm: every connection the run will use open, the
				// statement prepared on it, the index in Postgres's cache.
				seed := o.seed<<20 + uint64(round)
				if o.warmup > 0 {
					if _, _, err := drive(ctx, l, w, runSpec{conc: conc, perWorker: o.warmup, seed: ^seed}, nil); err != nil {
						return fmt.Errorf("round %d, concurrency %d, %s: warm-up: %w", round, conc, v.name, err)
					}
				}
				s, err := m.measure(ctx, l, w, runSpec{conc: conc, duration: o.duration, perWorker: o.perWorker, seed: seed})
				if err != nil {
					return fmt.Errorf("round %d, concurrency %d, %s: %w", round, conc, v.name, err)
				}
				s.round, s.variant = round, v.name
				samples = append(samples, s)
				p := s.perLookup(hz)
				fmt.Fprintf(stderr, "drivers: round %d/%d, concurrency %d, %-8s %8.0f lookups/s, client %6.1f µs, postgres %6.1f µs, %5.1f allocs per lookup, %d timeouts\n",
					round, o.rounds, conc, v.name, p.rate, p.cliUS, p.pgUS, p.allocs, s.timeouts)
			}
		}
	}
	return report(stdout, o, hz, samples)
}

// roundOrder is the order of the variants in a round: as given in odd
// rounds, reversed in even ones (pq, pgx, ..., pgx, pq), so that a drift
// of the machine over a round falls on both sides alike.
func roundOrder(vs []variant, round int) []variant {
	order := slices.Clone(vs)
	if round%2 == 0 {
		slices.Reverse(order)
	}
	return order
}
