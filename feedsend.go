package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubReq is one code waiting to be announced, and, once done is closed,
// what PUBLISH answered for it: how many subscribers received it, and the
// instances registered as it was published (nil: not known; live.go).
type pubReq struct {
	code string
	n    int
	live map[string]time.Time // shared by the batch: read only
	at   time.Time            // when the PUBLISH's reply came back
	mark string               // the key the batch's script left where it ran (step 43)
	err  error
	done chan struct{}
}

// publish announces code, and returns its request once done: how many
// subscribers received it, and the instances registered (live.go).
// Step 18: not a round trip of its own. It hands the code to publishLoop,
// which sends every code waiting in one script (a pipeline until step
// 34), as sendLoop does with
// the acknowledgements: under 50 concurrent creates, one PUBLISH per
// create was a sixth of the app's CPU (docs/18). It waits at most twice
// REDIS_TIMEOUT: the batch before its own, then its own (a batch is the
// whole queue, at most).
func (f *codeFeed) publish(ctx context.Context, code string) (*pubReq, error) {
	r := &pubReq{code: code, done: make(chan struct{})}
	t := time.NewTimer(2 * f.rdb.timeout)
	defer t.Stop()
	select {
	case f.pubq <- r:
	case <-t.C:
		return nil, fmt.Errorf("code feed: publish %s: queue full for %v", code, 2*f.rdb.timeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("code feed: publish %s: %w", code, ctx.Err())
	}
	select {
	case <-r.done:
		return r, r.err
	case <-t.C:
		// publishLoop may still send it: a second announcement of a
		// code only adds it again.
		return nil, fmt.Errorf("code feed: publish %s: no answer within %v", code, 2*f.rdb.timeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("code feed: publish %s: %w", code, ctx.Err())
	}
}

// publishLoop publishes the codes handed to publish, as many as are
// waiting (the whole queue, at most) in one script, until ctx ends.
//
// It goes to Redis even while the breaker is open: the breaker is shared
// with the cache, and under load three Redis calls in a row past
// REDIS_TIMEOUT (slow GETs) open it for a second, in which every create
// would go unannounced (in a sitting of benchmarks/misses.sh, through the
// breaker: 6,322 creates in one round, 5,722 in another), each a link the
// other instances would answer 404 for until the republish or the sweep.
// A create can afford REDIS_TIMEOUT; it already waits for
// acknowledgements. It reads the breaker's clock instead of asking
// allow(), and still tells the breaker the outcome: an answer closes it,
// a failure counts.
//
// Step 34: one script reads the registrations and PUBLISHes the batch
// (live.go), so that no instance registers between the two.
func (f *codeFeed) publishLoop(ctx context.Context) {
	batch := make([]*pubReq, 0, cap(f.pubq))
	args := make([]any, 0, 2+cap(f.pubq))
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-f.pubq:
			batch = collect(batch[:0], f.pubq, r, cap(batch))
		}
		at := f.rdb.breaker.now()
		// Not ctx: it ends at shutdown, after the last create.
		pctx, cancel := context.WithTimeout(context.Background(), f.rdb.timeout)
		// The batch's mark outlives its creates' waits (step 43): they
		// end BLOOM_ACK_TIMEOUT after the reply, which comes up to
		// REDIS_TIMEOUT after the script ran; their last read takes
		// REDIS_TIMEOUT more.
		mark := f.marks + rand.Text()
		markLife := f.ackTimeout + 2*f.rdb.timeout + time.Second
		args = append(args[:0], f.codes, liveMaxBytes, liveMaxFields, markLife.Milliseconds())
		for _, r := range batch {
			args = append(args, f.announcement(r.code))
		}
		sent := time.Now()
		reply, err := livePublishScript.Run(pctx, f.rdb.Client, []string{f.live, mark}, args...).Slice()
		published := time.Now()
		cancel()
		f.rdb.breaker.done(at, err)
		if err == nil && len(reply) != 1+len(batch) {
			err = fmt.Errorf("%d replies for %d codes", len(reply), len(batch))
		}
		live, err := f.publishedLive(reply, err, sent)
		for i, r := range batch {
			if err != nil {
				r.err = fmt.Errorf("code feed: publish %s: %w", r.code, err)
			} else if n, ok := reply[1+i].(int64); ok {
				r.n, r.live, r.at, r.mark = int(n), live, published, mark
			} else {
				r.err = fmt.Errorf("code feed: publish %s: PUBLISH answered %T", r.code, reply[1+i])
			}
			close(r.done)
			batch[i] = nil
		}
		clear(args)
	}
}

// publishedLive reads the registrations from what the script returned
// (nil if they were not read), as of sent, when the script was sent: one
// good when Redis ran it counts, however late the reply (step 34's
// fact-check found the reply's own lateness eating into liveMargin).
// It keeps those to remove.
func (f *codeFeed) publishedLive(reply []any, err error, sent time.Time) (map[string]time.Time, error) {
	if err != nil {
		return nil, err
	}
	if reply[0] == nil {
		f.warns.warn(context.Background(), "code feed: registrations not read; creates wait for as many acknowledgements as PUBLISH had receivers",
			fmt.Errorf("%s is over %d bytes or %d fields", f.live, liveMaxBytes, liveMaxFields))
		return nil, nil
	}
	live, prune, perr := f.parseLive(reply[0], sent)
	if perr != nil {
		f.warns.warn(context.Background(), "code feed: registrations not read; creates wait for as many acknowledgements as PUBLISH had receivers", perr)
		return nil, nil
	}
	f.reg.toPrune(prune)
	return live, nil
}

func (f *codeFeed) keepUnsent(code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.unsent) >= maxUnsent {
		f.bad.warn(context.Background(), "code feed: too many codes waiting to be published again; dropping the oldest",
			fmt.Errorf("%d codes waiting", len(f.unsent)))
		f.unsent = f.unsent[1:]
	}
	f.unsent = append(f.unsent, code)
}

// sendLoop sends acknowledgements, as many as are waiting in one pipeline
// (one round trip), and every second publishes again what failed.
func (f *codeFeed) sendLoop(ctx context.Context) {
	batch := make([]feedAck, 0, 256)
	t := time.NewTicker(feedPingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.republish(ctx)
		case <-f.republishNow:
			f.republish(ctx)
		case a := <-f.outbox:
			batch = collect(batch[:0], f.outbox, a, cap(batch))
			pctx, cancel := context.WithTimeout(ctx, f.rdb.timeout)
			_, err := f.rdb.Pipelined(pctx, func(p redis.Pipeliner) error {
				for _, a := range batch {
					p.Publish(pctx, f.ackPrefix+a.to, f.ackMessage(f.ackPrefix+a.to, a.code))
				}
				return nil
			})
			cancel()
			if err != nil {
				// Their creators wait until this instance renews from a
				// later probe (live.go).
				f.warns.warn(ctx, "code feed: acknowledgements not sent", fmt.Errorf("%d acknowledgements: %w", len(batch), err))
			}
		}
	}
}

// republish publishes again the codes whose PUBLISH failed, with no wait
// for acknowledgements: their creates have been answered. No request
// waits on it, so it waits for Redis as a change's retry does
// (pendingTellTimeout), not REDIS_TIMEOUT. Until step 29 it had 50 ms:
// while Redis answered later than that, no new connection got through its
// handshake, nothing was published, and the links created meanwhile
// answered 404 on the other instances until Redis was quick again (8 s
// in the history checker's slowed span: docs/29). It runs on sendLoop's
// goroutine, whose acknowledgements would wait on the same slow Redis.
func (f *codeFeed) republish(ctx context.Context) {
	f.mu.Lock()
	codes := f.unsent
	f.unsent = nil
	f.mu.Unlock()
	if len(codes) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, pendingTellTimeout+time.Duration(len(codes))*time.Microsecond)
	defer cancel()
	_, err := f.rdb.WithTimeout(pendingTellTimeout).Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range codes {
			p.Publish(ctx, f.codes, f.announcement(c))
		}
		return nil
	})
	if err != nil {
		f.mu.Lock()
		f.unsent = append(codes, f.unsent...)
		if len(f.unsent) > maxUnsent {
			f.unsent = f.unsent[len(f.unsent)-maxUnsent:]
		}
		f.mu.Unlock()
		return
	}
	f.log.Info("code feed: published again the codes redis had refused", "codes", len(codes))
}
