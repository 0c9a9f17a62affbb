package main

import (
	"bufio"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
)

// perLookup is a sample's figures per lookup.
type perLookup struct {
	rate          float64 // lookups a second
	wallUS        float64 // wall time of one lookup, µs: concurrency × run time / lookups
	cliUS         float64 // this process's CPU, user + system, µs
	userUS, sysUS float64
	pgUS          float64 // every postgres process's CPU, µs
	ownUS         float64 // the CPU of the backends this program uses, µs
	allocs, bytes float64 // heap allocations and their bytes
}

func (s sample) perLookup(hz int64) perLookup {
	n := float64(s.lookups)
	tick := 1e6 / float64(hz) // µs
	return perLookup{
		rate:   n / s.elapsed.Seconds(),
		wallUS: float64(s.conc) * float64(s.elapsed.Microseconds()) / n,
		cliUS:  float64((s.user + s.sys).Microseconds()) / n,
		userUS: float64(s.user.Microseconds()) / n,
		sysUS:  float64(s.sys.Microseconds()) / n,
		pgUS:   float64(s.pgTicks) * tick / n,
		ownUS:  float64(s.ownTicks) * tick / n,
		allocs: float64(s.mallocs) / n,
		bytes:  float64(s.allocBytes) / n,
	}
}

// column is one figure of the tables.
type column struct {
	name  string
	width int
	prec  int // decimals
	get   func(perLookup) float64
}

var columns = []column{
	{"lookups/s", 9, 0, func(p perLookup) float64 { return p.rate }},
	{"wall_us", 8, 1, func(p perLookup) float64 { return p.wallUS }},
	{"cli_us", 7, 2, func(p perLookup) float64 { return p.cliUS }},
	{"user_us", 7, 2, func(p perLookup) float64 { return p.userUS }},
	{"sys_us", 7, 2, func(p perLookup) float64 { return p.sysUS }},
	{"pg_us", 7, 1, func(p perLookup) float64 { return p.pgUS }},
	{"own_us", 7, 1, func(p perLookup) float64 { return p.ownUS }},
	{"allocs", 7, 1, func(p perLookup) float64 { return p.allocs }},
	{"bytes", 7, 0, func(p perLookup) float64 { return p.bytes }},
}

// median of xs (the mean of the middle two for an even count), which it
// sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// moduleVersion is the version of a module built into this program.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Version + " => " + d.Replace.Path + " " + d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

// report writes the method, the tables (medians, spread, ratios within
// rounds) and one raw line per run.
func report(out io.Writer, o options, hz int64, samples []sample) error {
	w := bufio.NewWriter(out)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	names := make([]string, len(o.variants))
	for i, v := range o.variants {
		names[i] = v.name
	}
	base := names[0]
	p("# built:     lib/pq %s, pgx %s, with %s\n", moduleVersion("github.com/lib/pq"), moduleVersion("github.com/jackc/pgx/v5"), goVersion())
	for _, v := range o.variants {
		p("#   %-9s %s\n", v.name, v.what)
	}
	p("# lookup:    as the app's Lookup makes it (store_postgres.go): `%s`, prepared; a context.WithTimeout of %s (DB_TIMEOUT's default)\n", lookupSQL, dbTimeout)
	p("#            per lookup; Scan into a string. Not the app's `bounded` goroutine, which is the same whatever the driver.\n")
	p("# pool:      %d open, %d idle, idle time %s, lifetime %s (the app's defaults, config.go); pgxpool: MaxConns %d, MinConns 0, the same times\n",
		maxOpenConns, maxIdleConns, connMaxIdleTime, connMaxLifetime, maxOpenConns)
	p("# workload:  %d seeded links; random seeded codes, each answer checked against the link's URL, and %.0f%% codes no link has, checked\n", o.rows, o.miss*100)
	p("#            not found; within a round every variant asks the same codes in the same order (seed %d)\n", o.seed)
	if o.perWorker > 0 {
		p("# runs:      rounds: %d; a run is %d lookups per worker", o.rounds, o.perWorker)
	} else {
		p("# runs:      rounds: %d; a run is %s", o.rounds, o.duration)
	}
	p(" after %d lookups per worker of warm-up; in a round, each concurrency of %v\n", o.warmup, o.concs)
	rev := slices.Clone(names)
	slices.Reverse(rev)
	p("#            in turn, the variants in the order above in odd rounds (%s), reversed in even ones (%s)\n",
		strings.Join(names, " "), strings.Join(rev, " "))
	p("# columns:   lookups/s; wall_us: wall time per lookup (concurrency × run time / lookups); cli_us: this process's CPU\n")
	p("#            (getrusage RUSAGE_SELF, user + system, so the Go runtime's garbage collection too), with user_us and sys_us;\n")
	p("#            pg_us: the CPU of every process named postgres (/proc/PID/stat utime + stime, and cutime + cstime, where the\n")
	p("#            postmaster keeps its ended backends'; ticks of 1/%d s), which includes Postgres's own background work and any\n", hz)
	p("#            other client's; own_us: that of the backends of this program's connections alone; allocs and bytes: heap\n")
	p("#            allocations (runtime.MemStats Mallocs, TotalAlloc). \"Per lookup\" is per lookup answered\n")
	var timeouts int64
	for _, s := range samples {
		timeouts += s.timeouts
	}
	p("# timeouts:  %d lookups over all runs passed their %s deadline (a 503 in the app), counted apart, in D\n", timeouts, dbTimeout)
	p("#\n")

	type key struct {
		conc    int
		variant string
	}
	figures := map[key][]perLookup{}
	byRound := map[int]map[key]perLookup{}
	for _, s := range samples {
		k := key{s.conc, s.variant}
		figures[k] = append(figures[k], s.perLookup(hz))
		if byRound[s.round] == nil {
			byRound[s.round] = map[key]perLookup{}
		}
		byRound[s.round][k] = s.perLookup(hz)
	}
	headerRow := func() {
		p("# %4s %-8s", "conc", "variant")
		for _, c := range columns {
			p(" %*s", max(c.width, len(c.name)), c.name)
		}
		p("\n")
	}

	p("# A. per lookup: medians over the rounds (%d)\n", o.rounds)
	headerRow()
	for _, conc := range o.concs {
		for _, n := range names {
			p("# %4d %-8s", conc, n)
			for _, c := range columns {
				xs := make([]float64, 0, o.rounds)
				for _, f := range figures[key{conc, n}] {
					xs = append(xs, c.get(f))
				}
				p(" %*.*f", max(c.width, len(c.name)), c.prec, median(xs))
			}
			p("\n")
		}
	}
	p("#\n")

	p("# B. the spread: lowest-highest over the rounds\n")
	p("# %4s %-8s", "conc", "variant")
	for _, c := range columns {
		p(" %*s", 2*c.width+1, c.name)
	}
	p("\n")
	for _, conc := range o.concs {
		for _, n := range names {
			p("# %4d %-8s", conc, n)
			for _, c := range columns {
				xs := make([]float64, 0, o.rounds)
				for _, f := range figures[key{conc, n}] {
					xs = append(xs, c.get(f))
				}
				p(" %*s", 2*c.width+1, fmt.Sprintf("%.*f-%.*f", c.prec, slices.Min(xs), c.prec, slices.Max(xs)))
			}
			p("\n")
		}
	}
	p("#\n")

	if len(names) > 1 {
		p("# C. ratios to %s, taken within each round: median (lowest-highest)\n", base)
		p("# %4s %-8s", "conc", "variant")
		for _, c := range columns {
			if c.name == "user_us" || c.name == "sys_us" {
				continue
			}
			p(" %19s", c.name)
		}
		p("\n")
		for _, conc := range o.concs {
			for _, n := range names[1:] {
				p("# %4d %-8s", conc, n)
				for _, c := range columns {
					if c.name == "user_us" || c.name == "sys_us" {
						continue
					}
					var xs []float64
					for r := 1; r <= o.rounds; r++ {
						b, v := c.get(byRound[r][key{conc, base}]), c.get(byRound[r][key{conc, n}])
						if b > 0 {
							xs = append(xs, v/b)
						}
					}
					if len(xs) == 0 {
						p(" %19s", "-")
						continue
					}
					lo, hi := slices.Min(xs), slices.Max(xs)
					p(" %19s", fmt.Sprintf("%.3f (%.3f-%.3f)", median(xs), lo, hi))
				}
				p("\n")
			}
		}
		p("#\n")
	}

	p("# D. every run as measured: round conc variant lookups found not_found timeouts seconds user_s sys_s pg_ticks own_ticks mallocs bytes\n")
	for _, s := range samples {
		p("%d %d %s %d %d %d %d %.6f %.6f %.6f %d %d %d %d\n", s.round, s.conc, s.variant, s.lookups, s.found, s.notFound, s.timeouts,
			s.elapsed.Seconds(), s.user.Seconds(), s.sys.Seconds(), s.pgTicks, s.ownTicks, s.mallocs, s.allocBytes)
	}
	return w.Flush()
}

func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "go (version unknown)"
}
