package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lib/pq"
)

// Step 18: bulk import. `shortener import FILE` (or - for standard
// input) reads one URL per line and makes a link of each, and writes one
// line per link to standard output: its code, its token (the only time
// it is shown, as for a create) and its URL, separated by tabs.
//
// Every line is checked first, as a create checks its url (blank lines
// are skipped): if any is refused, the import says which (the first
// maxImportErrors of them) and writes nothing. Then the links go in by
// chunks of importChunk, each one transaction: COPY straight into links.
// If a code in the chunk is taken (under CODES=random, or by an alias),
// the unique index refuses the COPY, and that chunk goes again the slower
// way: COPY into a temporary table, one INSERT from it that skips the
// codes taken, new codes for those rows. Either way a chunk commits
// within DB_TIMEOUT of its rows' created_at, as a create does, so that a
// running instance's Bloom filter sweep (bloomsweep.go) finds them:
// imported links reach running instances' filters within BLOOM_SWEEP.
// If a chunk fails, the import stops, and what it wrote to standard
// output is what was imported.

// importChunk is how many links go in per transaction, and
// maxImportErrors how many refused lines are listed.
const (
	importChunk     = 5_000
	maxImportErrors = 20
	maxImportLine   = 64 << 10
)

// importInsertSQL moves a chunk from the temporary table into links. A
// code already taken is skipped and given a new one (codes under
// CODES=random can collide; under sequence, with an alias or an old
// random code); RETURNING says which went in. clock_timestamp(), not
// now(): the time of this statement, not of the chunk's BEGIN, before
// which the COPY ran.
const importInsertSQL = `INSERT INTO links (code, url, token_hash, created_at)
SELECT code, url, token_hash, clock_timestamp() FROM import_rows
ON CONFLICT (code) DO NOTHING
RETURNING code`

// importRetrySQL inserts the rows whose codes were taken, with new ones.
const importRetrySQL = `INSERT INTO links (code, url, token_hash, created_at)
SELECT c, u, h, clock_timestamp() FROM unnest($1::text[], $2::text[], $3::bytea[]) AS t(c, u, h)
ON CONFLICT (code) DO NOTHING
RETURNING code`

// importRow is one link to import.
type importRow struct {
	code, url, token string
	hash             []byte
}

// runImport is `shortener import`: args are what follows "import".
func runImport(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: shortener import FILE (one URL per line; - reads standard input)")
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	if cfg.databaseURL == "" {
		return errors.New("import: DATABASE_URL is not set: links are imported into Postgres")
	}
	in := stdin
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer f.Close() //nolint:errcheck // read only
		in = f
	}
	started := time.Now()
	urls, err := readImport(in, cfg, stderr)
	if err != nil {
		return err
	}
	pg, err := openPostgres(ctx, cfg.databaseURL, cfg.pool)
	if err != nil {
		return err
	}
	defer pg.Close() //nolint:errcheck // nothing is left to write when it runs
	var codes codeSource = randomCodes{}
	if cfg.codes == "sequence" {
		if codes, err = newSequenceCodes(ctx, pg.db, cfg.pool.timeout); err != nil {
			return err
		}
	}
	// Ctrl-C or SIGTERM stops the import between chunks, never inside
	// one: a chunk cut short could commit with nobody told its codes.
	// SIGPIPE (the reader of the output gone) makes a write fail instead
	// of killing the import, which then stops and says how far it got.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer signal.Stop(sig)
	out := bufio.NewWriterSize(stdout, 64<<10)
	n := 0
	for len(urls) > 0 {
		select {
		case s := <-sig:
			return fmt.Errorf("import: stopped by %v after %d links, all written above; %d not imported", s, n, len(urls))
		default:
		}
		chunk := urls[:min(importChunk, len(urls))]
		urls = urls[len(chunk):]
		rows, err := importChunkOf(context.WithoutCancel(ctx), pg.db, codes, chunk, cfg.pool.timeout)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (a chunk of %d must commit within DB_TIMEOUT, %v, and did not: it was not imported; "+
				"the running instances' sweep reads back DB_TIMEOUT + 5s, so an import may run with DB_TIMEOUT up to 5s)",
				err, len(chunk), cfg.pool.timeout)
		}
		if err != nil {
			return fmt.Errorf("import: stopped after %d links, all written above; %d not imported: %w", n, len(chunk)+len(urls), err)
		}
		// Written, and flushed, chunk by chunk: what is printed is what
		// is in Postgres, whenever the import stops.
		for _, r := range rows {
			fmt.Fprintf(out, "%s\t%s\t%s\n", r.code, r.token, r.url)
		}
		if err := out.Flush(); err != nil {
			return fmt.Errorf("import: stopped: %d links imported, but the lines of the last %d (codes and tokens) could not be written: %w",
				n+len(rows), len(rows), err)
		}
		n += len(rows)
	}
	took := time.Since(started)
	fmt.Fprintf(stderr, "imported %d links in %v (%.0f a second)\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	return nil
}

// readImport reads and checks every line, and returns the URLs as they
// will be stored; or, if any line is refused, an error, having listed
// the first ones on stderr.
func readImport(in io.Reader, cfg config, stderr io.Writer) ([]string, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxImportLine)
	var urls []string
	bad, line := 0, 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			// A byte order mark, as spreadsheets write at the start of
			// a UTF-8 file, is not part of the first URL.
			text = strings.TrimPrefix(text, "\uFEFF")
		}
		raw := strings.TrimSpace(text)
		if raw == "" {
			continue
		}
		u, err := normalizeURL(raw)
		if err == nil && sameHost(u.Hostname(), cfg.baseHost) && cfg.baseHost != "" {
			err = ErrOwnHost
		}
		if err != nil {
			bad++
			if bad <= maxImportErrors {
				fmt.Fprintf(stderr, "line %d: %v\n", line, err)
			}
			continue
		}
		urls = append(urls, u.String())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("import: line %d: %w", line+1, err)
	}
	if bad > 0 {
		return nil, fmt.Errorf("import: %d of %d lines refused (the first %d listed above); nothing imported", bad, line, min(bad, maxImportErrors))
	}
	if len(urls) == 0 {
		return nil, errors.New("import: no URLs in the input; nothing imported")
	}
	return urls, nil
}

// importChunkOf imports urls in one transaction and returns their rows.
func importChunkOf(ctx context.Context, db *sql.DB, codes codeSource, urls []string, timeout time.Duration) ([]importRow, error) {
	rows := make([]importRow, len(urls))
	byCode := make(map[string]int, len(urls))
	for i, u := range urls {
		rows[i].url = u
		rows[i].token, rows[i].hash = newToken()
		if err := newImportCode(ctx, codes, rows, i, byCode); err != nil {
			return nil, err
		}
	}
	err := copyRows(ctx, db, rows, timeout)
	if err == nil {
		return rows, nil
	}
	if pe := (*pq.Error)(nil); !errors.As(err, &pe) || pe.Code != "23505" { // unique_violation
		return nil, err
	}
	return importViaTable(ctx, db, codes, rows, byCode, timeout)
}

// copyRows copies rows straight into links, in one transaction of at
// most timeout: created_at is now(), the transaction's start.
func copyRows(ctx context.Context, db *sql.DB, rows []importRow, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", deadline(ctx, err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if err := copyRowsIn(ctx, tx, "links", rows); err != nil {
		return fmt.Errorf("copy: %w", deadline(ctx, err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", deadline(ctx, err))
	}
	return nil
}

// copyRowsIn sends rows to COPY table (code, url, token_hash) FROM STDIN.
func copyRowsIn(ctx context.Context, tx *sql.Tx, table string, rows []importRow) error {
	// The statement pq.CopyIn built, written out (the builder is deprecated).
	cp, err := tx.PrepareContext(ctx, "COPY "+pq.QuoteIdentifier(table)+" (code, url, token_hash) FROM STDIN")
	if err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := cp.ExecContext(ctx, r.code, r.url, r.hash); err != nil {
			cp.Close() //nolint:errcheck // the copy's error is the one worth returning
			return err
		}
	}
	if _, err := cp.ExecContext(ctx); err != nil {
		cp.Close() //nolint:errcheck // as above
		return err
	}
	return cp.Close()
}

// importViaTable imports rows some of whose codes are taken: into a
// temporary table, then into links, the rows whose codes were taken
// given new ones.
func importViaTable(ctx context.Context, db *sql.DB, codes codeSource, rows []importRow, byCode map[string]int, timeout time.Duration) ([]importRow, error) {
	// The whole transaction, DB_TIMEOUT at most, as copyRows's.
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tx, err := db.BeginTx(tctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", deadline(tctx, err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, Rollback is a no-op that returns ErrTxDone
	if _, err := tx.ExecContext(tctx, `CREATE TEMPORARY TABLE import_rows (code text, url text, token_hash bytea) ON COMMIT DROP`); err != nil {
		return nil, fmt.Errorf("temporary table: %w", deadline(tctx, err))
	}
	if err := copyRowsIn(tctx, tx, "import_rows", rows); err != nil {
		return nil, fmt.Errorf("copy: %w", deadline(tctx, err))
	}
	query, args := importInsertSQL, []any(nil)
	pending := rows
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == maxCodeAttempts {
			return nil, fmt.Errorf("no free code for %d links after %d attempts", len(pending), maxCodeAttempts)
		}
		inserted, err := queryCodes(tctx, tx, query, args...)
		if err != nil {
			return nil, fmt.Errorf("insert: %w", deadline(tctx, err))
		}
		// The rows whose codes were taken get new ones.
		var retry []importRow
		for _, r := range pending {
			if !inserted[r.code] {
				retry = append(retry, r)
			}
		}
		if len(retry) == 0 {
			break
		}
		cs, us, hs := make([]string, len(retry)), make([]string, len(retry)), make([][]byte, len(retry))
		for j := range retry {
			i := byCode[retry[j].code]
			if err := newImportCode(ctx, codes, rows, i, byCode); err != nil {
				return nil, err
			}
			retry[j] = rows[i]
			cs[j], us[j], hs[j] = rows[i].code, rows[i].url, rows[i].hash
		}
		query, args, pending = importRetrySQL, []any{pq.Array(cs), pq.Array(us), pq.Array(hs)}, retry
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", deadline(tctx, err))
	}
	return rows, nil
}

// newImportCode gives rows[i] a code no other row of its chunk has.
func newImportCode(ctx context.Context, codes codeSource, rows []importRow, i int, byCode map[string]int) error {
	for {
		c, err := codes.next(ctx)
		if err != nil {
			return err
		}
		if _, dup := byCode[c]; dup || reserved(c) {
			continue
		}
		delete(byCode, rows[i].code)
		rows[i].code = c
		byCode[c] = i
		return nil
	}
}

// queryCodes runs an INSERT ... RETURNING code and returns the codes.
func queryCodes(ctx context.Context, tx *sql.Tx, query string, args ...any) (map[string]bool, error) {
	rs, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	got := make(map[string]bool)
	for rs.Next() {
		var c string
		if err := rs.Scan(&c); err != nil {
			rs.Close() //nolint:errcheck // the scan error is the one worth returning
			return nil, err
		}
		got[c] = true
	}
	if err := rs.Close(); err != nil {
		return nil, err
	}
	return got, rs.Err()
}
