package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"shortener/linkhistory"
)

// The history checker (issue 24) is package linkhistory (since step 36,
// when the clients run against the three hosts began to use it too); its
// comment says what it refuses. This file runs it against three
// instances in process.

// historyBound is the staleness allowed to a read here: how long a change
// may take to reach another instance, subscriptions cut and made again
// included. It is what the service waits, which a slower machine does not
// stretch, and what it works, which it does. docs/operations.md states
// pendingRetryEvery + 2 × pendingTellTimeout (4.25 s) once Redis answers
// every call within 2 s: a change whose write to Redis timed out reaches
// the others with a retry (every pendingRetryEvery), which waits up to
// pendingTellTimeout for Redis, and a retry under way as Redis comes back
// may still fail. To that, historyWork for the work between: at the
// clients' pace, with six busy loops beside this suite at GOMAXPROCS=1,
// one read came 1.84 s after such a change (docs/27).
//
// On a machine that cannot keep the clients' pace, the work part grows
// with how far behind it is (historyBoundFor): at step 30, on CI's busiest
// run, 16,000 operations took 92 s against their 30 s and a read came
// 6.3 s after a change, past the 5 s this bound then was everywhere
// (docs/30, docs/31).
const (
	historyWaits = pendingRetryEvery + 2*pendingTellTimeout
	historyWork  = 750 * time.Millisecond
	historyBound = historyWaits + historyWork // at the pace: 5 s
)

// historyBoundFor is historyBound for a run that took took where the
// pace asked for pace: the work part stretched as the run was, never
// shrunk.
func historyBoundFor(took, pace time.Duration) time.Duration {
	slow := max(1, float64(took)/float64(pace))
	return historyWaits + time.Duration(slow*float64(historyWork))
}

// writesAllowed is porcupine's verdict on the writes of ops; on a refusal
// not planted, it saves porcupine's drawing of them and says where.
func writesAllowed(t *testing.T, ops []porcupine.Operation, planted bool) porcupine.CheckResult {
	t.Helper()
	res, info := linkhistory.Writes(ops, time.Minute)
	if res != porcupine.Ok && !planted {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("history-writes-%d.html", time.Now().UnixNano()))
		if err := porcupine.VisualizePath(linkhistory.Model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		} else {
			t.Logf("porcupine's drawing of the writes: %s", path)
		}
	}
	return res
}

// TestHistoryUnderFaults: three instances on one Postgres and one Redis,
// clients creating, editing, deleting and reading a few dozen links
// through all of them, while the instances' Redis connections (their
// subscriptions among them) are cut, the cache's keys are emptied as
// a Redis restarted empty would have them, and for a span Redis answers
// every call later than REDIS_TIMEOUT (since step 29, which found a
// change's retries could not get through while it did). The history is checked with
// the bound; every delete is checked directly; and the checker is shown
// to refuse the same history with one stale read planted in it.
func TestHistoryUnderFaults(t *testing.T) {
	const (
		links      = 24
		clients    = 8
		perClient  = 2000
		faultEvery = 5000 // operations between two faults, counted, not timed
		// From slowFrom to slowTo operations, the instances' Redis answers
		// each call 200 ms or more after it: four times their
		// REDIS_TIMEOUT (50 ms), so that every request's call to it fails.
		// The span ends before the first fault, which cuts connections.
		slowFrom, slowTo = 500, 4900
		// minRun is the least time the clients take: each waits out its
		// share of it before its next operation if it is early. Without
		// it, on a fast machine without -race, the 16,000 operations took
		// about 3 s, less than the bound: no read could be late enough to be
		// refused, and the checker passed a service that ignored every
		// invalidation (docs/29). At this pace the slowed span lasts 8 s
		// or more, past the bound.
		minRun = 6 * historyBound
	)
	opts, prefix := testRedis(t)
	proxy := startProxy(t, opts.Addr)            // the instances' way to Redis, slowed for a span
	name := fmt.Sprintf("hist%d", rand.Uint32()) // the instances' Redis client name, to cut theirs only
	bases, metrics, _ := startInstances(t, 3, map[string]string{
		"REDIS_URL":        fmt.Sprintf("redis://%s/%d?client_name=%s", proxy.addr(), opts.DB, name),
		"REDIS_KEY_PREFIX": prefix,
	})
	look := lookInto(t, opts)
	client := &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{MaxIdleConnsPerHost: clients},
	}

	h := linkhistory.New()
	var (
		tokens   sync.Map // link → token, once its create answered 201
		done     atomic.Int64
		faults   atomic.Int64
		problems = make(chan string, 100)
		wg       sync.WaitGroup
	)
	problem := func(format string, args ...any) {
		select {
		case problems <- fmt.Sprintf(format, args...):
		default:
		}
	}
	do := func(method, url, body, token string) (linkhistory.Answer, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return linkhistory.Answer{}, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return linkhistory.Answer{}, err
		}
		defer resp.Body.Close()
		a := linkhistory.Answer{Status: resp.StatusCode, URL: resp.Header.Get("Location")}
		if method == "POST" && resp.StatusCode == http.StatusCreated {
			var c created
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
				return a, err
			}
			a.URL = c.Token // carried back to the caller, not checked
		}
		return a, nil
	}
	fault := func(n int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n%2 == 1 {
			// Cut every connection the instances have to Redis, their
			// subscriptions (invalidations and the feed) among them.
			list, err := look.ClientList(ctx).Result()
			if err != nil {
				problem("client list: %v", err)
				return
			}
			for _, line := range strings.Split(list, "\n") {
				var id string
				for _, f := range strings.Fields(line) {
					if v, ok := strings.CutPrefix(f, "id="); ok {
						id = v
					}
				}
				if id != "" && strings.Contains(line, " name="+name+" ") {
					if err := look.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil && err != redis.Nil && !strings.Contains(err.Error(), "No such client") {
						problem("client kill: %v", err)
					}
				}
			}
			return
		}
		// Empty the cache, as a Redis restarted without its data would be.
		keys, err := look.Keys(ctx, prefix+cacheKeyPrefix+"*").Result()
		if err != nil {
			problem("keys: %v", err)
			return
		}
		if len(keys) > 0 {
			if err := look.Del(ctx, keys...).Err(); err != nil {
				problem("del: %v", err)
			}
		}
	}
	// Half the links may be deleted; the others stay, for edits to reach.
	deletable := func(link string) bool { return (link[len(link)-1]-'0')%2 == 1 }
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 27))
			pace, next := minRun/perClient, time.Now()
			for i := range perClient {
				// A pace, not a wait for something to happen: on a slow
				// machine no client is early, and none waits.
				if early := time.Until(next); early > 0 {
					time.Sleep(early)
				} else {
					next = time.Now()
				}
				next = next.Add(pace)
				l := r.IntN(links)
				link := fmt.Sprintf("histlink%02d", l)
				// Reads go to any instance; a link's edits and deletes go
				// to its own (l mod 3), so that the others learn of them
				// only as the service tells them (an instance's own
				// change drops its own entry, whatever else works).
				inst := r.IntN(len(bases))
				writer := l % len(bases)
				token, _ := tokens.Load(link)
				tok, _ := token.(string)
				var in linkhistory.Op
				var method, url, body string
				switch p := r.IntN(1000); {
				case p < 20: // a create: the first of a link's is 201, the rest 409
					in = linkhistory.Op{Link: link, Kind: "create", URL: fmt.Sprintf("https://h.example/%s/c%d-%d", link, c, i), Inst: inst}
					method, url, body = "POST", bases[inst]+"/shorten", fmt.Sprintf(`{"url":%q,"alias":%q}`, in.URL, link)
				case p < 320 && tok != "":
					in = linkhistory.Op{Link: link, Kind: "edit", URL: fmt.Sprintf("https://h.example/%s/e%d-%d", link, c, i), Inst: writer}
					method, url, body = "PATCH", bases[writer]+"/api/links/"+link, fmt.Sprintf(`{"url":%q}`, in.URL)
				case p < 323 && tok != "" && deletable(link): // rare, and half the links only
					in = linkhistory.Op{Link: link, Kind: "delete", Inst: writer}
					method, url = "DELETE", bases[writer]+"/api/links/"+link
				default:
					in = linkhistory.Op{Link: link, Kind: "read", Inst: inst}
					method, url = "GET", bases[inst]+"/"+link
				}
				call := h.Now()
				a, err := do(method, url, body, tok)
				ret := h.Now()
				if err != nil {
					problem("%s %s: %v", method, url, err)
					return
				}
				if in.Kind == "create" && a.Status == http.StatusCreated {
					tokens.Store(link, a.URL)
					a.URL = ""
				}
				if a.Status >= 500 {
					problem("%s %s: %d", method, url, a.Status)
				}
				h.Add(c, in, call, a, ret)
				switch n := done.Add(1); {
				case n == slowFrom:
					proxy.slow(100 * time.Millisecond)
				case n == slowTo:
					proxy.slow(0)
				case n%faultEvery == 0:
					faults.Add(1)
					fault(n / faultEvery)
				}
			}
		})
	}
	wg.Wait()
	close(problems)
	for p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		return
	}

	ops := h.Ops()
	count := map[string]int{}
	for _, o := range ops {
		count[o.Input.(linkhistory.Op).Kind+" "+fmt.Sprint(o.Output.(linkhistory.Answer).Status)]++
	}
	took := time.Since(h.Start())
	bound := historyBoundFor(took, minRun)
	t.Logf("%d operations in %v (%.2f × the pace's %v) on %d links through %d instances by %d clients, %d faults (Redis connections cut, cache emptied, in turn), Redis slow from operation %d to %d; bound %v; %v",
		len(ops), took.Round(time.Millisecond), float64(took)/float64(minRun), minRun, links, len(bases), clients, faults.Load(), slowFrom, slowTo, bound.Round(time.Millisecond), count)
	for i, m := range metrics {
		t.Logf("instance %d: local cache hits %v, misses %v; invalidations sent %v, send failed %v, received %v, dropped %v, late %v; purges %v; probes back %v, within 0.1 s %v, within 1 s %v", i,
			seriesValue(t, m, `shortener_cache_lookups_total{cache="local",result="hit"}`),
			seriesValue(t, m, `shortener_cache_lookups_total{cache="local",result="miss"}`),
			seriesValue(t, m, `shortener_invalidations_total{result="sent"}`),
			seriesValue(t, m, `shortener_invalidations_total{result="send_failed"}`),
			seriesValue(t, m, `shortener_invalidations_total{result="received"}`),
			seriesValue(t, m, `shortener_invalidations_total{result="dropped"}`),
			seriesValue(t, m, `shortener_invalidations_total{result="late"}`),
			seriesValue(t, m, "shortener_invalidation_purges_total"),
			seriesValue(t, m, "shortener_invalidation_lag_seconds_count"),
			seriesValue(t, m, `shortener_invalidation_lag_seconds_bucket{le="0.1"}`),
			seriesValue(t, m, `shortener_invalidation_lag_seconds_bucket{le="1"}`))
	}
	if count["edit 200"] == 0 || count["delete 204"] == 0 || count["read 302"] == 0 {
		t.Fatalf("the history lacks edits, deletes or redirects (%v): it proves little", count)
	}

	// The writes, by porcupine; the reads against them, with the bound.
	if res := writesAllowed(t, ops, false); res != porcupine.Ok {
		t.Errorf("the writes are not linearizable (porcupine: %s)", res)
	}
	if stale := linkhistory.Stale(ops, bound); len(stale) > 0 {
		t.Errorf("%d reads not allowed with a bound of %v, the first: %s", len(stale), bound.Round(time.Millisecond), strings.Join(stale[:min(5, len(stale))], "; "))
	}
	// The least bound the history meets, to the millisecond: how late the
	// latest read on another instance was to see a change (docs/29).
	hi := linkhistory.LeastBound(ops)
	t.Logf("the least bound this history meets: %v", hi.Round(time.Millisecond))

	if t.Failed() {
		return
	}

	// Both checkers can refuse. A read planted after everything, past the
	// bound, answering an edited link's URL from before its last edit, and
	// a deleted link as a redirect; an edit planted after a delete's 204,
	// answered 200.
	//
	// The stale read is planted only on a link whose last edit began after
	// every earlier write of it had ended: of two edits that overlap, either
	// may have committed last, and the URL "before" could be the current
	// one (seen once, at GOMAXPROCS=8 in a CI rehearsal).
	cur, before, deletedAt := map[string]string{}, map[string]string{}, map[string]porcupine.Operation{}
	ordered := map[string]bool{} // the link's last write began after the others ended
	wroteUntil := map[string]int64{}
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	for _, o := range sorted {
		in, out := o.Input.(linkhistory.Op), o.Output.(linkhistory.Answer)
		switch {
		case in.Kind == "create" && out.Status == http.StatusCreated:
			cur[in.Link] = in.URL
		case in.Kind == "edit" && out.Status == http.StatusOK:
			before[in.Link], cur[in.Link] = cur[in.Link], in.URL
		case in.Kind == "delete" && out.Status == http.StatusNoContent:
			deletedAt[in.Link] = o
		case in.Kind == "edit" && out.Status == http.StatusGone, in.Kind == "read", in.Kind == "create" && out.Status == http.StatusConflict:
			continue // changed nothing
		}
		if in.Kind != "read" {
			ordered[in.Link] = o.Call > wroteUntil[in.Link]
			wroteUntil[in.Link] = max(wroteUntil[in.Link], o.Return)
		}
	}
	end := h.Now() + 2*bound.Nanoseconds()
	plant := func(o porcupine.Operation) []porcupine.Operation { return append(slices.Clone(ops), o) }
	planted := 0
	for link, old := range before {
		if _, gone := deletedAt[link]; gone || old == "" || !ordered[link] || planted > 0 {
			continue
		}
		stale := porcupine.Operation{ClientId: clients, Input: linkhistory.Op{Link: link, Kind: "read"}, Call: end,
			Output: linkhistory.Answer{Status: http.StatusFound, URL: old}, Return: end + 1}
		if got := linkhistory.Stale(plant(stale), bound); len(got) != 1 {
			t.Errorf("a planted read of %s's URL before its last edit: %d refused, want 1 (%v)", link, len(got), got)
		}
		fresh := stale
		fresh.Output = linkhistory.Answer{Status: http.StatusFound, URL: cur[link]}
		if got := linkhistory.Stale(plant(fresh), bound); len(got) != 0 {
			t.Errorf("a read of %s's URL now: refused (%v), want allowed", link, got)
		}
		planted++
	}
	for link, d := range deletedAt {
		if planted > 1 {
			break
		}
		served := porcupine.Operation{ClientId: clients, Input: linkhistory.Op{Link: link, Kind: "read", Inst: d.Input.(linkhistory.Op).Inst},
			Call: d.Return + 1, Output: linkhistory.Answer{Status: http.StatusFound, URL: cur[link]}, Return: d.Return + 2}
		if got := linkhistory.Stale(plant(served), bound); len(got) != 1 {
			t.Errorf("a planted redirect of %s by the instance that deleted it, after the 204: %d refused, want 1", link, len(got))
		}
		edit := porcupine.Operation{ClientId: clients, Input: linkhistory.Op{Link: link, Kind: "edit", URL: "https://h.example/after-delete"},
			Call: end, Output: linkhistory.Answer{Status: http.StatusOK}, Return: end + 1}
		if res := writesAllowed(t, plant(edit), true); res != porcupine.Illegal {
			t.Errorf("an edit of %s answered 200 after its delete's 204: porcupine says %s, want it refused", link, res)
		}
		planted++
	}
	if planted < 2 {
		t.Errorf("planted %d of 2 (no edited link left undeleted, or no delete): the checkers were not shown to refuse", planted)
	}
}
