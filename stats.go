package main

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/axiomhq/hyperloglog"
)

// agentClass is what a User-Agent says the client is. Only browsers count
// as people; the other classes are bots, counted apart.
type agentClass uint8

const (
	agentBrowser agentClass = iota // says Mozilla/ and nothing below
	agentPreview                   // a link preview: a chat app or social site unfurling the link
	agentCrawler                   // a search engine or other crawler, a headless browser
	agentTool                      // curl, an HTTP library, a load generator
	agentOther                     // no User-Agent, or one that says none of the above
	agentClasses                   // how many classes there are
)

var agentNames = [agentClasses]string{"browser", "preview", "crawler", "tool", "other"}

func (c agentClass) String() string { return agentNames[c] }

// agentMarkers say which class a User-Agent is in: the first class with
// a marker contained in the lower-cased header wins, so the link
// previewers (whose agents often say "bot" too) come before the crawlers.
// It is a short list of the agents that follow short links most, not a
// database: a bot that does not say what it is counts as a browser.
var agentMarkers = []struct {
	class   agentClass
	markers []string
}{
	{agentPreview, []string{"facebookexternalhit", "facebookcatalog", "slackbot", "slack-imgproxy", "twitterbot",
		"whatsapp", "telegrambot", "discordbot", "linkedinbot", "skypeuripreview", "pinterest", "redditbot",
		"embedly", "iframely", "vkshare", "mastodon", "bluesky", "google-pagerenderer", "snapchat", "viber"}},
	{agentCrawler, []string{"bot", "crawl", "spider", "slurp", "headlesschrome", "lighthouse", "phantomjs",
		"bingpreview", "mediapartners-google", "feedfetcher", "archive.org"}},
	{agentTool, []string{"curl/", "wget/", "python-", "python/", "go-http-client", "java/", "okhttp", "libwww",
		"axios", "node-fetch", "undici", "httpclient", "http.rb", "hey/", "postmanruntime", "scrapy", "aiohttp",
		"guzzlehttp", "ruby", "perl", "php/", "powershell"}},
}

// maxAgentLen bounds how much of a User-Agent is read: real ones are a few
// hundred bytes; a client can send kilobytes to make the worker scan them.
const maxAgentLen = 512

// classify tells an agent's class.
func classify(agent string) agentClass {
	if agent == "" {
		return agentOther
	}
	if len(agent) > maxAgentLen {
		agent = agent[:maxAgentLen]
	}
	a := strings.ToLower(agent)
	for _, m := range agentMarkers {
		for _, s := range m.markers {
			if strings.Contains(a, s) {
				return m.class
			}
		}
	}
	if strings.HasPrefix(a, "mozilla/") || strings.HasPrefix(a, "opera/") {
		return agentBrowser
	}
	return agentOther
}

// The referrer "hosts" that are not hosts: parentheses cannot appear in a
// host name, so these never collide with one.
const (
	refNone  = "(none)"  // no Referer: typed, from an app, or a browser that sends none
	refOther = "(other)" // past the top N, or a Referer that names no host
)

// maxHostLen is the longest DNS name.
const maxHostLen = 253

// referrerHost is the host a Referer names, lower-cased and without its
// port; only the host is kept, never the path (which can hold anything,
// a session id included).
func referrerHost(referer string) string {
	if referer == "" {
		return refNone
	}
	if len(referer) > 2048 {
		return refOther
	}
	u, err := url.Parse(referer)
	if err != nil || u.Host == "" {
		return refOther
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || len(host) > maxHostLen {
		return refOther
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == ':' || c == '_') {
			return refOther
		}
	}
	return host
}

// hllPrecision is the sketches' precision: 2^14 registers, a standard
// error of 1.04/√16384 = 0.81%. A sketch starts sparse (two or three
// bytes per visitor) and turns dense, 16 KB, somewhere between 6,600 and
// 10,000 visitors in a day (docs/17).
const hllPrecision = 14

func newSketch() *hyperloglog.Sketch {
	sk, err := hyperloglog.NewSketch(hllPrecision, true)
	if err != nil { // only for a precision out of 4–18
		panic(fmt.Sprintf("hyperloglog: %v", err))
	}
	return sk
}

// visitorHasher hashes a link's visitor: HMAC-SHA256, under the day's
// key, of the link's code and the client's address. So what goes into a
// sketch cannot be turned back into an address without the key, nor
// matched with another link's visitors (the code is in the hash) or
// another day's (the key changes each day, statsStore.key, and is
// deleted soon after).
type visitorHasher struct {
	mac hash.Hash
	buf [64 + 16]byte // the code, then the address; a field, not a local, so that Write does not make it escape to the heap
	sum []byte
}

func newVisitorHasher(dayKey []byte) *visitorHasher {
	return &visitorHasher{mac: hmac.New(sha256.New, dayKey), sum: make([]byte, 0, sha256.Size)}
}

func (v *visitorHasher) hash(code string, a netip.Addr) uint64 {
	v.mac.Reset()
	// The address, 16 bytes, always ends the message: no two pairs of
	// code and address make the same bytes.
	n := 0
	if len(code) <= len(v.buf)-16 {
		n = copy(v.buf[:], code)
	} else {
		v.mac.Write([]byte(code)) //nolint:errcheck // a hash.Hash's Write never fails
	}
	addr := a.As16()
	n += copy(v.buf[n:], addr[:])
	v.mac.Write(v.buf[:n]) //nolint:errcheck // a hash.Hash's Write never fails
	v.sum = v.mac.Sum(v.sum[:0])
	return binary.LittleEndian.Uint64(v.sum)
}

// hourKey and dayKey name a link's rollup row.
type hourKey struct {
	code string
	hour time.Time
}

type dayKey struct {
	code string
	day  time.Time // midnight UTC
}

// hourSums are one link's clicks in one hour.
type hourSums struct{ people, bots int64 }

// daySums are one link's clicks in one day, with who and from where.
type daySums struct {
	people, bots int64
	uniques      *hyperloglog.Sketch // people's addresses, hashed (visitorHasher)
	referrers    map[string]int64    // people's clicks by referrer host
	agents       [agentClasses]int64 // every click by class
}

// rollup is clicks summed by link and hour, and by link and day: what a
// flush writes, statsChunk links per transaction.
type rollup struct {
	hours  map[hourKey]*hourSums
	days   map[dayKey]*daySums
	clicks int64 // how many clicks it sums
}

func newRollup() *rollup {
	return &rollup{hours: make(map[hourKey]*hourSums), days: make(map[dayKey]*daySums)}
}

// rows is how many rows writing r touches: its link-hours and link-days.
func (r *rollup) rows() int { return len(r.hours) + len(r.days) }

// dayOf is the midnight (UTC) that begins t's day.
func dayOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// add sums clicks into r. hashers holds the hasher of each click's day
// (nil for a day too old to have a key, whose visitors are then not
// counted); names remembers what recent User-Agents and Referers came to.
func (r *rollup) add(clicks []click, hashers map[time.Time]*visitorHasher, names *nameCache) {
	r.clicks += int64(len(clicks))
	for _, c := range clicks {
		at := c.at.UTC()
		class := names.class(c.agent)
		person := class == agentBrowser
		hk := hourKey{c.code, at.Truncate(time.Hour)}
		h := r.hours[hk]
		if h == nil {
			h = &hourSums{}
			r.hours[hk] = h
		}
		day := dayOf(at)
		dk := dayKey{c.code, day}
		d := r.days[dk]
		if d == nil {
			d = &daySums{}
			r.days[dk] = d
		}
		d.agents[class]++
		if !person {
			h.bots++
			d.bots++
			continue
		}
		h.people++
		d.people++
		if d.referrers == nil {
			d.referrers = make(map[string]int64, 1)
		}
		d.referrers[names.referrer(c.referer)]++
		v := hashers[day]
		if !c.client.IsValid() || v == nil {
			continue
		}
		if d.uniques == nil {
			d.uniques = newSketch()
		}
		d.uniques.InsertHash(v.hash(c.code, c.client))
	}
}

// nameCache remembers the class of recent User-Agents and the host of
// recent Referers: the same few strings come again and again (a browser
// version, a site's pages), and classify and referrerHost cost more than
// a map lookup. Each map is emptied when it reaches nameCacheSize, so that
// a client sending a new string each time cannot grow it.
type nameCache struct {
	agents    map[string]agentClass
	referrers map[string]string
}

const nameCacheSize = 4096

func newNameCache() *nameCache {
	return &nameCache{agents: make(map[string]agentClass), referrers: make(map[string]string)}
}

func (n *nameCache) class(agent string) agentClass {
	if c, ok := n.agents[agent]; ok {
		return c
	}
	c := classify(agent)
	if len(n.agents) >= nameCacheSize {
		clear(n.agents)
	}
	if len(agent) <= maxAgentLen {
		n.agents[agent] = c
	}
	return c
}

func (n *nameCache) referrer(referer string) string {
	if h, ok := n.referrers[referer]; ok {
		return h
	}
	h := referrerHost(referer)
	if len(n.referrers) >= nameCacheSize {
		clear(n.referrers)
	}
	if len(referer) <= 2048 {
		n.referrers[referer] = h
	}
	return h
}

// topReferrers keeps the n hosts with the most clicks, and adds the rest
// up under refOther, so that a link's row stays small however many sites
// link to it. Ties go to the host first in alphabetical order, so that
// every instance keeps the same ones.
func topReferrers(m map[string]int64, n int) map[string]int64 {
	if len(m) <= n {
		return m
	}
	type hc struct {
		host   string
		clicks int64
	}
	all := make([]hc, 0, len(m))
	for h, c := range m {
		all = append(all, hc{h, c})
	}
	slices.SortFunc(all, func(a, b hc) int {
		if c := cmp.Compare(b.clicks, a.clicks); c != 0 {
			return c
		}
		return strings.Compare(a.host, b.host)
	})
	out := make(map[string]int64, n)
	var other int64
	kept := 0
	for _, e := range all {
		if e.host != refOther && kept < n-1 {
			out[e.host] = e.clicks
			kept++
			continue
		}
		other += e.clicks
	}
	if other > 0 {
		out[refOther] = other
	}
	return out
}
