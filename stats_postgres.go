package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// addHoursSQL adds a batch's clicks per link and hour: one row
	// written per link and hour, whatever the number of clicks.
	addHoursSQL = `INSERT INTO click_hours (code, hour, people, bots)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::integer[], $4::integer[])
ON CONFLICT (code, hour) DO UPDATE SET people = click_hours.people + EXCLUDED.people, bots = click_hours.bots + EXCLUDED.bots`
	// A day's row holds a sketch and two small maps, which SQL cannot
	// add up: a row that is missing is made whole; one that is there is
	// locked, read, merged here and written back, all in the chunk's
	// transaction, so that two instances writing the same link's day
	// take turns.
	newDaysSQL = `INSERT INTO click_days (code, day, people, bots, uniques, referrers, agents)
SELECT * FROM unnest($1::text[], $2::date[], $3::bigint[], $4::bigint[], $5::bytea[], $6::jsonb[], $7::jsonb[])
ON CONFLICT (code, day) DO NOTHING RETURNING code, day::text`
	lockDaysSQL = `SELECT code, day::text, people, bots, uniques, referrers, agents FROM click_days
WHERE (code, day) IN (SELECT * FROM unnest($1::text[], $2::date[]))
ORDER BY code COLLATE "C", day FOR UPDATE`
	setDaysSQL = `UPDATE click_days d SET people = u.people, bots = u.bots, uniques = u.uniques,
  referrers = u.referrers, agents = u.agents
FROM unnest($1::text[], $2::date[], $3::bigint[], $4::bigint[], $5::bytea[], $6::jsonb[], $7::jsonb[])
  AS u(code, day, people, bots, uniques, referrers, agents)
WHERE d.code = u.code AND d.day = u.day`

	hoursSQL = `SELECT hour, people, bots FROM click_hours
WHERE code = $1 AND hour >= $2 AND hour < $3 ORDER BY hour`
	daysSQL = `SELECT day::text, people, bots, uniques, referrers, agents FROM click_days
WHERE code = $1 AND day >= $2::date AND day < $3::date ORDER BY day`

	// The day's key is made by whichever instance needs it first; the
	// others read it.
	newKeySQL = `INSERT INTO stats_keys (day, key) VALUES ($1::date, $2) ON CONFLICT (day) DO NOTHING`
	keySQL    = `SELECT key FROM stats_keys WHERE day = $1::date`
	// A day's key is deleted once the next day is over: a click still
	// queued at midnight is hashed with its own day's key, and after
	// that nothing can link a visitor's days.
	oldKeysSQL = `DELETE FROM stats_keys WHERE day < $1::date`

	// statsLock serializes the partitions' DDL across instances
	// (pg_advisory_xact_lock): two CREATE TABLE IF NOT EXISTS at once can
	// still collide.
	statsLock = 7306298432
)

// statsStore writes each batch's totals, sums its clicks into the pending
// rollup, flushes that every STATS_FLUSH, and reads the rollups back for
// GET /api/links/{code}/stats. Its tables (sql/schema.sql) are
// partitioned by month; maintain makes the months to come and drops the
// ones past their retention.
type statsStore struct {
	db       *sql.DB
	rows     bool          // CLICK_STORAGE=rows: a row per click, not counts
	top      int           // STATS_TOP: referrer hosts kept per link and day
	keep     statsKeep     // how long each table is kept
	timeout  time.Duration // DB_TIMEOUT, for the reads a request waits on
	now      func() time.Time
	log      *slog.Logger
	warnings *sampledLog

	// statsLost counts clicks whose totals were written and whose stats
	// were not: shortener_stats_lost_total.
	statsLost atomic.Int64

	// The stats summed since the last flush, and the flush loop's
	// signals (runFlush, Close).
	pmu        sync.Mutex
	pending    *rollup
	names      *nameCache // used under pmu
	maxPending int        // maxPendingRows; a test's own
	fmu        sync.Mutex // held by a flush
	flushNow   chan struct{}
	stopFlush  chan context.Context // Close sends the deadline of the last flush
	flushed    chan error           // the last flush's error, then closed

	mu     sync.Mutex
	keys   map[string][]byte // day (2006-01-02) → its visitor key
	months map[string]bool   // months (2006_01) whose partitions are there (see ensureMonth)
}

// statsKeep is STATS_HOURS_KEEP and STATS_DAYS_KEEP: how many whole months
// of each table are kept before the current one.
type statsKeep struct{ hours, days int }

func newStatsStore(db *sql.DB, cfg config, log *slog.Logger) *statsStore {
	return &statsStore{
		db: db, rows: cfg.clicks.storage == "rows", top: cfg.stats.top, keep: cfg.stats.keep,
		timeout: cfg.pool.timeout, now: cfg.clock(), log: log,
		warnings: &sampledLog{log: log, every: 10 * time.Second},
		keys:     make(map[string][]byte), months: make(map[string]bool),
		pending: newRollup(), names: newNameCache(), maxPending: maxPendingRows, flushNow: make(chan struct{}, 1), stopFlush: make(chan context.Context, 1), flushed: make(chan error, 1),
	}
}

// write writes a batch of clicks: their links' totals at once, as before
// the stats, and their stats into the pending rollup, which flush writes
// every STATS_FLUSH. So a batch costs the queue what it did (one
// statement), and the stats cost one write per link-hour and link-day
// per STATS_FLUSH, however many batches and clicks they sum: under load,
// far fewer rows than a write per batch (docs/17). The totals do not wait
// on the stats, nor depend on them: a batch whose stats cannot be summed
// (a day's key that cannot be read) is counted in statsLost, its totals
// written.
func (s *statsStore) write(ctx context.Context, clicks []click) error {
	if err := s.writeCounts(ctx, clicks); err != nil {
		return err
	}
	// The keys of the batch's days (one, but at midnight), read before
	// anything is summed: a key that cannot be read loses the batch's
	// stats, not half of them.
	now := s.now().UTC()
	yesterday := dayOf(now).AddDate(0, 0, -1)
	hashers := make(map[time.Time]*visitorHasher, 1)
	for _, c := range clicks {
		day := dayOf(c.at)
		if _, ok := hashers[day]; ok {
			continue
		}
		// A click's time is the instance's clock when it was served; a
		// day before yesterday's has no key any more (maintain deleted
		// it), and a new one would count its visitors twice: such a
		// click is counted, but not among the uniques.
		if day.Before(yesterday) {
			hashers[day] = nil
			continue
		}
		k, err := s.key(ctx, day)
		if err != nil {
			s.lose(ctx, int64(len(clicks)), err)
			return nil
		}
		hashers[day] = newVisitorHasher(k)
	}
	s.pmu.Lock()
	full := s.pending.rows() >= 4*s.maxPending
	if !full {
		s.pending.add(clicks, hashers, s.names)
	}
	due := s.pending.rows() >= s.maxPending
	s.pmu.Unlock()
	if full {
		// The flush cannot keep up: memory is bounded, the stats are not.
		s.lose(ctx, int64(len(clicks)), fmt.Errorf("%d rows pending, the most kept", 4*s.maxPending))
		return nil
	}
	if due {
		select {
		case s.flushNow <- struct{}{}:
		default: // one is asked for already
		}
	}
	return nil
}

// maxPendingRows is the rows (link-hours and link-days) the pending
// rollup holds before a flush is asked for at once, without waiting for
// STATS_FLUSH; at four times this, new stats are counted lost instead of
// held. A row held is a few hundred bytes (a sketch while small, a few
// referrers): some tens of megabytes at most.
const maxPendingRows = 100_000

// lose counts n clicks whose stats will not be written.
func (s *statsStore) lose(ctx context.Context, n int64, err error) {
	s.statsLost.Add(n)
	s.warnings.warn(ctx, "stats not written; the clicks' totals were", err)
}

// flush writes the pending rollup, statsChunk links at a time, each
// chunk's hours and days in one transaction: all of a link's rows, or
// none (then counted in statsLost).
func (s *statsStore) flush(ctx context.Context) error {
	s.fmu.Lock() // one flush at a time: the loop's, or a test's
	defer s.fmu.Unlock()
	s.pmu.Lock()
	r := s.pending
	s.pending = newRollup()
	s.pmu.Unlock()
	if r.rows() == 0 {
		return nil
	}
	lost, err := s.writeRollup(ctx, r)
	if err != nil {
		s.lose(ctx, lost, err)
		// A partition dropped by hand is made again at the next flush.
		s.mu.Lock()
		clear(s.months)
		s.mu.Unlock()
	}
	return err
}

// statsChunk is how many links' rows a flush writes per transaction:
// enough to make each statement worth its round trip, few enough that a
// transaction's WAL, which each commit on the server waits to reach the
// disk behind, stays small. (With one transaction per flush, the click
// queue, whose commits are small, still dropped clicks under load:
// docs/17.)
const statsChunk = 1000

// writeRollup writes r; on an error, it returns the clicks of the links
// not written.
func (s *statsStore) writeRollup(ctx context.Context, r *rollup) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, statsWriteTimeout)
	defer cancel()
	if err := s.ensureMonths(ctx, r, s.now().UTC()); err != nil {
		return r.clicks, err
	}
	type linkRows struct {
		hours  map[hourKey]*hourSums
		days   map[dayKey]*daySums
		clicks int64
	}
	links := make(map[string]*linkRows)
	of := func(code string) *linkRows {
		l := links[code]
		if l == nil {
			l = &linkRows{hours: make(map[hourKey]*hourSums, 1), days: make(map[dayKey]*daySums, 1)}
			links[code] = l
		}
		return l
	}
	for k, h := range r.hours {
		l := of(k.code)
		l.hours[k] = h
		l.clicks += h.people + h.bots
	}
	for k, d := range r.days {
		of(k.code).days[k] = d
	}
	codes := slices.Sorted(maps.Keys(links))
	for start := 0; start < len(codes); start += statsChunk {
		chunk := codes[start:min(start+statsChunk, len(codes))]
		hours := make(map[hourKey]*hourSums, len(chunk))
		days := make(map[dayKey]*daySums, len(chunk))
		for _, c := range chunk {
			maps.Copy(hours, links[c].hours)
			maps.Copy(days, links[c].days)
		}
		if err := s.writeChunk(ctx, hours, days); err != nil {
			var lost int64
			for _, c := range codes[start:] {
				lost += links[c].clicks
			}
			return lost, err
		}
	}
	return 0, nil
}

func (s *statsStore) writeChunk(ctx context.Context, hours map[hourKey]*hourSums, days map[dayKey]*daySums) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("stats: begin: %w", deadline(ctx, err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if err := writeHours(ctx, tx, hours); err != nil {
		return err
	}
	if err := s.writeDays(ctx, tx, days); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("stats: commit %d rows: %w", len(hours)+len(days), deadline(ctx, err))
	}
	return nil
}

// statsWriteTimeout bounds one flush: as long as a batch of clicks gets,
// and more, since a flush can hold tens of thousands of rows.
const statsWriteTimeout = 4 * clickWriteTimeout

// runFlush flushes every interval, and when write asks, until Close; then
// once more, for what the drained queue added.
func (s *statsStore) runFlush(every time.Duration) {
	defer close(s.flushed)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case ctx := <-s.stopFlush:
			s.flushed <- s.flush(ctx)
			return
		case <-tick.C:
		case <-s.flushNow:
		}
		// Errors are counted and logged by flush.
		s.flush(context.Background()) //nolint:errcheck // see above
	}
}

// Close writes what is pending, after the click queue has drained into
// it, and stops the flushes; it waits up to ctx's deadline. Call it once,
// and only if runFlush runs.
func (s *statsStore) Close(ctx context.Context) error {
	s.stopFlush <- ctx
	select {
	case err := <-s.flushed:
		return err
	case <-ctx.Done():
		return fmt.Errorf("stats: last flush: %w", ctx.Err())
	}
}

// writeCounts adds the clicks not counted yet (a max_clicks link's are
// counted on the request) to click_counts, or as rows, as pgStore's
// AddClicks and AddClickRows do. The hours and days below are written
// sorted too, for the same reason: no deadlock between instances.
func (s *statsStore) writeCounts(ctx context.Context, clicks []click) error {
	var codes []string
	for _, c := range clicks {
		if !c.counted {
			codes = append(codes, c.code)
		}
	}
	if len(codes) == 0 {
		return nil
	}
	add := addClicks
	if s.rows {
		add = addClickRows
	}
	if err := add(ctx, s.db, codes); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}

func writeHours(ctx context.Context, tx *sql.Tx, hours map[hourKey]*hourSums) error {
	keys := slices.SortedFunc(maps.Keys(hours), func(a, b hourKey) int {
		if c := strings.Compare(a.code, b.code); c != 0 {
			return c
		}
		return a.hour.Compare(b.hour)
	})
	codes := make([]string, len(keys))
	at := make([]string, len(keys))
	people := make([]int64, len(keys))
	bots := make([]int64, len(keys))
	for i, k := range keys {
		codes[i], at[i] = k.code, k.hour.Format(time.RFC3339)
		people[i], bots[i] = hours[k].people, hours[k].bots
	}
	if _, err := tx.ExecContext(ctx, addHoursSQL, pq.Array(codes), pq.Array(at), pq.Array(people), pq.Array(bots)); err != nil {
		return fmt.Errorf("stats: add %d link-hours: %w", len(keys), deadline(ctx, err))
	}
	return nil
}

// collectors export the clicks whose stats were not written, though
// their totals were (statsStore.write).
func (s *statsStore) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "stats_lost_total",
			Help: "Clicks whose totals were written and whose stats (hours, days, uniques) were not."},
			func() float64 { return float64(s.statsLost.Load()) }),
	}
}
