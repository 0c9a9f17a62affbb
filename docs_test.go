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
	// Inline links, and (step 44) reference definitions: [e]: docs/errata.md.
	link := regexp.MustCompile(`(?m)\]\(([^)\s]+)\)|^\[[^\]]+\]: (\S+)$`)
	code := regexp.MustCompile("`[^`\n]*`") // Go code such as f[int](x) is not a link
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(code.ReplaceAllString(string(b), ""), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which is not there", f, m[1]+m[2])
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

// TestReadmeStaysShort: the README reads in three minutes (issue 23): at
// most readmeMaxBytes, and a step table with one row per step doc, each
// headline one sentence of at most 25 words once its links to outputs and
// its erratum link are left out. A new step's row is paid for by
// shortening others (step 41 brought it from 14,743 bytes to under 12 KiB).
func TestReadmeStaysShort(t *testing.T) {
	const readmeMaxBytes = 12 << 10
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > readmeMaxBytes {
		t.Errorf("README.md is %d bytes, over %d: shorten it (headlines, or move a section to docs/)", len(b), readmeMaxBytes)
	}
	docs, err := filepath.Glob("docs/[0-9][0-9]-*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no step docs found (err %v)", err)
	}
	row := regexp.MustCompile(`(?m)^\| ([0-9][0-9]) \| \[[^\]]+\]\((docs/[0-9][0-9]-[^)]+\.md)\) \| (.*) \|$`)
	// A parenthesis of links only: ([output](x)) or ([1](a), [2](b)).
	linksOnly := regexp.MustCompile(`\s*\((\[[^\]]*\]\([^)\s]+\)(, )?)+\)`)
	// The erratum link: [†] since step 42, [Erratum] before; since step
	// 44 a reference, [†][e], defined once under the table (13 bytes a
	// row less).
	erratum := regexp.MustCompile(`\s*\[(Erratum|†)\](\(docs/errata\.md\)|\[e\])`)
	if strings.Contains(string(b), "[†][e]") && !regexp.MustCompile(`(?m)^\[e\]: docs/errata\.md$`).Match(b) {
		t.Error("README.md uses [†][e] but does not define [e]: docs/errata.md")
	}
	link := regexp.MustCompile(`\[([^\]]*)\]\([^)\s]+\)`)
	rows := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if !strings.HasPrefix(m[2], "docs/"+m[1]+"-") {
			t.Errorf("README row %s links %s, another step's doc", m[1], m[2])
		}
		rows[m[2]] = true
		text := link.ReplaceAllString(linksOnly.ReplaceAllString(erratum.ReplaceAllString(m[3], ""), ""), "$1")
		if n := len(strings.Fields(text)); n > 25 {
			t.Errorf("README row %s: headline of %d words, want at most 25: %s", m[1], n, text)
		}
	}
	for _, d := range docs {
		if !rows[d] {
			t.Errorf("README.md has no step row linking %s", d)
		}
	}
}

// TestUnfixStillApplies: every substitution benchmarks/unfix.sh makes to
// undo a fix still changes the file it names. Nothing else runs that
// script, and four of its substitutions had stopped matching (after code
// moved or changed in steps 36, 39 and 40) before step 41 found them; a
// stale one would make the script stop with "out of date" the day
// someone needs it.
func TestUnfixStillApplies(t *testing.T) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		msg := "perl not found, so benchmarks/unfix.sh's substitutions are not checked"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	b, err := os.ReadFile("benchmarks/unfix.sh")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(b), "\nfixes='\n")
	list, _, ok2 := strings.Cut(list, "\n'\n")
	if !ok || !ok2 {
		t.Fatal("benchmarks/unfix.sh has no fixes='...' list")
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 4 {
			t.Errorf("unfix.sh entry %q is not name|file|substitution|test", line)
			continue
		}
		name, file, subst := f[0], f[1], f[2]
		src, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		cmd := exec.Command(perl, "-0777", "-pe", subst)
		cmd.Stdin = strings.NewReader(string(src))
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s: perl -0777 -pe '%s' %s: %v", name, subst, file, err)
			continue
		}
		if string(out) == string(src) {
			t.Errorf("%s: its substitution no longer changes %s: update benchmarks/unfix.sh", name, file)
		}
		n++
	}
	if n < 30 {
		t.Errorf("checked %d substitutions; unfix.sh lists more (did the list's format change?)", n)
	}
}
