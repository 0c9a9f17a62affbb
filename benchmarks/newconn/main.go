// Command newconn is a load generator that opens a new connection for
// every request, as a browser does for a click on a short link, and can do
// what hey cannot: resume TLS sessions. hey -disable-keepalive pays a full
// TLS handshake on every connection, since it keeps no session cache; a
// browser returning to the same short domain resumes (one round trip, no
// certificate signature). With -resume, newconn keeps a session cache
// shared by its workers, and it counts how many handshakes did resume, so
// that a server which refuses resumption shows as 0, not as a quiet
// slowdown.
//
//	go run ./benchmarks/newconn -c 50 -d 10s -resume https://127.0.0.1:8443/healthz
//
// Its summary uses hey's words for the lines the sitting scripts read
// (Requests/sec, the latency distribution, Status code distribution, Error
// distribution), so that the same parsers read both.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
)

func main() {
	conc := flag.Int("c", 50, "workers, each with one request at a time")
	dur := flag.Duration("d", 10*time.Second, "how long to send")
	resume := flag.Bool("resume", false, "keep a TLS session cache, so that handshakes after the first resume")
	h2 := flag.Bool("h2", false, "offer HTTP/2 (each request still on a new connection)")
	classic := flag.Bool("x25519", false, "offer only X25519 for the key exchange, not Go's default hybrid X25519MLKEM768 (post-quantum) first")
	flag.Parse()
	if flag.NArg() != 1 || *conc < 1 || *dur <= 0 {
		fmt.Fprintln(os.Stderr, "usage: newconn [-c N] [-d DURATION] [-resume] [-h2] [-x25519] URL")
		os.Exit(2)
	}
	url := flag.Arg(0)

	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a load test of our own server, with a certificate made for it
	if *classic {
		tc.CurvePreferences = []tls.CurveID{tls.X25519}
	}
	if *resume {
		tc.ClientSessionCache = tls.NewLRUClientSessionCache(4 * *conc)
	}
	if !*h2 {
		tc.NextProtos = []string{"http/1.1"}
	}
	tr := &http.Transport{DisableKeepAlives: true, ForceAttemptHTTP2: *h2, TLSClientConfig: tc}
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	type result struct {
		lat      []time.Duration
		codes    map[int]int
		errs     map[string]int
		tls      int
		resumed  int
		protocol map[string]int
		groups   map[string]int
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	results := make([]result, *conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range *conc {
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			r.codes, r.errs, r.protocol, r.groups = map[int]int{}, map[string]int{}, map[string]int{}, map[string]int{}
			for ctx.Err() == nil {
				t0 := time.Now()
				resp, err := client.Get(url)
				if err != nil {
					r.errs[err.Error()]++
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				if cerr := resp.Body.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					r.errs[fmt.Sprintf("read body: %v", err)]++
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
				r.codes[resp.StatusCode]++
				r.protocol[resp.Proto]++
				if resp.TLS != nil {
					r.tls++
					r.groups[fmt.Sprintf("%s %s", tls.VersionName(resp.TLS.Version), resp.TLS.CurveID)]++
					if resp.TLS.DidResume {
						r.resumed++
					}
				}
			}
		}(&results[w])
	}
	wg.Wait()
	elapsed := time.Since(start)

	var lat []time.Duration
	codes, errs, protocol, groups := map[int]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	tlsN, resumed := 0, 0
	for _, r := range results {
		lat = append(lat, r.lat...)
		for k, v := range r.codes {
			codes[k] += v
		}
		for k, v := range r.errs {
			errs[k] += v
		}
		for k, v := range r.protocol {
			protocol[k] += v
		}
		for k, v := range r.groups {
			groups[k] += v
		}
		tlsN += r.tls
		resumed += r.resumed
	}
	if len(lat) == 0 {
		fmt.Fprintln(os.Stderr, "newconn: no request succeeded")
		for k, v := range errs {
			fmt.Fprintf(os.Stderr, "  [%d]\t%s\n", v, k)
		}
		os.Exit(1)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds() }
	fmt.Printf("\nSummary:\n  Total:\t%.4f secs\n  Requests/sec:\t%.4f\n", elapsed.Seconds(), float64(len(lat))/elapsed.Seconds())
	fmt.Printf("  Connections:\t%d, one per request; TLS handshakes resumed: %d of %d (-resume=%v)\n", len(lat), resumed, tlsN, *resume)
	keys := make([]string, 0, len(protocol))
	for k := range protocol {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  Protocol %s:\t%d responses\n", k, protocol[k])
	}
	keys = keys[:0]
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  Key exchange %s:\t%d responses\n", k, groups[k])
	}
	fmt.Printf("\nLatency distribution:\n")
	for _, p := range []float64{0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99} {
		fmt.Printf("  %d%% in %.4f secs\n", int(p*100), q(p))
	}
	fmt.Printf("\nStatus code distribution:\n")
	cs := make([]int, 0, len(codes))
	for k := range codes {
		cs = append(cs, k)
	}
	sort.Ints(cs)
	for _, k := range cs {
		fmt.Printf("  [%d]\t%d responses\n", k, codes[k])
	}
	if len(errs) > 0 {
		fmt.Printf("\nError distribution:\n")
		for k, v := range errs {
			fmt.Printf("  [%d]\t%s\n", v, k)
		}
	}
	if *resume && resumed == 0 {
		fmt.Fprintln(os.Stderr, "newconn: -resume, but no handshake resumed")
		os.Exit(1)
	}
}
