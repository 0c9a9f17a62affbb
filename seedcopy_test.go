package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runZipf runs benchmarks/zipf with args and returns what it printed.
func runZipf(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "./benchmarks/zipf"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./benchmarks/zipf %q: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// benchmarks/zipf -seed-copy prints, and Postgres's COPY reads, the rows
// seed.sql inserts (benchmarks/longtail.sh seeds ten million links that
// way): seed.sql itself runs here (its psql meta-commands dropped) for
// links 1..2000, and for 9,999,001..10,000,000, the far end of a 10M
// seeding. It lives in the root package, not beside benchmarks/zipf, so
// that with no TEST_DATABASE_URL it gets TestMain's throwaway Postgres.
func TestSeedCopyMatchesSeedSQL(t *testing.T) {
	dsn := testDatabase(t)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The schema as the app's start makes it: since step 45 the file's
	// last part (its indexes, CONCURRENTLY) cannot run in the one
	// transaction a multi-statement Exec is.
	migrateOn(t, dsn)
	seed, err := os.ReadFile("sql/seed.sql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.SplitSeq(string(seed), "\n") {
		if !strings.HasPrefix(l, `\`) {
			lines = append(lines, l)
		}
	}
	insert := strings.Join(lines, "\n")
	const series = "generate_series(1, :rows)"
	if !strings.Contains(insert, series) {
		t.Fatalf("seed.sql no longer says %q; this test needs updating", series)
	}
	// The far end first: seed.sql does nothing once link 1 is there.
	for _, s := range []string{"generate_series(9999001, 10000000)", "generate_series(1, 2000)"} {
		if _, err := db.ExecContext(ctx, strings.Replace(insert, series, s, 1)); err != nil {
			t.Fatalf("run seed.sql with %s: %v", s, err)
		}
	}
	got := map[string]string{} // url -> code
	rows, err := db.QueryContext(ctx, "SELECT url, code FROM links")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var u, c string
		if err := rows.Scan(&u, &c); err != nil {
			t.Fatal(err)
		}
		got[u] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3000 {
		t.Fatalf("seed.sql made %d links, want 3000", len(got))
	}

	// -seed-copy's rows, one by one, and then through COPY itself.
	out := runZipf(t, "-seed-copy", "2000")
	copyLines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(copyLines) != 2000 {
		t.Fatalf("-seed-copy 2000 printed %d lines", len(copyLines))
	}
	for i, l := range copyLines {
		c, u, ok := strings.Cut(l, "\t")
		if !ok || strings.ContainsAny(l, `\`) || strings.Count(l, "\t") != 1 {
			t.Fatalf("line %d: %q is not two plain COPY fields", i+1, l)
		}
		if want := fmt.Sprintf("https://example.com/seed/%d", i+1); u != want {
			t.Fatalf("line %d: url %q, want %q", i+1, u, want)
		}
		if got[u] != c {
			t.Errorf("link %d: -seed-copy says %q, seed.sql %q", i+1, c, got[u])
		}
	}
	for _, n := range []int{9999001, 9999500, 10000000} {
		u := fmt.Sprintf("https://example.com/seed/%d", n)
		if c := strings.TrimSpace(runZipf(t, "-code", strconv.Itoa(n))); got[u] != c {
			t.Errorf("link %d: code %q, seed.sql %q", n, c, got[u])
		}
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE links_copy (code text, url text)"); err != nil {
		t.Fatal(err)
	}
	if err := copyIn(ctx, db, "links_copy", out); err != nil {
		t.Fatal(err)
	}
	var differ int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT code, url FROM links_copy
		EXCEPT SELECT code, url FROM links) AS d`).Scan(&differ); err != nil {
		t.Fatal(err)
	}
	if differ != 0 {
		t.Errorf("%d rows COPY read from -seed-copy are not rows seed.sql made", differ)
	}
}

// copyIn feeds text, in COPY's text format, to COPY table FROM STDIN, as
// psql does, by way of lib/pq's COPY support (which takes the fields, so
// the text is split here as COPY would: tab between fields, no escapes in
// this text).
func copyIn(ctx context.Context, db *sql.DB, table, text string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op; on a failure the error that matters is returned
	st, err := tx.PrepareContext(ctx, "COPY "+table+" (code, url) FROM STDIN")
	if err != nil {
		return fmt.Errorf("copy into %s: %w", table, err)
	}
	for l := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
		c, u, _ := strings.Cut(l, "\t")
		if _, err := st.ExecContext(ctx, c, u); err != nil {
			return fmt.Errorf("copy into %s: %w", table, err)
		}
	}
	if _, err := st.ExecContext(ctx); err != nil {
		return fmt.Errorf("copy into %s: end: %w", table, err)
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("copy into %s: close: %w", table, err)
	}
	return tx.Commit()
}
