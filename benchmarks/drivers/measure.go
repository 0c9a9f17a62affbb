package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// runSpec says how one run drives a lookuper.
type runSpec struct {
	conc int // workers, each with one lookup in flight
	// A run stops after duration, or when each worker has done perWorker
	// lookups; 0 is no limit, and one of the two must be set.
	duration  time.Duration
	perWorker int64
	// seed picks the codes: the same seed asks the same codes in the same
	// order, so every variant of a round gets the same lookups.
	seed uint64
}

// counts are the lookups a run made: lookups answered, every answer
// checked, found or not; and timeouts, lookups that passed their deadline
// (the app would answer 503), which are not in lookups.
type counts struct {
	lookups, found, notFound, timeouts int64
}

func (c *counts) add(d counts) {
	c.lookups += d.lookups
	c.found += d.found
	c.notFound += d.notFound
	c.timeouts += d.timeouts
}

// drive runs lookups through l as spec says and checks each answer: a
// seeded code must give its link's URL, an unknown one no link. The first
// wrong answer or error stops every worker and is returned; a lookup that
// passed its own deadline is counted, not an error: on a busy machine one
// may, and the output says how many did. start, if not
// nil, is called when the workers are ready, just before they begin.
func drive(ctx context.Context, l lookuper, w *workload, spec runSpec, start func()) (counts, time.Duration, error) {
	if spec.conc < 1 || (spec.duration <= 0 && spec.perWorker <= 0) {
		return counts{}, 0, fmt.Errorf("drive: bad run %+v", spec)
	}
	var stop atomic.Bool
	begin := make(chan struct{})
	got := make([]counts, spec.conc)
	errs := make([]error, spec.conc)
	var wg sync.WaitGroup
	for i := range spec.conc {
		wg.Go(func() {
			<-begin
			rng := rand.New(rand.NewPCG(spec.seed, uint64(i)))
			got[i], errs[i] = work(ctx, l, w, rng, &stop, spec.perWorker)
			if errs[i] != nil {
				stop.Store(true)
			}
		})
	}
	if start != nil {
		start()
	}
	t0 := time.Now()
	close(begin)
	if spec.duration > 0 {
		timer := time.AfterFunc(spec.duration, func() { stop.Store(true) })
		defer timer.Stop()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	var total counts
	for _, c := range got {
		total.add(c)
	}
	return total, elapsed, errors.Join(errs...)
}

// work is one worker's loop. Apart from the lookup itself it allocates
// nothing: the code is a substring of the workload's, the expected URL is
// built in buf, and comparing it with a string(buf) does not copy it.
func work(ctx context.Context, l lookuper, w *workload, rng *rand.Rand, stop *atomic.Bool, limit int64) (counts, error) {
	var c counts
	buf := make([]byte, 0, len(seedURLPrefix)+20)
	for (limit <= 0 || c.lookups+c.timeouts < limit) && !stop.Load() {
		n := 0 // the seeded link asked for, or 0 for an unknown code
		var code string
		if w.miss > 0 && rng.Float64() < w.miss {
			code = w.unknownCode(rng.IntN(len(w.unknown) / codeLength))
		} else {
			n = 1 + rng.IntN(w.rows)
			code = w.code(n)
		}
		lctx, cancel := context.WithTimeout(ctx, w.timeout)
		url, found, err := l.lookup(lctx, code)
		timedOut := errors.Is(lctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err != nil && timedOut {
			c.timeouts++
			continue
		}
		if err != nil {
			return c, fmt.Errorf("lookup %s: %w", code, err)
		}
		switch {
		case n == 0 && found:
			return c, fmt.Errorf("lookup %s, a code no link has: got %q, want not found", code, url)
		case n > 0 && !found:
			return c, fmt.Errorf("lookup %s, link %d's code: not found, want %s%d", code, n, seedURLPrefix, n)
		case n > 0:
			buf = strconv.AppendInt(append(buf[:0], seedURLPrefix...), int64(n), 10)
			if url != string(buf) {
				return c, fmt.Errorf("lookup %s, link %d's code: got %q, want %q", code, n, url, buf)
			}
			c.found++
		default:
			c.notFound++
		}
		c.lookups++
	}
	return c, nil
}

// sample is one measured run: what it did and what it cost.
type sample struct {
	round   int
	conc    int
	variant string
	counts
	elapsed    time.Duration
	user, sys  time.Duration // this process's CPU (getrusage)
	pgTicks    int64         // CPU of every process named postgres, in clock ticks
	ownTicks   int64         // of the backends this program's connections use
	mallocs    uint64        // heap allocations (runtime.MemStats.Mallocs)
	allocBytes uint64        // and their bytes (TotalAlloc)
}

// meter reads the CPU and memory a run uses. hz is the kernel's clock
// ticks a second (getconf CLK_TCK), the unit of /proc/PID/stat's times.
type meter struct {
	procDir string  // /proc
	own     *sql.DB // one connection to the benchmark's database, to list its backends
	hz      int64
}

// measure makes one measured run of spec through l and reads what it cost.
func (m *meter) measure(ctx context.Context, l lookuper, w *workload, spec runSpec) (sample, error) {
	backends, err := m.backends(ctx)
	if err != nil {
		return sample{}, err
	}
	var own0 map[int]int64
	var pg0 int64
	var ms0, ms1 runtime.MemStats
	var ru0, ru1 syscall.Rusage
	var readErr error
	c, elapsed, err := drive(ctx, l, w, spec, func() {
		// The collection a run starts with is not the run's.
		runtime.GC()
		// The backends' window lies inside the one of all of Postgres,
		// so that theirs cannot come out the larger.
		if pg0, readErr = m.postgresTicks(); readErr != nil {
			return
		}
		if own0, readErr = m.ticksOf(backends); readErr != nil {
			return
		}
		if len(own0) == 0 {
			readErr = fmt.Errorf("none of the backends %v is in %s (is Postgres on this machine, outside a container?)", backends, m.procDir)
			return
		}
		runtime.ReadMemStats(&ms0)
		readErr = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	})
	ruErr := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	runtime.ReadMemStats(&ms1)
	own1, ownErr := m.ticksOf(backends)
	pg1, pgErr := m.postgresTicks()
	if err != nil {
		return sample{}, err // a wrong answer, or an interrupt
	}
	if err := errors.Join(readErr, ruErr, ownErr, pgErr); err != nil {
		return sample{}, fmt.Errorf("measure: %w", err)
	}
	if c.lookups == 0 {
		return sample{}, errors.New("measure: no lookups in the run")
	}
	s := sample{
		conc:       spec.conc,
		counts:     c,
		elapsed:    elapsed,
		user:       tvDuration(ru1.Utime) - tvDuration(ru0.Utime),
		sys:        tvDuration(ru1.Stime) - tvDuration(ru0.Stime),
		pgTicks:    pg1 - pg0,
		mallocs:    ms1.Mallocs - ms0.Mallocs,
		allocBytes: ms1.TotalAlloc - ms0.TotalAlloc,
	}
	for pid, t := range own1 {
		if t0, ok := own0[pid]; ok {
			s.ownTicks += t - t0
		}
	}
	// A connection opened during the run has a backend the list taken
	// before it lacks; its CPU is the run's too (opening a connection is
	// part of what a pool costs). A backend that ended during the run (one
	// still ending when listed: psql's, after the seeding) is left out;
	// the pools' own live for minutes.
	after, err := m.backends(ctx)
	if err != nil {
		return sample{}, err
	}
	var fresh []int
	for _, pid := range after {
		if _, ok := own0[pid]; !ok {
			fresh = append(fresh, pid)
		}
	}
	if len(fresh) > 0 {
		t, err := m.ticksOf(fresh)
		if err != nil {
			return sample{}, fmt.Errorf("measure: %w", err)
		}
		for _, v := range t {
			s.ownTicks += v
		}
	}
	return s, nil
}

func tvDuration(tv syscall.Timeval) time.Duration {
	return time.Duration(tv.Sec)*time.Second + time.Duration(tv.Usec)*time.Microsecond
}

// backends lists the processes serving the connections to the benchmark's
// database, but the meter's own.
func (m *meter) backends(ctx context.Context) ([]int, error) {
	rows, err := m.own.QueryContext(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, fmt.Errorf("list backends: %w", err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return pids, nil
}

// ticksOf reads the CPU of each of pids that is still there (a backend
// listed may have ended since). Each must be a process named postgres:
// Postgres on another machine or in another PID namespace (a container)
// cannot be measured from here.
func (m *meter) ticksOf(pids []int) (map[int]int64, error) {
	t := make(map[int]int64, len(pids))
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join(m.procDir, strconv.Itoa(pid), "stat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // it ended
		}
		if err != nil {
			return nil, fmt.Errorf("backend %d is not in %s (is Postgres on this machine, outside a container?): %w", pid, m.procDir, err)
		}
		name, ticks, _, err := parseStat(b)
		if err != nil {
			return nil, fmt.Errorf("%s/%d/stat: %w", m.procDir, pid, err)
		}
		if name != "postgres" {
			return nil, fmt.Errorf("backend %d is %q here, not postgres (is Postgres on this machine, outside a container?)", pid, name)
		}
		t[pid] = ticks
	}
	return t, nil
}

// postgresTicks sums the CPU of every process named postgres: the
// backends, and the server's own processes (WAL writer, checkpointer,
// autovacuum), which work for every client the machine has. A backend
// that ends takes its CPU out of the sum, and the postmaster, reaping it,
// adds it to its children's (cutime, cstime), so those are summed too:
// otherwise any client disconnecting during a run would make the run's
// Postgres CPU come out short, even below zero.
func (m *meter) postgresTicks() (int64, error) {
	entries, err := os.ReadDir(m.procDir)
	if err != nil {
		return 0, fmt.Errorf("postgres CPU: %w", err)
	}
	var sum int64
	seen := false
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue // not a process
		}
		b, err := os.ReadFile(filepath.Join(m.procDir, e.Name(), "stat"))
		if err != nil {
			continue // it ended since the listing
		}
		name, ticks, children, err := parseStat(b)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/stat: %w", m.procDir, e.Name(), err)
		}
		if name == "postgres" {
			sum += ticks + children
			seen = true
		}
	}
	if !seen {
		return 0, fmt.Errorf("postgres CPU: no process named postgres in %s", m.procDir)
	}
	return sum, nil
}

// parseStat reads from a process's /proc/PID/stat its name, its user
// plus system CPU and that of its ended children it waited for, in clock
// ticks: "PID (NAME) STATE ...", with utime, stime, cutime and cstime the
// 14th to 17th fields. The name may hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStat(b []byte) (name string, ticks, children int64, err error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, 0, errors.New("no (name)")
	}
	name = string(b[open+1 : end])
	fields := strings.Fields(string(b[end+1:]))
	// fields[0] is the 3rd field (state), so utime is fields[11].
	if len(fields) < 15 {
		return "", 0, 0, fmt.Errorf("%d fields after the name, want 15 or more", len(fields))
	}
	var v [4]int64
	for i, f := range fields[11:15] {
		if v[i], err = strconv.ParseInt(f, 10, 64); err != nil || v[i] < 0 {
			return "", 0, 0, fmt.Errorf("cpu time %q is not a count of ticks", f)
		}
	}
	return name, v[0] + v[1], v[2] + v[3], nil
}

// clockTicks is the kernel's USER_HZ, which Go's standard library does not
// expose.
func clockTicks(ctx context.Context) (int64, error) {
	out, err := exec.CommandContext(ctx, "getconf", "CLK_TCK").Output()
	if err != nil {
		return 0, fmt.Errorf("getconf CLK_TCK: %w", err)
	}
	hz, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || hz <= 0 {
		return 0, fmt.Errorf("getconf CLK_TCK: got %q", out)
	}
	return hz, nil
}
