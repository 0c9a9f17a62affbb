package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// sampledLog logs an error at most once per interval and counts the ones it
// held back, so that a Redis outage under load writes a line every few
// seconds instead of one per request.
type sampledLog struct {
	log   *slog.Logger
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs with ctx, so that the line carries the request id of the
// request that failed (context.Background() where there is none).
func (s *sampledLog) warn(ctx context.Context, msg string, err error) { s.warnTo(ctx, s.log, msg, err) }

// warnTo is warn through a logger given at the call, for a sampledLog
// shared by callers that each have their own.
func (s *sampledLog) warnTo(ctx context.Context, log *slog.Logger, msg string, err error) {
	s.mu.Lock()
	now := time.Now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.suppressed++
		s.mu.Unlock()
		return
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	s.mu.Unlock()
	log.WarnContext(ctx, msg, "err", err, "suppressed_since_last", n)
}
