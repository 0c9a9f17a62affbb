package main

import (
	"os"
	"os/exec"
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

// TestConfigurationDocumented: every environment variable the program
// reads is in a table of docs/configuration.md, and every one there is
// read, so that the reference and the code cannot drift apart.
func TestConfigurationDocumented(t *testing.T) {
	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	firstCell := regexp.MustCompile(`(?m)^\| ([^|]*)\|`)
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")
	for _, cell := range firstCell.FindAllStringSubmatch(string(doc), -1) {
		for _, n := range name.FindAllStringSubmatch(cell[1], -1) {
			documented[n[1]] = true
		}
	}
	read := map[string]bool{}
	if _, err := loadConfig(func(k string) string { read[k] = true; return "" }); err != nil {
		t.Fatalf("loadConfig with nothing set: %v", err)
	}
	if len(read) < 40 {
		t.Fatalf("loadConfig asked for %d variables; the recording getenv saw too few to trust", len(read))
	}
	for n := range read {
		if !documented[n] {
			t.Errorf("%s is read by loadConfig but has no row in docs/configuration.md", n)
		}
	}
	for n := range documented {
		if !read[n] {
			t.Errorf("%s has a row in docs/configuration.md but loadConfig never reads it", n)
		}
	}
}

// TestDocLinksResolve: every relative link in the README, the article and
// the docs names a file that is in the tree (after step 23 moved the
// README's reference tables into docs/).
func TestDocLinksResolve(t *testing.T) {
	files := []string{"README.md", "article.md", "benchmarks/README.md"}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs found (err %v)", err)
	}
	files = append(files, docs...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	code := regexp.MustCompile("`[^`\n]*`") // Go code such as f[int](x) is not a link
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(code.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which is not there", f, m[1])
			}
			checked++
		}
	}
	if checked < 100 {
		t.Errorf("checked %d links; expected hundreds (did the pattern stop matching?)", checked)
	}
}

// TestCIScriptsLoad checks what bash -n cannot: that .ci/lib.sh, sourced as
// .ci/run sources it, prints nothing and fails nothing, and that every known
// erratum it lists reads as "steps|Test|why". Step 28's first submission
// failed CI after one second on an apostrophe that ended the list's string.
func TestCIScriptsLoad(t *testing.T) {
	for _, f := range []string{".ci/run", ".ci/job", ".ci/tryit", ".ci/quickstart", ".ci/lib.sh"} {
		if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", f, err, out)
		}
	}
	cmd := exec.Command("bash", "-c", `set -euo pipefail; . .ci/lib.sh; printf '%s\n' "$known_flakes"`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("sourcing .ci/lib.sh: %v\n%s", err, stderr.String())
	}
	entry := regexp.MustCompile(`^([0-9][0-9] )*[0-9][0-9]\|Test[A-Za-z0-9_]+\|[^|]+$`)
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		n++
		if !entry.MatchString(line) {
			t.Errorf("known_flakes entry %q is not \"NN NN|TestName|why\"", line)
		}
	}
	if n == 0 {
		t.Error("known_flakes is empty: the list did not load")
	}
}
