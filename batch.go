package main

// collect appends first to batch, then whatever ch holds already, until
// batch holds limit items or ch is empty. It never waits: a batch is what
// queued up while the last one was being written, so a request alone is
// never held back for company (group commit's rule). batch is the
// caller's, to reuse.
//
// The loops that batch take their first item each in their own way (on
// the queue or a stop, on a ticker or the end), and then all collect the
// rest here: the group commit (groupcommit.go), the lookup batch
// (lookupbatch.go), the rate limiter (limits.go), the click queue
// (clicks.go, which writes a batch once full or every CLICK_FLUSH), and
// the feed's publishes and acknowledgements (feedsend.go). Until step 41
// this comment said the click queue did not, and docs/24 that the feed's
// publishes went one by one: both had used collect since steps 12 and 18.
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
