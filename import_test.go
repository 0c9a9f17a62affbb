package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func importEnv(dsn string, more ...string) func(string) string {
	// DB_TIMEOUT at the most an import allows (a chunk of importChunk
	// rows must commit within it): the default 500 ms failed TestImport
	// on a machine busy with three suites and three hosts (step 23).
	env := map[string]string{"DATABASE_URL": dsn, "DB_TIMEOUT": "5s"}
	for i := 0; i+1 < len(more); i += 2 {
		env[more[i]] = more[i+1]
	}
	return func(k string) string { return env[k] }
}

// TestImport: a file of more than two chunks, blank lines among them,
// goes in whole; each line printed is a link in Postgres, with the URL
// as a create would store it and the hash of the token printed.
func TestImport(t *testing.T) {
	for _, codes := range []string{"sequence", "random"} {
		t.Run(codes, func(t *testing.T) {
			dsn := testDatabase(t)
			const n = 2*importChunk + 517
			var in strings.Builder
			for i := range n {
				fmt.Fprintf(&in, "https://Example.COM/import/%d\n", i)
				if i%1000 == 0 {
					in.WriteString("\n  \n")
				}
			}
			file := filepath.Join(t.TempDir(), "urls.txt")
			if err := os.WriteFile(file, []byte(in.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if err := runImport(context.Background(), []string{file}, importEnv(dsn, "CODES", codes), nil, &out, &errOut); err != nil {
				t.Fatalf("import: %v (stderr %q)", err, errOut.String())
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) != n {
				t.Fatalf("%d lines printed, want %d", len(lines), n)
			}
			s := openTestStoreOn(t, dsn)
			if got := countLinks(t, s); got != n {
				t.Fatalf("%d links in Postgres, want %d", got, n)
			}
			seen := make(map[string]bool, n)
			for i, l := range lines {
				f := strings.Split(l, "\t")
				if len(f) != 3 || !validCode(f[0]) || len(f[0]) != codeLength || seen[f[0]] {
					t.Fatalf("line %d: %q is not a new code, a token and a URL", i+1, l)
				}
				seen[f[0]] = true
				if i%997 != 0 {
					continue // every link is counted above; these are read back
				}
				if want := fmt.Sprintf("https://example.com/import/%d", i); f[2] != want {
					t.Errorf("line %d: url %q, want %q", i+1, f[2], want)
				}
				var url string
				var hash []byte
				if err := s.db.QueryRow(`SELECT url, token_hash FROM links WHERE code = $1`, f[0]).Scan(&url, &hash); err != nil {
					t.Fatalf("code %s: %v", f[0], err)
				}
				raw, err := base64.RawURLEncoding.DecodeString(f[1])
				sum := sha256.Sum256(raw)
				if err != nil || url != f[2] || !bytes.Equal(hash, sum[:]) {
					t.Errorf("code %s: stored %q and a hash that is not the printed token's", f[0], url)
				}
			}
		})
	}
}

// TestImportRefusesBadLines: one bad line, and nothing goes in; stderr
// names the lines.
func TestImportRefusesBadLines(t *testing.T) {
	dsn := testDatabase(t)
	s := openTestStoreOn(t, dsn)
	in := "https://example.com/1\nftp://example.com/2\nhttps://example.com/3\nhttps://sho.rt/loop\n"
	var out, errOut bytes.Buffer
	err := runImport(context.Background(), []string{"-"}, importEnv(dsn, "BASE_URL", "https://sho.rt"), strings.NewReader(in), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "2 of 4 lines refused") {
		t.Fatalf("import = %v, want 2 of 4 lines refused", err)
	}
	if !strings.Contains(errOut.String(), "line 2: invalid url") || !strings.Contains(errOut.String(), "line 4: url points at this shortener") {
		t.Errorf("stderr %q does not name lines 2 and 4", errOut.String())
	}
	if out.Len() != 0 || countLinks(t, s) != 0 {
		t.Errorf("printed %q and stored %d links, want nothing", out.String(), countLinks(t, s))
	}
	for _, args := range [][]string{nil, {"a", "b"}, {filepath.Join(t.TempDir(), "missing")}} {
		if err := runImport(context.Background(), args, importEnv(dsn), strings.NewReader(""), &out, &errOut); err == nil {
			t.Errorf("import %q: no error", args)
		}
	}
	if err := runImport(context.Background(), []string{"-"}, importEnv(dsn), strings.NewReader("\n\n"), &out, &errOut); err == nil {
		t.Error("import of no URLs: no error")
	}
	if err := runImport(context.Background(), []string{"-"}, importEnv(""), strings.NewReader("https://example.com/\n"), &out, &errOut); err == nil {
		t.Error("import without DATABASE_URL: no error")
	}
}

// scriptedCodes gives the codes it is given, then random ones.
type scriptedCodes struct{ codes []string }

func (s *scriptedCodes) next(context.Context) (string, error) {
	if len(s.codes) > 0 {
		c := s.codes[0]
		s.codes = s.codes[1:]
		return c, nil
	}
	return newCode(), nil
}

// TestImportCodeTaken: a code already in links (an alias, an older
// link) is not overwritten; its row gets another code, and every row
// printed is the link stored. Twice the same code within a chunk is
// never sent.
func TestImportCodeTaken(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.Save(ctx, "taken01", NewLink{URL: "https://example.com/old"}); err != nil {
		t.Fatal(err)
	}
	src := &scriptedCodes{codes: []string{"taken01", "fresh01", "fresh01", "fresh02"}}
	rows, err := importChunkOf(ctx, s.db, src, []string{"https://example.com/n1", "https://example.com/n2", "https://example.com/n3"}, testPool.timeout)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, "taken01"); err != nil || got.URL != "https://example.com/old" {
		t.Errorf("taken01 now leads to %q, %v; want the old link kept", got.URL, err)
	}
	codes := map[string]bool{}
	for _, r := range rows {
		if r.code == "taken01" || codes[r.code] {
			t.Errorf("row %q got code %q", r.url, r.code)
		}
		codes[r.code] = true
		if got, err := s.Lookup(ctx, r.code); err != nil || got.URL != r.url {
			t.Errorf("%s leads to %q, %v; want %q", r.code, got.URL, err, r.url)
		}
	}
	if !codes["fresh01"] || !codes["fresh02"] {
		t.Errorf("codes %v, want fresh01 and fresh02 among them", codes)
	}
	if n := countLinks(t, s); n != 4 {
		t.Errorf("%d links, want 4", n)
	}
}

// TestImportBOM: a byte order mark before the first URL, as spreadsheets
// write one, is not part of it.
func TestImportBOM(t *testing.T) {
	dsn := testDatabase(t)
	var out, errOut bytes.Buffer
	in := "\uFEFFhttps://example.com/bom\r\nhttps://example.com/two\r\n"
	if err := runImport(context.Background(), []string{"-"}, importEnv(dsn), strings.NewReader(in), &out, &errOut); err != nil {
		t.Fatalf("import: %v (stderr %q)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "\thttps://example.com/bom\n") || !strings.Contains(out.String(), "\thttps://example.com/two\n") {
		t.Errorf("printed %q, want both URLs", out.String())
	}
}

// failingWriter fails every write: standard output closed, or full.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestImportStopsWhenOutputFails: once a chunk's lines cannot be written,
// the import stops, says how many links went in without their lines, and
// imports nothing more.
func TestImportStopsWhenOutputFails(t *testing.T) {
	dsn := testDatabase(t)
	var in strings.Builder
	for i := range importChunk + 1 {
		fmt.Fprintf(&in, "https://example.com/full/%d\n", i)
	}
	var errOut bytes.Buffer
	err := runImport(context.Background(), []string{"-"}, importEnv(dsn), strings.NewReader(in.String()), failingWriter{}, &errOut)
	want := fmt.Sprintf("%d links imported, but the lines of the last %d", importChunk, importChunk)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("import = %v, want %q", err, want)
	}
	if n := countLinks(t, openTestStoreOn(t, dsn)); n != importChunk {
		t.Errorf("%d links stored, want the first chunk's %d and no more", n, importChunk)
	}
}
