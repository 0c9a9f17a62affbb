package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocQuotesCode checks that every ```go block in the newest step's doc
// stands, line for line, in this commit's Go files (and every ```sql block
// in its sql/ files). Each step's commit runs
// this against its own doc, so prose cannot drift from the code it quotes. A
// line "// ..." in a block marks an elision: the parts on either side are
// checked separately.
func TestDocQuotesCode(t *testing.T) {
	docs, err := filepath.Glob("docs/[0-9][0-9]-*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no step docs found (err %v)", err)
	}
	sort.Strings(docs)
	newest := docs[len(docs)-1]
	doc, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	for lang, glob := range map[string]string{"go": "*.go", "sql": "sql/*.sql"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		if lang == "go" {
			// The measuring programs under benchmarks/ are quoted too.
			more, err := filepath.Glob("benchmarks/*/*.go")
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, more...)
		}
		var code strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			code.WriteString(normalizeLines(string(b)))
			code.WriteString("\n")
		}
		src := code.String()
		blocks := regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
		for i, m := range blocks {
			for _, part := range strings.Split(m[1], "// ...\n") {
				part = normalizeLines(part)
				if strings.TrimSpace(part) == "" {
					continue
				}
				if !strings.Contains(src, part) {
					t.Errorf("%s: %s block %d is not in %s:\n%s", newest, lang, i+1, glob, part)
				}
			}
		}
	}
}

// normalizeLines trims each line, so that a quote may be indented
// differently from its source.
func normalizeLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}
