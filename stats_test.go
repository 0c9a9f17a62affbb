package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axiomhq/hyperloglog"
)

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		agent string
		want  agentClass
	}{
		{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", agentBrowser},
		{"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", agentBrowser},
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0", agentBrowser},
		{"facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", agentPreview},
		{"Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", agentPreview},
		{"Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)", agentPreview},
		{"WhatsApp/2.23.20.0", agentPreview},
		{"TelegramBot (like TwitterBot)", agentPreview},
		{"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", agentCrawler},
		{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36", agentCrawler},
		{"curl/8.5.0", agentTool},
		{"python-requests/2.32.3", agentTool},
		{"Go-http-client/1.1", agentTool},
		{"hey/0.0.1", agentTool},
		{"", agentOther},
		{"SomethingElse/1.0", agentOther},
		// The marker is past what is read: a kilobyte of padding first.
		{"Mozilla/5.0 " + strings.Repeat("x", 1024) + " Googlebot", agentBrowser},
	} {
		if got := classify(tt.agent); got != tt.want {
			t.Errorf("classify(%.60q) = %v, want %v", tt.agent, got, tt.want)
		}
	}
}

func TestReferrerHost(t *testing.T) {
	for _, tt := range []struct{ referer, want string }{
		{"", refNone},
		{"https://news.ycombinator.com/item?id=1", "news.ycombinator.com"},
		{"https://WWW.Example.COM:8443/a/b?session=secret", "www.example.com"},
		{"http://[2001:db8::1]:80/", "2001:db8::1"},
		{"android-app://com.slack/", "com.slack"},
		{"not a url", refOther},
		{"/relative/path", refOther},
		{"https://exa mple.com/", refOther},
		{"https://" + strings.Repeat("a", 300) + ".com/", refOther},
		{"https://ex\"ample.com/", refOther},
	} {
		if got := referrerHost(tt.referer); got != tt.want {
			t.Errorf("referrerHost(%.60q) = %q, want %q", tt.referer, got, tt.want)
		}
	}
}

func TestTopReferrers(t *testing.T) {
	m := map[string]int64{"a.com": 5, "b.com": 9, "c.com": 5, "d.com": 1, refOther: 2}
	got := topReferrers(m, 3)
	want := map[string]int64{"b.com": 9, "a.com": 5, refOther: 8} // c.com 5 + d.com 1 + 2
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("topReferrers = %v, want %v", got, want)
	}
	small := map[string]int64{"a.com": 1}
	if got := topReferrers(small, 3); fmt.Sprint(got) != fmt.Sprint(small) {
		t.Errorf("topReferrers of fewer than n = %v, want it unchanged", got)
	}
}

// addr is the i-th of a run of distinct addresses: IPv4 for even i, IPv6
// for odd, so that both kinds are hashed.
func addr(i int) netip.Addr {
	if i%2 == 0 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(0x0a000000+i))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	b[0], b[1] = 0x20, 0x01
	binary.BigEndian.PutUint64(b[8:], uint64(i))
	return netip.AddrFrom16(b)
}

// TestUniquesError measures the sketch's estimate against the exact
// count of distinct visitors, each seen three times, hashed as the
// worker hashes them. The bound is four standard errors (4 × 0.81%) for
// the dense sketch; while sparse (up to some thousands of visitors) it is
// far closer. Run with -v, it prints the errors the doc quotes.
func TestUniquesError(t *testing.T) {
	key := make([]byte, 32)
	copy(key, "a key for the test, 32 bytes....")
	h := newVisitorHasher(key)
	sizes := []int{10, 100, 1_000, 10_000, 100_000, 1_000_000}
	if testing.Short() {
		sizes = sizes[:5]
	}
	for _, n := range sizes {
		sk := newSketch()
		for range 3 {
			for i := range n {
				sk.InsertHash(h.hash("abcdefg", addr(i))) // the same n visitors, three times
			}
		}
		b, err := sk.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		est := sk.Estimate()
		rel := (float64(est) - float64(n)) / float64(n)
		t.Logf("visitors %9d  estimate %9d  error %+.3f%%  sketch %6d bytes", n, est, rel*100, len(b))
		bound := 4 * 1.04 / math.Sqrt(1<<hllPrecision)
		if n < 10_000 {
			bound = 0.01
		}
		if math.Abs(rel) > bound {
			t.Errorf("%d visitors: estimate %d, error %.2f%%, want within %.2f%%", n, est, rel*100, bound*100)
		}
	}
}

// TestVisitorKeyHides: the same address hashes alike for one link on one
// day, and differently for another link, or another day.
func TestVisitorKeyHides(t *testing.T) {
	day1, day2 := make([]byte, 32), make([]byte, 32)
	day2[0] = 1
	a := netip.MustParseAddr("203.0.113.7")
	hash := func(dayKey []byte, code string) uint64 { return newVisitorHasher(dayKey).hash(code, a) }
	if first, again := hash(day1, "abcdefg"), hash(day1, "abcdefg"); first != again {
		t.Error("one address, one link, one day: two hashes")
	}
	if hash(day1, "abcdefg") == hash(day1, "bcdefgh") {
		t.Error("one address on two links: the same hash, so links' visitors could be matched")
	}
	if hash(day1, "abcdefg") == hash(day2, "abcdefg") {
		t.Error("one address under two days' keys: the same hash, so days could be linked")
	}
}

func TestParseStatsQuery(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 42, 0, 0, time.UTC)
	for _, tt := range []struct {
		query, by, from, to, err string
	}{
		{"", "hour", "2026-11-30T16:00:00Z", "2026-12-01T16:00:00Z", ""},
		{"by=day", "day", "2026-11-02T00:00:00Z", "2026-12-02T00:00:00Z", ""},
		{"by=day&from=2026-11-03T10:00:00%2B02:00&to=2026-11-05T00:00:00Z", "day", "2026-11-03T00:00:00Z", "2026-11-05T00:00:00Z", ""},
		{"from=2026-12-01T10:30:00Z&to=2026-12-01T12:00:01Z", "hour", "2026-12-01T10:00:00Z", "2026-12-01T13:00:00Z", ""},
		{"by=week", "", "", "", `by="week": want hour or day`},
		{"from=yesterday", "", "", "", `from="yesterday": want an RFC 3339 time`},
		{"from=2026-12-01T10:00:00Z&to=2026-12-01T10:00:00Z", "", "", "", "from must come before to"},
		{"from=2026-12-02T00:00:00Z", "", "", "", "from must come before to"},
		{"from=2025-01-01T00:00:00Z", "", "", "", "at most 1000 points"},
		{"from=0001-01-01T00:00:00Z", "", "", "", "want a year from 2000 to 9000"},
		{"by=day&by=hour", "", "", "", "by given more than once"},
		{"code=abc", "", "", "", `unknown parameter "code"`},
	} {
		v, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		q, err := parseStatsQuery(v, now)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err %v, want one saying %q", tt.query, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.query, err)
			continue
		}
		got := fmt.Sprintf("%s %s %s", q.by, q.from.Format(time.RFC3339), q.to.Format(time.RFC3339))
		if want := tt.by + " " + tt.from + " " + tt.to; got != want {
			t.Errorf("%q: got %s, want %s", tt.query, got, want)
		}
	}
}

// openTestStats returns a statsStore on a fresh database, with its clock.
func openTestStats(t *testing.T) (*pgStore, *statsStore, *linkClock) {
	t.Helper()
	pg := openTestStore(t)
	clock := &linkClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	cfg := defaultConfig()
	cfg.pool = testPool
	cfg.now = clock.now
	s := newStatsStore(pg.db, cfg, discardLog)
	if err := s.maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pg, s, clock
}

const browserAgent = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"

// TestStatsWriteAndRead: clicks over two hours of one day and one hour of
// the next, from browsers and bots, with and without a Referer, read back
// by hour and by day, to the click.
func TestStatsWriteAndRead(t *testing.T) {
	pg, s, _ := openTestStats(t)
	ctx := context.Background()
	if err := pg.Save(ctx, "stats01", NewLink{URL: "https://example.com/"}); err != nil {
		t.Fatal(err)
	}
	d1 := time.Date(2026, 12, 1, 10, 5, 0, 0, time.UTC)
	var batch []click
	add := func(n int, at time.Time, firstAddr int, agent, referer string) {
		for i := range n {
			batch = append(batch, click{code: "stats01", at: at, client: addr(firstAddr + i%7), agent: agent, referer: referer})
		}
	}
	add(20, d1, 0, browserAgent, "https://news.example.org/x")        // 7 visitors
	add(10, d1.Add(time.Hour), 100, browserAgent, "")                 // 7 more
	add(5, d1.Add(time.Hour), 0, "Slackbot-LinkExpanding 1.0", "")    // bots: not visitors
	add(3, d1.Add(24*time.Hour), 0, browserAgent, "https://t.co/abc") // the next day: 3 visitors
	add(2, d1.Add(24*time.Hour), 0, "curl/8.5.0", "https://t.co/abc") // tools are bots
	if err := s.writeNow(ctx, batch[:17]); err != nil {               // two batches, split mid-hour
		t.Fatal(err)
	}
	if err := s.writeNow(ctx, batch[17:]); err != nil {
		t.Fatal(err)
	}

	hours, err := s.points(ctx, "stats01", "hour", d1.Truncate(time.Hour), d1.Truncate(time.Hour).Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range hours {
		got = append(got, fmt.Sprintf("%s %d/%d %v", p.Time.Format("15h"), p.Clicks, p.Bots, p.Uniques))
	}
	if want := "10h 20/0 <nil>, 11h 10/5 <nil>, 12h 0/0 <nil>"; strings.Join(got, ", ") != want {
		t.Errorf("hours: %s, want %s", strings.Join(got, ", "), want)
	}

	days, err := s.points(ctx, "stats01", "day", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, p := range days {
		ref, _ := json.Marshal(p.Referrers)
		ag, _ := json.Marshal(p.Agents)
		got = append(got, fmt.Sprintf("%s %d/%d u%d %s %s", p.Time.Format("Jan 2"), p.Clicks, p.Bots, *p.Uniques, ref, ag))
	}
	want := []string{
		`Dec 1 30/5 u14 {"(none)":10,"news.example.org":20} {"browser":30,"preview":5}`,
		`Dec 2 3/2 u3 {"t.co":3} {"browser":3,"tool":2}`,
		`Dec 3 0/0 u0 {} {}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("days:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	l, err := pg.Link(ctx, "stats01")
	if err != nil {
		t.Fatal(err)
	}
	if l.Clicks != int64(len(batch)) {
		t.Errorf("link's clicks = %d, want every click, bots too: %d", l.Clicks, len(batch))
	}
}

// TestStatsCountedClicksNotTwice: a click of a link with max_clicks is
// counted on the request's path; its stats come through the queue, and
// its total is not added again.
func TestStatsCountedClicksNotTwice(t *testing.T) {
	pg, s, clock := openTestStats(t)
	ctx := context.Background()
	if err := pg.Save(ctx, "limit01", NewLink{URL: "https://example.com/", MaxClicks: 5}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		left, err := pg.TakeClick(ctx, "limit01", true)
		if err != nil || !left {
			t.Fatalf("TakeClick = %v, %v", left, err)
		}
		if err := s.writeNow(ctx, []click{{code: "limit01", at: clock.now(), client: addr(1), agent: browserAgent, counted: true}}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := pg.Link(ctx, "limit01")
	if err != nil {
		t.Fatal(err)
	}
	if l.Clicks != 2 {
		t.Errorf("clicks = %d, want 2", l.Clicks)
	}
	days, err := s.points(ctx, "limit01", "day", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if days[0].Clicks != 2 || *days[0].Uniques != 1 {
		t.Errorf("day: %d clicks, %d uniques, want 2 and 1", days[0].Clicks, *days[0].Uniques)
	}
}

// TestStatsWritersAddUp: two instances write the same link's day at once,
// in many small batches, over visitors that overlap: no click is lost to
// a race on the day's row, and the uniques are the union.
func TestStatsWritersAddUp(t *testing.T) {
	pg, a, clock := openTestStats(t)
	b := newStatsStore(pg.db, a.cfgLike(), discardLog)
	ctx := context.Background()
	if err := pg.Save(ctx, "share01", NewLink{URL: "https://example.com/"}); err != nil {
		t.Fatal(err)
	}
	const batches, per = 40, 25
	var wg sync.WaitGroup
	for w, s := range []*statsStore{a, b} {
		wg.Go(func() {
			for i := range batches {
				var batch []click
				for j := range per {
					// Instance 0 sees visitors 0–599, instance 1 300–899.
					v := w*300 + (i*per+j)%600
					batch = append(batch, click{code: "share01", at: clock.now(), client: addr(v), agent: browserAgent,
						referer: fmt.Sprintf("https://site%d.example/", v%3)})
				}
				if err := s.writeNow(ctx, batch); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	days, err := a.points(ctx, "share01", "day", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(2 * batches * per); days[0].Clicks != want {
		t.Errorf("clicks %d, want %d", days[0].Clicks, want)
	}
	if u := *days[0].Uniques; u < 895 || u > 905 {
		t.Errorf("uniques %d, want 900 (±5)", u)
	}
	var refs int64
	for _, n := range days[0].Referrers {
		refs += n
	}
	if refs != 2*batches*per {
		t.Errorf("referrers add up to %d, want %d", refs, 2*batches*per)
	}
}

// writeNow writes clicks and flushes their stats at once.
func (s *statsStore) writeNow(ctx context.Context, clicks []click) error {
	if err := s.write(ctx, clicks); err != nil {
		return err
	}
	return s.flush(ctx)
}

// cfgLike is a config that makes a statsStore like s: a second instance.
func (s *statsStore) cfgLike() config {
	cfg := defaultConfig()
	cfg.pool = testPool
	cfg.now = s.now
	cfg.stats.top = s.top
	cfg.stats.keep = s.keep
	return cfg
}

// TestStatsBadStoredValues: a day row whose sketch or maps do not decode
// (what Postgres holds is input too) costs that row's uniques or
// referrers, not the batch.
func TestStatsBadStoredValues(t *testing.T) {
	pg, s, clock := openTestStats(t)
	logs := &syncBuffer{}
	s.warnings = &sampledLog{log: slog.New(slog.NewTextHandler(logs, nil)), every: time.Nanosecond}
	ctx := context.Background()
	if err := pg.Save(ctx, "badrow1", NewLink{URL: "https://example.com/"}); err != nil {
		t.Fatal(err)
	}
	c := click{code: "badrow1", at: clock.now(), client: addr(1), agent: browserAgent, referer: "https://a.example/"}
	if err := s.writeNow(ctx, []click{c}); err != nil {
		t.Fatal(err)
	}
	// A sketch of another precision decodes, and does not merge.
	other, err := hyperloglog.NewSketch(10, true)
	if err != nil {
		t.Fatal(err)
	}
	other.InsertHash(12345)
	otherBytes, err := other.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for i, bad := range []struct {
		set  string
		args []any
	}{
		{`uniques = '\x0201', referrers = '{"a.example": -4}', people = -3`, nil},
		{`uniques = $1, agents = '[1, 2]'`, []any{otherBytes}},
	} {
		if _, err := pg.db.ExecContext(ctx, `UPDATE click_days SET `+bad.set+` WHERE code = 'badrow1'`, bad.args...); err != nil {
			t.Fatal(err)
		}
		c.client = addr(2 + i)
		if err := s.writeNow(ctx, []click{c}); err != nil {
			t.Fatalf("a batch over a bad row: %v", err)
		}
		days, err := s.points(ctx, "badrow1", "day", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{1, 2}[i]; days[0].Clicks != want || *days[0].Uniques != 1 || days[0].Referrers["a.example"] != want {
			t.Errorf("day after bad row %d: %+v (uniques %d), want %d clicks, 1 unique (started again) and %d referrers",
				i, days[0], *days[0].Uniques, want, want)
		}
	}
	if n := s.statsLost.Load(); n != 0 {
		t.Errorf("%d clicks' stats lost over bad rows, want 0", n)
	}
	for _, want := range []string{"sketch does not decode", "referrers hold a bad entry", "counts are negative", "sketch does not merge", "agents do not decode"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs)
		}
	}
}

// TestStatsLostNotTotals: when the stats cannot be written, the clicks'
// totals still are, and the stats' loss is counted; a flush's hours and
// days are written together or not at all.
func TestStatsLostNotTotals(t *testing.T) {
	pg, s, clock := openTestStats(t)
	ctx := context.Background()
	if err := pg.Save(ctx, "lost001", NewLink{URL: "https://example.com/"}); err != nil {
		t.Fatal(err)
	}
	c := click{code: "lost001", at: clock.now(), client: addr(1), agent: browserAgent}
	if err := s.writeNow(ctx, []click{c}); err != nil {
		t.Fatal(err)
	}
	// This month's day partition gone behind the store's back: the next
	// batch's days cannot be written.
	if _, err := pg.db.ExecContext(ctx, `DROP TABLE click_days_2026_12`); err != nil {
		t.Fatal(err)
	}
	if err := s.write(ctx, []click{c, c}); err != nil {
		t.Fatalf("a batch whose stats will fail: %v, want its totals written", err)
	}
	if err := s.flush(ctx); err == nil {
		t.Fatal("a flush into a dropped partition: no error")
	}
	l, err := pg.Link(ctx, "lost001")
	if err != nil {
		t.Fatal(err)
	}
	if l.Clicks != 3 || s.statsLost.Load() != 2 {
		t.Errorf("clicks %d, stats lost %d; want 3 and 2", l.Clicks, s.statsLost.Load())
	}
	hours, err := s.points(ctx, "lost001", "hour", clock.now().Truncate(time.Hour), clock.now().Truncate(time.Hour).Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if hours[0].Clicks != 1 {
		t.Errorf("the hour holds %d clicks, want 1: the failed flush's hours rolled back with its days", hours[0].Clicks)
	}
	// The next batch makes the partition again, and its stats are written.
	if err := s.writeNow(ctx, []click{c}); err != nil {
		t.Fatal(err)
	}
	days, err := s.points(ctx, "lost001", "day", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if days[0].Clicks != 1 || s.statsLost.Load() != 2 {
		t.Errorf("after the partition was made again: %d clicks in the day, %d lost; want 1 and 2", days[0].Clicks, s.statsLost.Load())
	}
}

// TestStatsRetention: maintain makes this month's partitions and the
// next's, drops a month once all of it is past its retention, and
// deletes the visitor keys of days gone.
func TestStatsRetention(t *testing.T) {
	pg, s, clock := openTestStats(t)
	ctx := context.Background()
	partitions := func(table string) string {
		t.Helper()
		rows, err := pg.db.QueryContext(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass ORDER BY 1`, table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, strings.TrimPrefix(n, table+"_"))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(names, " ")
	}
	if got := partitions("click_hours"); got != "2026_12 2027_01" {
		t.Errorf("hour partitions at start: %s, want 2026_12 2027_01", got)
	}
	if err := pg.Save(ctx, "keep001", NewLink{URL: "https://example.com/"}); err != nil {
		t.Fatal(err)
	}
	if err := s.writeNow(ctx, []click{{code: "keep001", at: clock.now(), client: addr(1), agent: browserAgent}}); err != nil {
		t.Fatal(err)
	}
	// Three months kept before the current one (STATS_HOURS_KEEP=3): in
	// March 2027, December is still kept; in April it goes.
	clock.set(time.Date(2027, 3, 31, 23, 0, 0, 0, time.UTC))
	if err := s.maintain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := partitions("click_hours"); !strings.HasPrefix(got, "2026_12 ") {
		t.Errorf("hour partitions in March: %s, want December still there", got)
	}
	clock.set(time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC))
	if err := s.maintain(ctx); err != nil {
		t.Fatal(err)
	}
	// (February's were never made: no click came, and maintain makes
	// only this month's and the next.)
	if got := partitions("click_hours"); got != "2027_01 2027_03 2027_04 2027_05" {
		t.Errorf("hour partitions in April: %s, want December gone", got)
	}
	if got := partitions("click_days"); !strings.HasPrefix(got, "2026_12 ") {
		t.Errorf("day partitions in April: %s, want December kept (25 months)", got)
	}
	// A click in a month whose partitions were dropped, by this instance
	// or another, is written: they are made again. It is counted, but
	// not among the uniques: its day's key is gone, and a new one would
	// count its visitors twice.
	other := newStatsStore(pg.db, s.cfgLike(), discardLog) // another instance, whose cache knew nothing of the drop
	for _, st := range []*statsStore{s, other} {
		if err := st.writeNow(ctx, []click{{code: "keep001", at: time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC), client: addr(1), agent: browserAgent}}); err != nil {
			t.Errorf("a late click in a dropped month: %v", err)
		}
	}
	if n := s.statsLost.Load() + other.statsLost.Load(); n != 0 {
		t.Errorf("%d clicks' stats lost, want 0", n)
	}
	days, err := s.points(ctx, "keep001", "day", time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if days[0].Clicks != 2 || *days[0].Uniques != 0 {
		t.Errorf("late clicks: %d clicks, %d uniques; want 2 and 0", days[0].Clicks, *days[0].Uniques)
	}
	var keys int
	if err := pg.db.QueryRowContext(ctx, `SELECT count(*) FROM stats_keys WHERE day < '2027-03-31'`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 0 {
		t.Errorf("%d visitor keys of days gone, want 0", keys)
	}
}

// TestStatsEndToEnd: run() with Postgres, a link followed by browsers and
// bots from several addresses through a trusted proxy, and its stats read
// as a client would; bad queries are 400s, an unknown code 404.
func TestStatsEndToEnd(t *testing.T) {
	base, _, _ := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t),
		"TRUSTED_PROXIES": "127.0.0.1", "CLICK_FLUSH": "10ms", "STATS_FLUSH": "10ms", "CREATE_RATE": "0"})
	code := shorten(t, base, "https://go.dev/stats")
	follow := func(from, agent, referer string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/"+code, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", from)
		req.Header.Set("User-Agent", agent)
		if referer != "" {
			req.Header.Set("Referer", referer)
		}
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("GET /%s: %d, want 302", code, resp.StatusCode)
		}
	}
	for i := range 6 {
		follow(fmt.Sprintf("198.51.100.%d", i%3), browserAgent, "https://mail.example.com/inbox?id=42")
	}
	follow("198.51.100.9", "facebookexternalhit/1.1", "")
	type point struct {
		Clicks, Bots int64
		Uniques      *int64
		Referrers    map[string]int64
		Agents       map[string]int64
	}
	var got struct {
		Code   string
		By     string
		Points []point
	}
	get := func(query string) int {
		t.Helper()
		resp, err := http.Get(base + "/api/links/" + code + "/stats" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	// The clicks reach Postgres within CLICK_FLUSH; waited on, not slept.
	// (The last two days: the clicks may have straddled midnight, UTC.)
	sum := func() int64 {
		var n int64
		for _, p := range got.Points[len(got.Points)-2:] {
			n += p.Clicks + p.Bots
		}
		return n
	}
	waitUntil(t, "the clicks in the stats", func() bool {
		return get("?by=day") == http.StatusOK && len(got.Points) == 30 && sum() == 7
	})
	// Two days' points added up; uniques only when one day holds them all
	// (a visitor on both sides of midnight counts on each).
	var today point
	today.Referrers, today.Agents = map[string]int64{}, map[string]int64{}
	for _, p := range got.Points[28:] {
		today.Clicks += p.Clicks
		today.Bots += p.Bots
		today.Referrers["mail.example.com"] += p.Referrers["mail.example.com"]
		today.Agents["preview"] += p.Agents["preview"]
		if p.Clicks+p.Bots == 7 {
			today.Uniques = p.Uniques
		}
	}
	straddled := today.Uniques == nil
	if today.Clicks != 6 || today.Bots != 1 || (!straddled && *today.Uniques != 3) ||
		today.Referrers["mail.example.com"] != 6 || today.Agents["preview"] != 1 || got.By != "day" {
		t.Errorf("today's point: %+v (uniques %v), want 6 clicks, 1 bot, 3 uniques, 6 from mail.example.com, 1 preview",
			today, today.Uniques)
	}
	// By hour: the last two hours, in case the clicks straddled one.
	if get("") != http.StatusOK || len(got.Points) != 24 || got.Points[22].Clicks+got.Points[23].Clicks != 6 || got.Points[23].Uniques != nil {
		t.Errorf("by hour: %d points, last %+v; want 24, the last two with 6 clicks and no uniques", len(got.Points), got.Points[len(got.Points)-1])
	}
	for _, q := range []string{"?by=month", "?from=now", "?from=2026-12-01T00:00:00Z&to=2026-11-01T00:00:00Z", "?from=%zz", "?by=day;from=x"} {
		if status := get(q); status != http.StatusBadRequest {
			t.Errorf("stats%s: %d, want 400", q, status)
		}
	}
	resp, err := http.Get(base + "/api/links/nosuch1/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("stats of an unknown code: %d, want 404", resp.StatusCode)
	}
}

// TestStatsOff: without Postgres (or with STATS=off), stats are a 501
// that says why, and redirects work as before.
func TestStatsOff(t *testing.T) {
	for _, env := range []map[string]string{
		{"ADDR": "127.0.0.1:0"},
		{"ADDR": "127.0.0.1:0", "DATABASE_URL": testDatabase(t), "STATS": "off"},
	} {
		base, _, _ := startRun(t, env)
		code := shorten(t, base, "https://go.dev/off")
		redirectTo(t, base, code, "https://go.dev/off")
		resp, err := http.Get(base + "/api/links/" + code + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(e.Error, "stats are off") {
			t.Errorf("stats with %v: %d %q, want 501 saying stats are off", env["STATS"], resp.StatusCode, e.Error)
		}
	}
}

// TestVisitorHashAllocatesNothing: hashing a visitor, once per click, costs
// no allocation.
func TestVisitorHashAllocatesNothing(t *testing.T) {
	h := newVisitorHasher(make([]byte, 32))
	a := netip.MustParseAddr("2001:db8::7")
	if n := testing.AllocsPerRun(1000, func() { h.hash("abcdefg", a) }); n != 0 {
		t.Errorf("%v allocations per hash, want 0", n)
	}
}

// TestStatsPendingBounded: the stats held between flushes ask for a flush
// at maxPending rows, and past four times that are counted lost, not
// held: memory stays bounded when the flushes cannot keep up.
func TestStatsPendingBounded(t *testing.T) {
	_, s, clock := openTestStats(t)
	s.maxPending = 1
	ctx := context.Background()
	batch := func(codes ...string) []click {
		var b []click
		for _, c := range codes {
			b = append(b, click{code: c, at: clock.now(), client: addr(1), agent: browserAgent})
		}
		return b
	}
	if err := s.write(ctx, batch("bound01", "bound02")); err != nil { // 2 link-hours, 2 link-days
		t.Fatal(err)
	}
	select {
	case <-s.flushNow:
	default:
		t.Error("no flush asked for at maxPending rows")
	}
	if err := s.write(ctx, batch("bound03", "bound04", "bound05")); err != nil { // 4 held: past 4 × 1
		t.Fatal(err)
	}
	if got := s.statsLost.Load(); got != 3 {
		t.Errorf("stats lost %d, want the second batch's 3", got)
	}
	if got := s.pending.rows(); got != 4 {
		t.Errorf("%d rows pending, want the first batch's 4", got)
	}
}

// TestStatsWrittenAtShutdown: stats still pending when the service stops
// (STATS_FLUSH far off) are written by the shutdown, after the click
// queue's drain.
func TestStatsWrittenAtShutdown(t *testing.T) {
	db := testDatabase(t)
	base, stop, _ := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": db, "STATS_FLUSH": "10m", "CLICK_FLUSH": "1m"})
	code := shorten(t, base, "https://go.dev/shutdown")
	for range 3 {
		redirectTo(t, base, code, "https://go.dev/shutdown")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	conn, err := sql.Open("postgres", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hours, days int64
	if err := conn.QueryRow(`SELECT (SELECT coalesce(sum(people + bots), 0) FROM click_hours WHERE code = $1),
		(SELECT coalesce(sum(people + bots), 0) FROM click_days WHERE code = $1)`, code).Scan(&hours, &days); err != nil {
		t.Fatal(err)
	}
	if hours != 3 || days != 3 {
		t.Errorf("after shutdown: %d clicks in the hours, %d in the days; want 3 each", hours, days)
	}
}

// TestNameCache: the cache answers as classify and referrerHost do, and
// stays bounded however many different strings come.
func TestNameCache(t *testing.T) {
	n := newNameCache()
	for i := range 3 * nameCacheSize {
		agent := fmt.Sprintf("Mozilla/5.0 build %d", i)
		if i%3 == 0 {
			agent = fmt.Sprintf("curl/%d", i)
		}
		referer := fmt.Sprintf("https://site%d.example/", i)
		if got, want := n.class(agent), classify(agent); got != want {
			t.Fatalf("class(%q) = %v, want %v", agent, got, want)
		}
		if got, want := n.referrer(referer), referrerHost(referer); got != want {
			t.Fatalf("referrer(%q) = %q, want %q", referer, got, want)
		}
		if len(n.agents) > nameCacheSize || len(n.referrers) > nameCacheSize {
			t.Fatalf("cache holds %d agents and %d referrers, want at most %d", len(n.agents), len(n.referrers), nameCacheSize)
		}
	}
	if got := n.class("Mozilla/5.0 build 1"); got != agentBrowser {
		t.Errorf("a cached agent again: %v", got)
	}
}

// TestStatsFlushInChunks: a flush of more links than a transaction takes
// writes them all, over several transactions.
func TestStatsFlushInChunks(t *testing.T) {
	pg, s, clock := openTestStats(t)
	ctx := context.Background()
	const links = 2*statsChunk + 500
	var batch []click
	for i := range links {
		batch = append(batch, click{code: fmt.Sprintf("c%06d", i), at: clock.now(), client: addr(i), agent: browserAgent})
	}
	if err := s.writeNow(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var rows, people, hours int64
	if err := pg.db.QueryRowContext(ctx, `SELECT count(*), sum(people), (SELECT sum(people) FROM click_hours) FROM click_days`).Scan(&rows, &people, &hours); err != nil {
		t.Fatal(err)
	}
	if rows != links || people != links || hours != links {
		t.Errorf("%d link-days holding %d clicks, %d in the hours; want %d of each", rows, people, hours, links)
	}
}
