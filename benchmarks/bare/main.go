// Command bare is the least an HTTP server in Go can be: net/http and one
// handler that answers 200 "ok", with no middleware, no routing and no
// logging. Measured beside the shortener's /healthz (docs/11), it shows
// what the shortener's own layers cost on top of Go's HTTP server. With
// -timeouts it sets the four timeouts the shortener's server sets
// (server.go), so that their cost can be told from the rest (docs/12).
// With -redirect it answers every request as the shortener answers a
// cached link, 302 with a Location header and no body, so that what any
// redirect costs net/http can be told from what the shortener adds
// (docs/21).
//
//	go run ./benchmarks/bare -addr 127.0.0.1:8090
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "where to listen")
	timeouts := flag.Bool("timeouts", false, "set the shortener's server timeouts")
	redirect := flag.Bool("redirect", false, "answer 302 with a Location header, as the shortener's redirect does")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n")) //nolint:errcheck // a failed write means the client left
	})
	if *redirect {
		h = func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Location"] = []string{"https://example.com/seed/5000"}
			w.WriteHeader(http.StatusFound)
		}
	}
	srv := &http.Server{Addr: *addr, Handler: h}
	if *timeouts {
		// As in server.go's newServer.
		srv.ReadHeaderTimeout = 5 * time.Second
		srv.ReadTimeout = 10 * time.Second
		srv.WriteTimeout = 15 * time.Second
		srv.IdleTimeout = 60 * time.Second
	}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintf(os.Stderr, "bare: %v\n", err)
		os.Exit(1)
	}
}
