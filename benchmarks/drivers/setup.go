package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// seedURLPrefix is what sql/seed.sql's link n points to, followed by n.
const seedURLPrefix = "https://example.com/seed/"

// codeLength and alphabet are the app's (code.go), and sql/seed.sql's.
const (
	codeLength = 7
	alphabet   = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// seededCode is the code sql/seed.sql gives link n: n * 1000000007 mod
// 62^7, written in base62 with seven digits. The map is one-to-one, so the
// code of any n past the seeded rows is a code no link has.
func seededCode(n int64) string {
	const space = 3521614606208 // 62^7
	v := n * 1000000007 % space
	var b [codeLength]byte
	for i := codeLength - 1; i >= 0; i-- {
		b[i] = alphabet[v%62]
		v /= 62
	}
	return string(b[:])
}

// workload is what the lookups ask for. The codes are substrings of one
// string rather than a []string, so that picking one allocates nothing
// and the heap the garbage collector scans stays small: the allocations
// counted are the driver's.
type workload struct {
	rows    int     // links seeded, 1 to rows
	codes   string  // link n's code at [(n-1)*codeLength, n*codeLength)
	unknown string  // codes no link has, back to back
	miss    float64 // the share of lookups for an unknown code
	// timeout is each lookup's own deadline, as the app's Lookup sets one
	// (DB_TIMEOUT): with a deadline, lib/pq starts a goroutine per query to
	// watch it, pgx registers a context.AfterFunc; without one, neither.
	timeout time.Duration
}

// unknownCodes is how many codes no link has the workload draws from.
const unknownCodes = 1 << 16

func newWorkload(rows int, miss float64, timeout time.Duration) *workload {
	var codes, unknown strings.Builder
	codes.Grow(rows * codeLength)
	for n := 1; n <= rows; n++ {
		codes.WriteString(seededCode(int64(n)))
	}
	unknown.Grow(unknownCodes * codeLength)
	for i := 1; i <= unknownCodes; i++ {
		unknown.WriteString(seededCode(int64(rows + i)))
	}
	return &workload{rows: rows, codes: codes.String(), unknown: unknown.String(), miss: miss, timeout: timeout}
}

func (w *workload) code(n int) string {
	return w.codes[(n-1)*codeLength : n*codeLength]
}

func (w *workload) unknownCode(i int) string {
	return w.unknown[i*codeLength : (i+1)*codeLength]
}

// databaseURL is adminURL with its database replaced by name. Only the
// URL form (postgres://...) is taken, since the database must be swapped.
func databaseURL(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		// url.Error quotes the whole URL, password and all.
		return "", errors.New("admin database URL does not parse as a URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("admin database URL: want postgres://..., got scheme %q", u.Scheme)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// createDatabase creates a database whose name has a random suffix, so
// that two runs at once, or anyone's own databases, are never touched.
// It returns the name and the database's URL.
func createDatabase(ctx context.Context, adminURL string) (name, dsn string, err error) {
	name = fmt.Sprintf("shortener_drivers_%08x", rand.Uint32())
	if dsn, err = databaseURL(adminURL, name); err != nil {
		return "", "", err
	}
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		return "", "", fmt.Errorf("create database: %w", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, dsn, nil
}

// dropDatabase drops name, closing whatever connections still use it. It
// is called on a context of its own: after Ctrl-C the run's is cancelled.
func dropDatabase(adminURL, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// seedDatabase applies schemaPath (sql/schema.sql) and seeds rows links
// with seedPath (sql/seed.sql) through psql, as benchmarks/lib.sh does:
// seed.sql uses psql's variables. Then it checks what it made.
func seedDatabase(ctx context.Context, dsn, schemaPath, seedPath string, rows int) error {
	for _, args := range [][]string{
		{"-f", schemaPath},
		{"-v", "rows=" + strconv.Itoa(rows), "-f", seedPath},
	} {
		cmd := exec.CommandContext(ctx, "psql", append([]string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("psql %s: %w: %s", args[len(args)-1], err, bytes.TrimSpace(out.Bytes()))
		}
	}
	return checkSeeded(ctx, dsn, rows)
}

// checkSeeded checks that the database holds the links the workload
// expects: rows of them, link n under seededCode(n) (the first, the
// middle and the last are asked), and none under the unknown codes.
func checkSeeded(ctx context.Context, dsn string, rows int) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return fmt.Errorf("check seed: %w", err)
	}
	defer db.Close()
	var count int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM links`).Scan(&count); err != nil {
		return fmt.Errorf("check seed: count: %w", err)
	}
	if count != rows {
		return fmt.Errorf("check seed: %d links, want %d (was the database empty?)", count, rows)
	}
	for _, n := range []int{1, (rows + 1) / 2, rows} {
		var got string
		if err := db.QueryRowContext(ctx, lookupSQL, seededCode(int64(n))).Scan(&got); err != nil {
			return fmt.Errorf("check seed: link %d, code %s: %w", n, seededCode(int64(n)), err)
		}
		if want := seedURLPrefix + strconv.Itoa(n); got != want {
			return fmt.Errorf("check seed: link %d, code %s: got %q, want %q", n, seededCode(int64(n)), got, want)
		}
	}
	unknown := make([]string, unknownCodes)
	for i := range unknown {
		unknown[i] = seededCode(int64(rows + 1 + i))
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM links WHERE code = ANY($1)`, pq.Array(unknown)).Scan(&count); err != nil {
		return fmt.Errorf("check seed: unknown codes: %w", err)
	}
	if count != 0 {
		return fmt.Errorf("check seed: %d links under codes that should be unknown", count)
	}
	return nil
}
