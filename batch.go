package main

// collect appends first to batch, then whatever ch holds already, until
// batch holds limit items or ch is empty. It never waits: a batch is what
// queued up while the last one was being written, so a request alone is
// never held back for company (group commit's rule). batch is the
// caller's, to reuse.
//
// The loops that batch take their first item each in their own way (the
// group commit and the rate limiter block on the queue or a stop; the
// feed's acknowledgements on the queue, a ticker or the end), and then
// all collect the rest here. The click queue does not: it takes
// everything queued every clickPoll, with no bound, into sums in memory
// (clicks.go).
func collect[T any](batch []T, ch <-chan T, first T, limit int) []T {
	batch = append(batch, first)
	for len(batch) < limit {
		select {
		case v := <-ch:
			batch = append(batch, v)
		default:
			return batch
		}
	}
	return batch
}
