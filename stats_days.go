package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/axiomhq/hyperloglog"
	"github.com/lib/pq"
)

// dayRow is a click_days row, decoded.
type dayRow struct {
	day          string
	people, bots int64
	uniques      *hyperloglog.Sketch
	referrers    map[string]int64
	agents       map[string]int64
}

func (s *statsStore) writeDays(ctx context.Context, tx *sql.Tx, days map[dayKey]*daySums) error {
	keys := slices.SortedFunc(maps.Keys(days), func(a, b dayKey) int {
		if c := strings.Compare(a.code, b.code); c != 0 {
			return c
		}
		return a.day.Compare(b.day)
	})
	// First as new rows, with this flush's sums alone: a row that is
	// not there yet is made whole, in one statement. Those already there
	// do not come back from the insert; they are locked, merged and written.
	fresh := make([]dayRow, len(keys))
	for i, k := range keys {
		fresh[i] = dayRow{day: k.day.Format(time.DateOnly), referrers: map[string]int64{}, agents: map[string]int64{}}
	}
	inserted, err := s.putDays(ctx, tx, newDaysSQL, keys, days, fresh, func(rows *sql.Rows) (dayKey, error) {
		var code, day string
		if err := rows.Scan(&code, &day); err != nil {
			return dayKey{}, err
		}
		t, err := time.Parse(time.DateOnly, day)
		return dayKey{code, t}, err
	})
	if err != nil {
		return err
	}
	var rest []dayKey
	for _, k := range keys {
		if !inserted[k] {
			rest = append(rest, k)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	codes := make([]string, len(rest))
	dates := make([]string, len(rest))
	for i, k := range rest {
		codes[i], dates[i] = k.code, k.day.Format(time.DateOnly)
	}
	rows, err := tx.QueryContext(ctx, lockDaysSQL, pq.Array(codes), pq.Array(dates))
	if err != nil {
		return fmt.Errorf("stats: lock %d link-days: %w", len(rest), deadline(ctx, err))
	}
	stored := make(map[dayKey]dayRow, len(rest))
	for rows.Next() {
		var code string
		row, err := s.scanDay(rows, &code)
		if err != nil {
			rows.Close() //nolint:errcheck // the scan error is the one worth returning
			return err
		}
		day, err := time.Parse(time.DateOnly, row.day)
		if err != nil {
			rows.Close() //nolint:errcheck // the parse error is the one worth returning
			return fmt.Errorf("stats: day %q from Postgres: %w", row.day, err)
		}
		stored[dayKey{code, day}] = row
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("stats: read link-days: %w", deadline(ctx, err))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stats: read link-days: %w", deadline(ctx, err))
	}
	old := make([]dayRow, len(rest))
	for i, k := range rest {
		row, ok := stored[k]
		if !ok { // the insert found it there, and rows are never deleted but by month
			return fmt.Errorf("stats: link-day %s %s not found after the insert found it", k.code, dates[i])
		}
		old[i] = row
	}
	_, err = s.putDays(ctx, tx, setDaysSQL, rest, days, old, nil)
	return err
}

// putDays runs query (newDaysSQL or setDaysSQL) for keys, each row being
// base[i] with days[keys[i]] added; with scan, it returns the keys the
// query returned.
func (s *statsStore) putDays(ctx context.Context, tx *sql.Tx, query string, keys []dayKey, days map[dayKey]*daySums,
	base []dayRow, scan func(*sql.Rows) (dayKey, error)) (map[dayKey]bool, error) {
	codes := make([]string, len(keys))
	dates := make([]string, len(keys))
	people := make([]int64, len(keys))
	bots := make([]int64, len(keys))
	uniques := make([][]byte, len(keys))
	referrers := make([]string, len(keys))
	agents := make([]string, len(keys))
	for i, k := range keys {
		codes[i], dates[i] = k.code, k.day.Format(time.DateOnly)
		row, add := base[i], days[k]
		people[i], bots[i] = row.people+add.people, row.bots+add.bots
		sk := row.uniques
		if add.uniques != nil {
			if sk == nil {
				sk = add.uniques
			} else if err := sk.Merge(add.uniques); err != nil {
				// A stored sketch that decodes but does not fit (another
				// precision): bad input, like one that does not decode.
				s.warnings.warn(ctx, "stats: a stored sketch does not merge; its uniques start again", err)
				sk = add.uniques
			}
		}
		if sk != nil {
			b, err := sk.MarshalBinary()
			if err != nil {
				return nil, fmt.Errorf("stats: encode uniques of %s %s: %w", k.code, dates[i], err)
			}
			uniques[i] = b
		}
		for h, n := range add.referrers {
			row.referrers[h] += n
		}
		for c, n := range add.agents {
			if n > 0 {
				row.agents[agentClass(c).String()] += n
			}
		}
		ref, err := json.Marshal(topReferrers(row.referrers, s.top))
		if err != nil {
			return nil, fmt.Errorf("stats: encode referrers: %w", err)
		}
		ag, err := json.Marshal(row.agents)
		if err != nil {
			return nil, fmt.Errorf("stats: encode agents: %w", err)
		}
		referrers[i], agents[i] = string(ref), string(ag)
	}
	args := []any{pq.Array(codes), pq.Array(dates), pq.Array(people), pq.Array(bots),
		pq.ByteaArray(uniques), pq.Array(referrers), pq.Array(agents)}
	if scan == nil {
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return nil, fmt.Errorf("stats: write %d link-days: %w", len(keys), deadline(ctx, err))
		}
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("stats: add %d link-days: %w", len(keys), deadline(ctx, err))
	}
	got := make(map[dayKey]bool, len(keys))
	for rows.Next() {
		k, err := scan(rows)
		if err != nil {
			rows.Close() //nolint:errcheck // the scan error is the one worth returning
			return nil, fmt.Errorf("stats: add link-days: %w", err)
		}
		got[k] = true
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("stats: add link-days: %w", deadline(ctx, err))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: add link-days: %w", deadline(ctx, err))
	}
	return got, nil
}

// scanDay reads a click_days row (with its code first if code is not nil).
// What Postgres holds is checked like any input: a sketch or a map that
// does not decode is logged and read as empty, so that one bad row costs
// its own uniques or referrers, never the flush.
func (s *statsStore) scanDay(rows *sql.Rows, code *string) (dayRow, error) {
	var row dayRow
	var sketch, ref, ag []byte
	dest := []any{&row.day, &row.people, &row.bots, &sketch, &ref, &ag}
	if code != nil {
		dest = append([]any{code}, dest...)
	}
	if err := rows.Scan(dest...); err != nil {
		return dayRow{}, fmt.Errorf("stats: scan link-day: %w", err)
	}
	if row.people < 0 || row.bots < 0 {
		s.warnings.warn(context.Background(), "stats: stored counts are negative; they start again",
			fmt.Errorf("people %d, bots %d", row.people, row.bots))
		row.people, row.bots = 0, 0
	}
	if len(sketch) > 0 {
		sk := newSketch()
		if err := sk.UnmarshalBinary(sketch); err != nil {
			s.warnings.warn(context.Background(), "stats: a stored sketch does not decode; its uniques start again", err)
		} else {
			row.uniques = sk
		}
	}
	row.referrers = s.counts(ref, "referrers")
	row.agents = s.counts(ag, "agents")
	return row, nil
}

// counts decodes a map of counts stored as JSON; a bad one is empty.
func (s *statsStore) counts(b []byte, what string) map[string]int64 {
	m := make(map[string]int64)
	if len(b) == 0 {
		return m
	}
	if err := json.Unmarshal(b, &m); err != nil {
		s.warnings.warn(context.Background(), "stats: stored "+what+" do not decode; they start again", err)
		return make(map[string]int64)
	}
	for k, n := range m {
		if n < 0 || k == "" || len(k) > maxHostLen {
			s.warnings.warn(context.Background(), "stats: stored "+what+" hold a bad entry; they start again",
				fmt.Errorf("%q: %d", k, n))
			return make(map[string]int64)
		}
	}
	return m
}

// key returns the day's visitor key, making it if no instance has.
func (s *statsStore) key(ctx context.Context, day time.Time) ([]byte, error) {
	d := day.Format(time.DateOnly)
	s.mu.Lock()
	k := s.keys[d]
	s.mu.Unlock()
	if k != nil {
		return k, nil
	}
	fresh := make([]byte, 32)
	rand.Read(fresh) //nolint:errcheck // crypto/rand.Read never returns an error (Go 1.24+)
	if _, err := s.db.ExecContext(ctx, newKeySQL, d, fresh); err != nil {
		return nil, fmt.Errorf("make the key of %s: %w", d, deadline(ctx, err))
	}
	if err := s.db.QueryRowContext(ctx, keySQL, d).Scan(&k); err != nil {
		return nil, fmt.Errorf("read the key of %s: %w", d, deadline(ctx, err))
	}
	if len(k) != 32 {
		return nil, fmt.Errorf("the key of %s from Postgres is %d bytes, want 32", d, len(k))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for old := range s.keys {
		if old < day.AddDate(0, 0, -1).Format(time.DateOnly) {
			delete(s.keys, old)
		}
	}
	s.keys[d] = k
	return k, nil
}
