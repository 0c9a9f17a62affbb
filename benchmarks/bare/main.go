// Command bare is the least an HTTP server in Go can be: net/http and one
// handler that answers 200 "ok", with no middleware, no routing and no
// logging. Measured beside the shortener's /healthz (docs/11), it shows
// what the shortener's own layers cost on top of Go's HTTP server.
//
//	go run ./benchmarks/bare -addr 127.0.0.1:8090
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "where to listen")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n")) //nolint:errcheck // a failed write means the client left
	})
	if err := http.ListenAndServe(*addr, h); err != nil {
		fmt.Fprintf(os.Stderr, "bare: %v\n", err)
		os.Exit(1)
	}
}
