package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// build reads every code from Postgres into a new filter, and puts it in
// place of the old one, if any, which answers meanwhile.
//
// No create is lost: one committed before the build starts is read by
// the scan, since every batch's statement starts later and sees it; one
// added after (here, or through the feed) is kept in pending and added
// at the end. If the feed is down when the build starts, creates from
// then on may be missing altogether, so the gap starts there.
func (b *bloomStore) build(ctx context.Context) error {
	start := time.Now()
	b.mu.Lock()
	b.building = true
	b.pending = b.pending[:0] // all of it committed before start: the scan reads it
	epoch, listenUp := b.listenEpoch, b.listenUp
	if b.feedUp && b.filter == nil {
		b.gapFrom = time.Time{} // the feed brings what the scan misses
	} else if !b.feedUp {
		b.gapFrom = earliest(b.gapFrom, start)
	}
	b.mu.Unlock()

	f, capacity, rows, at, err := b.scan(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.building = false
	if err != nil {
		if b.filter != nil {
			b.pending = nil // the old filter has every add; the next build starts afresh
		}
		return fmt.Errorf("bloom filter: build: %w", err)
	}
	n := rows
	for _, c := range b.pending {
		if !f.TestOrAddString(c) {
			n++
		}
	}
	b.pending = nil
	b.filter, b.capacity, b.codes, b.grow = f, capacity, n, false
	if listenUp {
		// Every link committed after the LISTEN was told (and is in
		// pending, or will come), every one before was scanned.
		b.builtEpoch = epoch
	}
	if at.After(b.sweptTo) {
		b.sweptTo = at
	}
	took := time.Since(start)
	b.counts.buildSeconds.Set(took.Seconds())
	b.log.Info("bloom filter built", "rows", rows, "codes", n, "capacity", capacity,
		"bytes", f.Cap()/8, "hashes", f.K(), "fp_rate", b.fpRate, "took", took)
	b.setTrust()
	return nil
}

// newFilter makes an empty filter sized for capacity codes at fpRate: the
// library works out the bits (m = -n ln p / ln² 2) and the hashes
// (k = m/n ln 2) from the two.
func newFilter(capacity uint, fpRate float64) *bloom.BloomFilter {
	return bloom.NewWithEstimates(capacity, fpRate)
}

// scan counts the links, sizes a filter for twice as many (at least
// minCapacity), and adds every code, batch by batch. It returns the
// filter, its capacity, the rows read, and Postgres's clock at the count.
func (b *bloomStore) scan(ctx context.Context) (*bloom.BloomFilter, uint, uint, time.Time, error) {
	var total int64
	var at time.Time
	qctx, cancel := context.WithTimeout(ctx, bloomQueryTimeout)
	err := bounded(qctx, func() error { return b.db.QueryRowContext(qctx, bloomCountSQL).Scan(&total, &at) })
	cancel()
	if err != nil {
		return nil, 0, 0, time.Time{}, fmt.Errorf("count: %w", err)
	}
	capacity := max(2*uint(total), b.minCapacity)
	f := newFilter(capacity, b.fpRate)
	var rows uint
	last := ""
	codes := make([]string, 0, b.batch)
	for {
		codes = codes[:0]
		qctx, cancel := context.WithTimeout(ctx, bloomQueryTimeout)
		err := bounded(qctx, func() error {
			r, err := b.db.QueryContext(qctx, bloomBatchSQL, last, b.batch)
			if err != nil {
				return err
			}
			defer r.Close() //nolint:errcheck // r.Err, below, reports what went wrong
			for r.Next() {
				var c string
				if err := r.Scan(&c); err != nil {
					return err
				}
				codes = append(codes, c)
			}
			return r.Err()
		})
		cancel()
		if err != nil {
			return nil, 0, 0, time.Time{}, fmt.Errorf("batch after %q: %w", last, err)
		}
		for _, c := range codes {
			f.AddString(c)
		}
		rows += uint(len(codes))
		if len(codes) > 0 {
			last = codes[len(codes)-1]
		}
		if b.afterBatch != nil {
			b.afterBatch(last)
		}
		if len(codes) < b.batch {
			return f, capacity, rows, at, nil
		}
	}
}

// resync reads the codes created since the feed's gap began (less
// resyncMargin) into the filter. The feed is up when it starts, so every
// create from then on arrives through it; every create before is in
// Postgres, which the query reads after.
func (b *bloomStore) resync(ctx context.Context) error {
	start := time.Now()
	b.mu.RLock()
	from, epoch := b.gapFrom, b.epoch
	b.mu.RUnlock()
	since := from.Add(-resyncMargin)
	var n int
	qctx, cancel := context.WithTimeout(ctx, bloomResyncTimeout)
	defer cancel()
	err := bounded(qctx, func() error {
		r, err := b.db.QueryContext(qctx, bloomRecentSQL, since)
		if err != nil {
			return err
		}
		defer r.Close() //nolint:errcheck // r.Err, below, reports what went wrong
		chunk := make([]string, 0, 1000)
		for r.Next() {
			var c string
			if err := r.Scan(&c); err != nil {
				return err
			}
			// In chunks, so that lookups wait for a thousand adds at
			// most, not for the whole read.
			if chunk = append(chunk, c); len(chunk) == cap(chunk) {
				b.add(chunk, fromResync)
				n += len(chunk)
				chunk = chunk[:0]
			}
		}
		b.add(chunk, fromResync)
		n += len(chunk)
		return r.Err()
	})
	if err != nil {
		return fmt.Errorf("bloom filter: resync since %s: %w", since.Format(time.RFC3339), err)
	}
	b.counts.resyncs.Inc()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.epoch == epoch && b.feedUp {
		b.gapFrom = time.Time{}
	} // else the feed failed again meanwhile: the gap stays, from its start
	b.log.Info("bloom filter resynced from postgres", "since", since, "codes", n, "took", time.Since(start))
	b.setTrust()
	return nil
}
