package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// click is one redirect that counts: which link, when, and what the
// request said of who followed it. The handler copies these out of the
// request (no parsing on the request's path); the click worker classifies,
// hashes and sums them off it.
type click struct {
	code    string
	at      time.Time
	client  netip.Addr // clientIP: never stored, only hashed into a sketch
	referer string     // the Referer header as sent
	agent   string     // the User-Agent header as sent
	// counted says that the link's total in click_counts has this click
	// already: a link with max_clicks counts each click on the request's
	// path (Store.TakeClick), and goes through the queue for its stats only.
	counted bool
}

// clickRecorder counts a click on a link. The redirect handler calls it
// after a successful GET (a cache hit counts too: counting is not storage).
// It must never make a redirect wait or fail.
type clickRecorder interface {
	Click(ctx context.Context, c click)
}

// noClicks is the recorder when CLICKS=off.
type noClicks struct{}

func (noClicks) Click(context.Context, click) {}

// clickWriter writes a batch of clicks, one entry per click, in one go:
// counts summed per code (any Store), one row per click (pgStore), or
// counts with the stats (statsStore).
type clickWriter func(ctx context.Context, clicks []click) error

// countClicks writes clicks as counts summed per code (or rows, with
// the pgStore's AddClickRows): only the code of each is kept, and a click
// counted on the request's path already (click.counted) is skipped.
func countClicks(add func(ctx context.Context, codes []string) error) clickWriter {
	return func(ctx context.Context, clicks []click) error {
		codes := make([]string, 0, len(clicks))
		for _, c := range clicks {
			if !c.counted {
				codes = append(codes, c.code)
			}
		}
		if len(codes) == 0 {
			return nil
		}
		return add(ctx, codes)
	}
}

// syncClicks writes each click during its request (CLICKS=sync): the
// simplest way, measured to show what the queue saves.
type syncClicks struct {
	write   clickWriter
	timeout time.Duration
	errs    *sampledLog
}

func (s syncClicks) Click(ctx context.Context, c click) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.write(ctx, []click{c}); err != nil {
		s.errs.warn(ctx, "click not recorded", err)
	}
}

// clickPoll is how often the click worker takes what is queued. At the
// default CLICK_QUEUE_SIZE (10,000) the queue fills in 10 ms only past a
// million clicks a second.
const clickPoll = 10 * time.Millisecond

// clickQueue takes clicks off the request path (CLICKS=queue). Click puts
// the click in a bounded channel and returns at once; when the channel is
// full the click is dropped and counted, never waited for. One worker
// takes clicks out in batches, by size or by time, and writes each batch
// in one statement. Close drains the channel and writes what is left.
type clickQueue struct {
	ch       chan click
	write    clickWriter
	maxBatch int
	every    time.Duration
	log      *slog.Logger
	errs     *sampledLog
	obs      clickObservers

	// Every click given to Click ends in one of these, so that none is
	// lost without being counted: accepted ones are written, lost, or
	// unwritten at shutdown; the others are dropped or late.
	accepted  atomic.Int64 // clicks put in the queue
	dropped   atomic.Int64 // clicks refused because the queue was full
	written   atomic.Int64 // clicks written
	lost      atomic.Int64 // clicks whose batch failed to write
	unwritten atomic.Int64 // clicks still queued, or being written, when Close gave up
	late      atomic.Int64 // clicks that came after Close began, never queued
	stopped   atomic.Bool  // set by Close: no more clicks are taken

	// settleMu makes counting a batch written (or lost) and Close's
	// counting what is left unwritten exclusive: once Close has counted
	// (abandoned), a batch that the worker finishes later is not counted
	// twice.
	settleMu  sync.Mutex
	abandoned bool

	stopOnce sync.Once
	stop     chan struct{} // closed by Close
	done     chan struct{} // closed by run when it has written everything

}

// clickObservers observe each batch written: how many clicks, how long it
// took (metrics.go). A nil one observes nothing.
type clickObservers struct{ batchSize, flushTime observer }

func newClickQueue(write clickWriter, size, maxBatch int, every time.Duration, obs clickObservers, log *slog.Logger) *clickQueue {
	if obs.batchSize == nil {
		obs.batchSize = noObserve{}
	}
	if obs.flushTime == nil {
		obs.flushTime = noObserve{}
	}
	q := &clickQueue{
		obs:      obs,
		ch:       make(chan click, size),
		write:    write,
		maxBatch: maxBatch,
		every:    every,
		log:      log,
		errs:     &sampledLog{log: log, every: 10 * time.Second},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go q.run()
	return q
}

// Click queues one click, or drops it if the queue is full.
func (q *clickQueue) Click(_ context.Context, c click) {
	if q.stopped.Load() {
		// Only if the HTTP server's shutdown timed out with handlers
		// still running: the drain may be over, so count, do not queue.
		q.late.Add(1)
		return
	}
	// accepted is counted before the send, so that the worker can never
	// settle a click that accepted does not hold yet.
	q.accepted.Add(1)
	select {
	case q.ch <- c:
	default:
		q.accepted.Add(-1)
		q.dropped.Add(1)
	}
}

func (q *clickQueue) run() {
	defer close(q.done)
	batch := make([]click, 0, q.maxBatch)
	// add takes c and what else is queued, and writes a batch once full.
	add := func(c click) {
		batch = collect(batch, q.ch, c, q.maxBatch)
		if len(batch) >= q.maxBatch {
			batch = q.flush(batch)
		}
	}
	tick := time.NewTicker(q.every)
	defer tick.Stop()
	// The worker takes what is queued every clickPoll, not each click as
	// it comes: a receive that wakes the worker for every click would
	// cost the redirect a goroutine switch, and the queue has room for
	// CLICK_QUEUE_SIZE clicks meanwhile.
	poll := time.NewTicker(min(clickPoll, q.every))
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			for taken := true; taken; {
				select {
				case c := <-q.ch:
					add(c)
				default:
					taken = false
				}
			}
		case <-tick.C:
			batch = q.flush(batch)
		case <-q.stop:
			// Write everything queued so far. The channel is never
			// closed, so a Click that comes late cannot panic.
			for {
				select {
				case c := <-q.ch:
					add(c)
				default:
					q.flush(batch)
					return
				}
			}
		}
	}
}

// flush writes batch with a deadline of its own (the request that made
// each click is long gone) and returns it emptied for reuse.
func (q *clickQueue) flush(batch []click) []click {
	if len(batch) == 0 || q.isAbandoned() {
		// Close has counted these as unwritten: writing them now
		// could count them twice, once lost and once stored.
		return batch[:0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), clickWriteTimeout)
	defer cancel()
	start := time.Now()
	err := q.write(ctx, batch)
	q.obs.flushTime.Observe(time.Since(start).Seconds())
	q.obs.batchSize.Observe(float64(len(batch)))
	if err != nil {
		q.errs.warn(ctx, "clicks not recorded", err)
	}
	q.settle(len(batch), err)
	return batch[:0]
}

// settle counts a batch written or lost, unless Close has given up on the
// drain and counted it unwritten already.
func (q *clickQueue) settle(n int, err error) {
	q.settleMu.Lock()
	defer q.settleMu.Unlock()
	switch {
	case q.abandoned:
	case err != nil:
		q.lost.Add(int64(n))
	default:
		q.written.Add(int64(n))
	}
}

func (q *clickQueue) isAbandoned() bool {
	q.settleMu.Lock()
	defer q.settleMu.Unlock()
	return q.abandoned
}

// notWritten is every click that was counted and will not be written:
// shortener_clicks_lost_total.
func (q *clickQueue) notWritten() int64 {
	return q.lost.Load() + q.unwritten.Load() + q.late.Load()
}

// Close stops taking clicks, writes every queued one, and waits for that,
// up to ctx's deadline. Call it after the HTTP server has stopped, so that
// no Click comes after it. It logs what became of every click it was given.
func (q *clickQueue) Close(ctx context.Context) error {
	q.stopOnce.Do(func() {
		q.stopped.Store(true)
		close(q.stop)
	})
	var err error
	select {
	case <-q.done:
	case <-ctx.Done():
		err = fmt.Errorf("click queue: drain: %w", ctx.Err())
	}
	// What was accepted and is neither written nor lost now never will be:
	// if the drain ran out of time, the clicks still in the channel and
	// the batch being written; if not, a Click that saw stopped false just
	// before Close and sent after the drain's last read.
	q.settleMu.Lock()
	q.abandoned = true
	left := q.accepted.Load() - q.written.Load() - q.lost.Load()
	q.unwritten.Add(left)
	q.settleMu.Unlock()
	if left > 0 {
		q.log.Error("clicks lost at shutdown: still queued when the drain ended", "clicks", left, "err", err)
	}
	q.log.Info("click queue closed", "drained", err == nil, "written", q.written.Load(),
		"dropped_queue_full", q.dropped.Load(), "lost_write_failed", q.lost.Load(),
		"lost_at_shutdown", q.unwritten.Load(), "late_not_written", q.late.Load())
	return err
}

// openClicks makes the recorder that cfg asks for, writing to store, and
// returns it with the function that drains it at shutdown.
//
// With stats (not nil), each batch's totals are written and its clicks
// summed for the stats, which statsStore flushes every STATS_FLUSH
// (statsStore.write). With metrics on, the queue's depth, drops and
// batches are exported.
func openClicks(cfg clickConfig, store Store, stats *statsStore, m *metrics, log *slog.Logger) (clickRecorder, func(context.Context) error) {
	write := countClicks(store.AddClicks)
	if pg, ok := store.(*pgStore); ok && cfg.storage == "rows" {
		write = countClicks(pg.AddClickRows)
	}
	if stats != nil {
		write = stats.write
	}
	log.Info("clicks", "mode", cfg.mode, "storage", cfg.storage, "stats", stats != nil,
		"queue_size", cfg.queue, "batch", cfg.batch, "flush", cfg.every)
	switch cfg.mode {
	case "off":
		return noClicks{}, func(context.Context) error { return nil }
	case "sync":
		timeout := cfg.syncTimeout
		if timeout == 0 {
			timeout = defaultDBTimeout
		}
		return syncClicks{write: write, timeout: timeout, errs: &sampledLog{log: log, every: 10 * time.Second}},
			func(context.Context) error { return nil }
	default:
		q := newClickQueue(write, cfg.queue, cfg.batch, cfg.every, m.clickObservers(), log)
		m.register(q.collectors()...)
		return q, q.Close
	}
}

// collectors export the click queue's own counters, read at each scrape:
// nothing on the request's path pays for them.
func (q *clickQueue) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "click_queue_depth",
			Help: "Clicks waiting in the queue."}, func() float64 { return float64(len(q.ch)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "click_queue_capacity",
			Help: "Clicks the queue holds before it drops (CLICK_QUEUE_SIZE)."}, func() float64 { return float64(cap(q.ch)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "clicks_dropped_total",
			Help: "Clicks dropped because the queue was full."}, func() float64 { return float64(q.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "clicks_written_total",
			Help: "Clicks written to the store."}, func() float64 { return float64(q.written.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "clicks_lost_total",
			Help: "Clicks counted and never written: their batch failed, or they were still queued when the shutdown's drain ended, or came after it."},
			func() float64 { return float64(q.notWritten()) }),
	}
}
