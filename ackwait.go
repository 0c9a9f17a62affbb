package main

import (
	"sync"
	"time"
)

// The creates waiting for acknowledgements (the code feed's, bloomfeed.go:
// by count until step 34, by instance id since, live.go). Moved here from
// bloomfeed.go at step 35, unchanged.

// ackWaiters are the creates waiting for acknowledgements, by code.
type ackWaiters struct {
	mu sync.Mutex
	m  map[string]*ackWait
}

// ackWait counts one create's acknowledgements, one per instance. They
// can arrive before PUBLISH has said how many to expect (want is -1 until
// then). Step 34: need, if not nil, is the instances still waited for,
// by id, each until its registration ends (live.go); want is then unused.
type ackWait struct {
	got, want int
	from      map[string]struct{}  // the instances counted
	need      map[string]time.Time // the registered instances not yet heard from
	done      chan struct{}        // closed once got reaches want, or need is empty
	closed    bool
}

func (w *ackWait) finish() {
	if !w.closed {
		w.closed = true
		close(w.done)
	}
}

func (a *ackWaiters) expect(code string) *ackWait {
	w := &ackWait{want: -1, from: make(map[string]struct{}), done: make(chan struct{})}
	a.mu.Lock()
	a.m[code] = w
	a.mu.Unlock()
	return w
}

func (a *ackWaiters) forget(code string) {
	a.mu.Lock()
	delete(a.m, code)
	a.mu.Unlock()
}

// ack counts an acknowledgement of code by the instance from, once; one
// for a create no longer waiting (it timed out) is dropped.
func (a *ackWaiters) ack(code, from string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.m[code]; w != nil {
		if _, seen := w.from[from]; seen {
			return
		}
		w.from[from] = struct{}{}
		w.got++
		if w.need != nil {
			delete(w.need, from)
			if len(w.need) == 0 {
				w.finish()
			}
		} else if w.want >= 0 && w.got == w.want {
			w.finish()
		}
	}
}

// wanted sets how many acknowledgements w waits for, and returns the
// channel closed once they are in.
func (a *ackWaiters) wanted(w *ackWait, n int) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.want = n
	if w.got >= n {
		w.finish()
	}
	return w.done
}

// wantIDs sets the instances w waits for (all in live but self), each
// until its registration ends, and returns the channel closed once each
// has acknowledged.
func (a *ackWaiters) wantIDs(w *ackWait, live map[string]time.Time, self string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.need = make(map[string]time.Time, len(live))
	for id, until := range live {
		if _, seen := w.from[id]; !seen && id != self {
			w.need[id] = until
		}
	}
	if len(w.need) == 0 {
		w.finish()
	}
	return w.done
}

// earliest is the first end of a registration w still waits on.
func (a *ackWaiters) earliest(w *ackWait) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first time.Time
	for _, until := range w.need {
		first = earliest(first, until)
	}
	return first, !first.IsZero()
}

// extend waits on for every instance w still needs, until at least t.
func (a *ackWaiters) extend(w *ackWait, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, until := range w.need {
		if until.Before(t) {
			w.need[id] = t
		}
	}
}

// lapsed takes the registrations read again (live) at now: an instance
// still waited for whose registration has ended is waited for no more
// (it does not trust its filter: live.go), and is returned; one that
// renewed from a probe sent over liveMargin after published has handled
// the announcement (its acknowledgement was lost), and is waited for no
// more either; one that renewed from an earlier probe is waited for until
// its new end.
func (a *ackWaiters) lapsed(w *ackWait, live map[string]time.Time, now, published time.Time) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var gone []string
	for id, until := range w.need {
		switch renewed, ok := live[id]; {
		case ok && renewed.Add(-liveTTL).After(published.Add(liveMargin)):
			delete(w.need, id) // heard: see above
		case ok && renewed.After(now):
			w.need[id] = renewed
		case until.After(now):
			// read early (a clock's step): waited for until its end
		default:
			delete(w.need, id)
			gone = append(gone, id)
		}
	}
	if w.need != nil && len(w.need) == 0 {
		w.finish()
	}
	return gone
}

// count is how many acknowledgements w has had.
func (a *ackWaiters) count(w *ackWait) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return w.got
}
