package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds the browser the page is tested in: CHROMIUM if set, else
// chromium (Debian's package) on the PATH. Missing, the test is skipped,
// unless CI is set: CI must run the browser test too.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not on the PATH, and CI must run the browser test (apt-get install -y chromium)")
	}
	t.Skip("chromium is not on the PATH; skipping the browser test (apt-get install -y chromium, or set CHROMIUM)")
	return ""
}

// A person's browser, as far as the stats can tell (stats.go classify):
// headless Chromium's own User-Agent says HeadlessChrome, a bot.
const chromeAgent = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

// newBrowser starts headless Chromium and returns a context to drive it
// with. Names under .example are resolved to 127.0.0.1 by Chromium itself
// (host-resolver-rules): the app refuses links to loopback addresses, and
// a second site is needed to post from. Every console message (an
// exception a page throws; a script or style the CSP refused; a failed
// load) is collected; problems returns those that are errors.
func newBrowser(t *testing.T) (ctx context.Context, problems func() []chromedp.ConsoleMessage) {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root here, and Chromium's sandbox refuses root
		chromedp.UserAgent(chromeAgent),
		chromedp.Flag("host-resolver-rules", "MAP *.example 127.0.0.1"),
	)
	// Generous: Chromium's start and every step below take well under a
	// second here, and CI may be four times slower.
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 2*time.Minute)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	var mu sync.Mutex
	var seen []chromedp.ConsoleMessage
	messages := chromedp.Console(ctx) // starts the browser, and listens from now on
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return // the context ended: the test is over
			}
			mu.Lock()
			seen = append(seen, m)
			mu.Unlock()
		}
	}()
	// Chromium leaves folders of its own (org.chromium.Chromium.*) in
	// the temporary folder; those that appear while it runs are its, and
	// go once it has exited (cancelAlloc waits for that).
	pattern := filepath.Join(os.TempDir(), "org.chromium.Chromium.*")
	before, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Closed, not killed: a killed Chromium leaves its folder.
		if err := chromedp.Cancel(ctx); err != nil {
			t.Errorf("close the browser: %v", err)
		}
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
		<-done
		after, err := filepath.Glob(pattern)
		if err != nil {
			t.Error(err)
		}
		for _, d := range after {
			if !slices.Contains(before, d) {
				if err := os.RemoveAll(d); err != nil {
					t.Errorf("remove Chromium's %s: %v", d, err)
				}
			}
		}
	})
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx, func() []chromedp.ConsoleMessage {
		mu.Lock()
		defer mu.Unlock()
		var errs []chromedp.ConsoleMessage
		for _, m := range seen {
			if m.Type == chromedp.ConsoleError || m.IsException() {
				errs = append(errs, m)
			}
		}
		return errs
	}
}

// servePage serves html at / of a server on 127.0.0.1, and returns its
// port: Chromium reaches it as http://NAME.example:PORT/.
func servePage(t *testing.T, html string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, html)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestBrowserShortenFollowStats is what a person does, in a real browser:
// shorten a link on the page, click the short link, land on the target,
// and see the click on the link's stats page.
func TestBrowserShortenFollowStats(t *testing.T) {
	dsn := testDatabase(t)
	ctx, problems := newBrowser(t)
	// CREATE_RATE=0: the page's stats reads count against the allowance,
	// and the test reads them until the click shows, however long that
	// takes on a slow machine.
	base, _, _ := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": dsn,
		"CLICK_FLUSH": "10ms", "STATS_FLUSH": "10ms", "CREATE_RATE": "0"})
	target := "http://target.example:" + servePage(t, "<!doctype html><title>landed</title><p>the target") + "/landed?from=page"

	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#url")),
		chromedp.SendKeys(chromedp.CSS("#url"), target),
		chromedp.Click(chromedp.CSS("button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#result")),
	); err != nil {
		t.Fatalf("shorten on the page: %v", err)
	}
	shortURL := text(t, ctx, "#short")
	token := text(t, ctx, "#token")
	statsHref, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#stats"), "href"))
	if err != nil {
		t.Fatal(err)
	}
	code := strings.TrimPrefix(shortURL, base+"/")
	if code == shortURL || !validCode(code) {
		t.Fatalf("the page shows %q as the short link, want %s/CODE", shortURL, base)
	}
	if statsHref.Value != "/stats/"+code || len(token) < 40 {
		t.Fatalf("stats link %q, token %q: want /stats/%s and a token", statsHref.Value, token, code)
	}

	// Follow it as a person does: a click on the short link. The target's
	// title is the proof that the navigation finished.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#short")),
		chromedp.WaitReady(chromedp.Search(`//title[text()="landed"]`)),
	); err != nil {
		t.Fatalf("follow the short link: %v", err)
	}
	if landed, err := chromedp.Run(ctx, chromedp.Location()); err != nil || landed != target {
		t.Fatalf("the short link led to %q (%v), want %q", landed, err, target)
	}

	// The stats page: refreshed (its Refresh button) until the click has
	// been written, which takes CLICK_FLUSH + STATS_FLUSH. Each refresh
	// waits for the page to say its load has finished (data-loads).
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/stats/"+code), chromedp.WaitVisible(chromedp.CSS("#link"))); err != nil {
		t.Fatalf("open the stats page: %v", err)
	}
	waitUntil(t, "the click on the stats page", func() bool {
		loads, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.loads`))
		if err != nil {
			t.Fatalf("read the page's loads: %v", err)
		}
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS("#refresh")),
			chromedp.Poll[chromedp.Void](`document.body.dataset.loads !== `+strconv.Quote(loads), chromedp.WithPollingTimeout(time.Minute)),
		); err != nil {
			t.Fatalf("refresh the stats page: %v", err)
		}
		return strings.HasPrefix(text(t, ctx, "#caption"), "1 clicks by people")
	})
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart rect.people").length`))
	if err != nil {
		t.Fatal(err)
	}
	if total, shown := text(t, ctx, "#total"), text(t, ctx, "#target"); total != "1" || bars != 1 || shown != target {
		t.Fatalf("stats page: total %q, %d bars of people, target %q; want 1, 1, %q", total, bars, shown, target)
	}
	// The click came from the page: Referrer-Policy same-origin keeps the
	// referrer for the short link, of the page's own origin.
	if referrers := text(t, ctx, "#referrers"); !strings.Contains(referrers, "127.0.0.1") {
		t.Fatalf("referrers on the stats page: %q, want 127.0.0.1 (the page the link was clicked on)", referrers)
	}
	if p := problems(); len(p) > 0 {
		t.Fatalf("the pages reported errors: %v", p)
	}
}

// text is the text of the first element that sel (CSS) matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestBrowserCrossSiteFormRefused: another site's page posts a form to
// /shorten, text/plain, its one field spelling a JSON body a create would
// take. A browser sends it without asking (no CORS preflight for a form);
// the service must refuse it and store nothing.
func TestBrowserCrossSiteFormRefused(t *testing.T) {
	dsn := testDatabase(t)
	ctx, problems := newBrowser(t)
	base, _, _ := startRun(t, map[string]string{"ADDR": "127.0.0.1:0", "DATABASE_URL": dsn})
	// The body is name=value: {"url":"https://evil.example/?a=b"}.
	evil := servePage(t, `<!doctype html><title>evil</title><link rel="icon" href="data:,">
<form id="f" method="POST" enctype="text/plain" action="`+base+`/shorten">
<input type="hidden" name='{"url":"https://evil.example/?a' value='b"}'>
</form>`)
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://evil.example:"+evil+"/"),
		chromedp.Submit(chromedp.CSS("#f")),
		// The answer, whichever it is: a refusal, or a link made.
		chromedp.WaitReady(chromedp.Search(`//*[contains(text(), '"error"') or contains(text(), '"code"')]`)),
	); err != nil {
		t.Fatalf("post the form from another site: %v", err)
	}
	if body := text(t, ctx, "body"); !strings.Contains(body, `{"error":"cross-site request refused`) {
		t.Fatalf("the refusal is %q, want a JSON error", body)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM links").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d links stored from another site's form, want 0", n)
	}
	// The errors the browser reports are the 403 itself, and the 404 of
	// the /favicon.ico it asks for to show beside the JSON (the app has
	// none; its pages say so with an empty icon).
	for _, m := range problems() {
		if !strings.Contains(m.Text, "403") && !(strings.Contains(m.Text, "404") && m.URL == base+"/favicon.ico") {
			t.Errorf("the browser reported: %v (%s)", m, m.URL)
		}
	}
	// The same body from a client that is not a browser is taken: the
	// refusal is about where a browser was, not about the body.
	shorten(t, base, "https://evil.example/?a=b")
}
