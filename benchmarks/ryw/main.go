// Command ryw measures read-your-writes through a replica (docs/10). It
// creates links one after another, and right after each 201 asks the
// replica directly whether it has the link yet; then creates as many
// again, each followed through the app at once. It prints how many were
// not on the replica yet, and how many follows did not answer 302.
//
//	go run ./benchmarks/ryw -base http://127.0.0.1:8080 -replica 'postgres://...' -n 1000
package main

import (
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	_ "github.com/lib/pq"
)

func main() {
	base := flag.String("base", "http://127.0.0.1:8080", "the app")
	replica := flag.String("replica", "", "the replica's database URL")
	n := flag.Int("n", 1000, "links to create and follow")
	flag.Parse()
	if err := run(*base, *replica, *n); err != nil {
		fmt.Fprintf(os.Stderr, "ryw: %v\n", err)
		os.Exit(1)
	}
}

func run(base, replicaURL string, n int) error {
	db, err := sql.Open("postgres", replicaURL)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	client := &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	create := func(i int) (string, error) {
		resp, err := client.Post(base+"/shorten", "application/json",
			strings.NewReader(fmt.Sprintf(`{"url":"https://example.com/ryw/%d"}`, i)))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var created struct{ Code string }
		if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated {
			return "", fmt.Errorf("create %d: status %d, %v", i, resp.StatusCode, err)
		}
		return created.Code, nil
	}
	// First the raw question: is the link on the replica the moment its
	// create was answered? If not, how long until it is?
	notYet := 0
	var waited time.Duration
	for i := range n {
		code, err := create(i)
		if err != nil {
			return err
		}
		var one int
		switch err := db.QueryRow(`SELECT 1 FROM links WHERE code = $1`, code).Scan(&one); {
		case err == sql.ErrNoRows:
			notYet++
			start := time.Now()
			for db.QueryRow(`SELECT 1 FROM links WHERE code = $1`, code).Scan(&one) == sql.ErrNoRows {
				time.Sleep(100 * time.Microsecond)
			}
			waited += time.Since(start)
		case err != nil:
			return fmt.Errorf("replica: %w", err)
		}
	}
	// Then the same through the app, which reads the replica first: each
	// new link followed at once.
	bad := 0
	for i := range n {
		code, err := create(n + i)
		if err != nil {
			return err
		}
		resp, err := client.Get(base + "/" + code)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			bad++
		}
	}
	fmt.Printf("%d links created one after another, each looked up on the replica directly as soon as its 201 arrived:\n", n)
	fmt.Printf("  not on the replica yet: %d (%.1f%%)", notYet, 100*float64(notYet)/float64(n))
	if notYet > 0 {
		fmt.Printf("; they appeared %.2f ms later on average", float64(waited.Microseconds())/1000/float64(notYet))
	}
	fmt.Printf("\n%d more, each followed through the app as soon as its 201 arrived:\n", n)
	fmt.Printf("  answered something other than 302: %d\n", bad)
	return nil
}
