package main

import (
	"context"
	"fmt"
	"time"
)

// statsPoint is one hour's or one day's clicks of a link. Uniques,
// referrers and agents are kept per day only: null in hourly points.
type statsPoint struct {
	Time      time.Time        `json:"time"`
	Clicks    int64            `json:"clicks"` // people's: clicks from browsers
	Bots      int64            `json:"bots"`   // every other client's (see classify)
	Uniques   *uint64          `json:"uniques"`
	Referrers map[string]int64 `json:"referrers"`
	Agents    map[string]int64 `json:"agents"`
}

// points reads a link's points of by ("hour" or "day") in [from, to),
// both on the bucket's boundaries, with a zero point for each bucket
// without clicks.
func (s *statsStore) points(ctx context.Context, code, by string, from, to time.Time) ([]statsPoint, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	stored := make(map[time.Time]statsPoint)
	var err error
	if by == "hour" {
		err = s.readHours(ctx, code, from, to, stored)
	} else {
		err = s.readDays(ctx, code, from, to, stored)
	}
	if err != nil {
		return nil, err
	}
	var points []statsPoint
	for t := from; t.Before(to); t = next(t, by) {
		p, ok := stored[t]
		if !ok {
			p = statsPoint{Time: t}
			if by == "day" {
				p.Uniques, p.Referrers, p.Agents = new(uint64), map[string]int64{}, map[string]int64{}
			}
		}
		points = append(points, p)
	}
	return points, nil
}

func next(t time.Time, by string) time.Time {
	if by == "hour" {
		return t.Add(time.Hour)
	}
	return t.AddDate(0, 0, 1)
}

func (s *statsStore) readHours(ctx context.Context, code string, from, to time.Time, into map[time.Time]statsPoint) error {
	rows, err := s.db.QueryContext(ctx, hoursSQL, code, from, to)
	if err != nil {
		return fmt.Errorf("stats: read hours of %q: %w", code, deadline(ctx, err))
	}
	defer rows.Close() //nolint:errcheck // rows.Err below reports what matters
	for rows.Next() {
		var p statsPoint
		if err := rows.Scan(&p.Time, &p.Clicks, &p.Bots); err != nil {
			return fmt.Errorf("stats: read hours of %q: %w", code, err)
		}
		p.Time = p.Time.UTC()
		into[p.Time] = p
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stats: read hours of %q: %w", code, deadline(ctx, err))
	}
	return nil
}

func (s *statsStore) readDays(ctx context.Context, code string, from, to time.Time, into map[time.Time]statsPoint) error {
	rows, err := s.db.QueryContext(ctx, daysSQL, code, from.Format(time.DateOnly), to.Format(time.DateOnly))
	if err != nil {
		return fmt.Errorf("stats: read days of %q: %w", code, deadline(ctx, err))
	}
	defer rows.Close() //nolint:errcheck // rows.Err below reports what matters
	for rows.Next() {
		row, err := s.scanDay(rows, nil)
		if err != nil {
			return err
		}
		day, err := time.Parse(time.DateOnly, row.day)
		if err != nil {
			return fmt.Errorf("stats: day %q from Postgres: %w", row.day, err)
		}
		var u uint64
		if row.uniques != nil {
			u = row.uniques.Estimate()
		}
		into[day] = statsPoint{Time: day, Clicks: row.people, Bots: row.bots, Uniques: &u,
			Referrers: row.referrers, Agents: row.agents}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stats: read days of %q: %w", code, deadline(ctx, err))
	}
	return nil
}
