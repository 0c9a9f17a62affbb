package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"
)

// ensureMonths makes the partitions of every month a batch's hours fall in.
func (s *statsStore) ensureMonths(ctx context.Context, r *rollup, now time.Time) error {
	for hk := range r.hours {
		if err := s.ensureMonth(ctx, hk.hour, now); err != nil {
			return err
		}
	}
	return nil
}

// monthStart is the first instant of t's month, in UTC.
func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// partitionSuffix names a month's partitions: click_hours_2026_12.
func partitionSuffix(month time.Time) string { return month.Format("2006_01") }

// ensureMonth makes the partitions of t's month. It remembers the months
// it made from last month on, which no instance drops (STATS_*_KEEP is at
// least 1); an older month, which another instance may have dropped since,
// is made again each time it is asked for: rare, a click queued across
// the turn of a month.
func (s *statsStore) ensureMonth(ctx context.Context, t, now time.Time) error {
	month := monthStart(t)
	name := partitionSuffix(month)
	recent := !month.Before(monthStart(now).AddDate(0, -1, 0))
	s.mu.Lock()
	done := recent && s.months[name]
	s.mu.Unlock()
	if done {
		return nil
	}
	next := month.AddDate(0, 1, 0)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("stats: partitions of %s: %w", name, deadline(ctx, err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, statsLock); err != nil {
		return fmt.Errorf("stats: partitions of %s: lock: %w", name, deadline(ctx, err))
	}
	// DDL takes no parameters; the names and bounds are made here from a
	// time, never from input.
	ddl := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS click_hours_%[1]s PARTITION OF click_hours
  FOR VALUES FROM ('%[2]s') TO ('%[3]s');
CREATE TABLE IF NOT EXISTS click_days_%[1]s PARTITION OF click_days
  FOR VALUES FROM ('%[4]s') TO ('%[5]s')`, name,
		month.Format(time.RFC3339), next.Format(time.RFC3339), month.Format(time.DateOnly), next.Format(time.DateOnly))
	if _, err := tx.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("stats: partitions of %s: %w", name, deadline(ctx, err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("stats: partitions of %s: commit: %w", name, deadline(ctx, err))
	}
	if recent {
		s.mu.Lock()
		s.months[name] = true
		s.mu.Unlock()
	}
	return nil
}

// maintain makes this month's and next month's partitions, drops those
// past their retention and the visitor keys past their day. run calls it
// at start and every statsMaintainEvery.
func (s *statsStore) maintain(ctx context.Context) error {
	now := s.now().UTC()
	for _, m := range []time.Time{now, monthStart(now).AddDate(0, 1, 0)} {
		if err := s.ensureMonth(ctx, m, now); err != nil {
			return err
		}
	}
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	if _, err := s.db.ExecContext(ctx, oldKeysSQL, today.AddDate(0, 0, -1).Format(time.DateOnly)); err != nil {
		return fmt.Errorf("stats: delete old keys: %w", deadline(ctx, err))
	}
	for _, t := range []struct {
		table string
		keep  int
	}{{"click_hours", s.keep.hours}, {"click_days", s.keep.days}} {
		// A month is dropped once all of it is older than keep whole
		// months before this one.
		oldest := monthStart(now).AddDate(0, -t.keep, 0)
		if err := s.dropBefore(ctx, t.table, oldest); err != nil {
			return err
		}
	}
	return nil
}

// dropBefore drops table's monthly partitions that end by oldest.
func (s *statsStore) dropBefore(ctx context.Context, table string, oldest time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("stats: drop old %s: %w", table, deadline(ctx, err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, statsLock); err != nil {
		return fmt.Errorf("stats: drop old %s: lock: %w", table, deadline(ctx, err))
	}
	rows, err := tx.QueryContext(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass ORDER BY 1`, table)
	if err != nil {
		return fmt.Errorf("stats: list %s partitions: %w", table, deadline(ctx, err))
	}
	var drop []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close() //nolint:errcheck // the scan error is the one worth returning
			return fmt.Errorf("stats: list %s partitions: %w", table, err)
		}
		month, err := time.Parse("2006_01", strings.TrimPrefix(name, table+"_"))
		if err != nil {
			continue // not one of ours: an operator's, left alone
		}
		if !month.AddDate(0, 1, 0).After(oldest) {
			drop = append(drop, name)
		}
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("stats: list %s partitions: %w", table, deadline(ctx, err))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stats: list %s partitions: %w", table, deadline(ctx, err))
	}
	for _, name := range drop {
		if _, err := tx.ExecContext(ctx, `DROP TABLE `+pq.QuoteIdentifier(name)); err != nil {
			return fmt.Errorf("stats: drop %s: %w", name, deadline(ctx, err))
		}
		s.log.Info("stats: partition dropped, past its retention", "partition", name)
		s.mu.Lock()
		delete(s.months, strings.TrimPrefix(name, table+"_"))
		s.mu.Unlock()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("stats: drop old %s: commit: %w", table, deadline(ctx, err))
	}
	return nil
}

// statsMaintainEvery is how often maintain runs: months change rarely;
// an hour bounds how long past its day a visitor key lives.
const statsMaintainEvery = time.Hour

// runMaintenance runs maintain every interval until ctx ends; a failure
// is logged and tried again at the next.
func (s *statsStore) runMaintenance(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		mctx, cancel := context.WithTimeout(ctx, migrateTimeout)
		if err := s.maintain(mctx); err != nil && ctx.Err() == nil {
			s.log.Error("stats maintenance", "err", err)
		}
		cancel()
	}
}
