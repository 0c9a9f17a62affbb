package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// findPromtool is promtool's path: CI installs it (Debian's prometheus
// package ships it); elsewhere its absence skips the alert tests, saying so.
func findPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found, so deploy/alerts.yml is not tested (Debian/Ubuntu: sudo apt-get install prometheus)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	return p
}

// TestAlertRules: deploy/alerts.yml is valid, each rule fires on the
// series deploy/alerts_test.yml makes to fire it and is silent on the
// others, and deploy/prometheus.yml, which loads the rules, is valid.
func TestAlertRules(t *testing.T) {
	promtool := findPromtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "deploy"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// prometheus.yml names targets.json, which the scripts write beside
	// it: checked in a copy with both.
	dir := t.TempDir()
	for _, f := range []string{"prometheus.yml", "alerts.yml"} {
		b, err := os.ReadFile("deploy/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/"+f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dir+"/targets.json", []byte(`[{"targets": ["127.0.0.1:6060"]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "config", "prometheus.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// TestAlertMetricsExist: every metric deploy/alerts.yml reads is one the
// code defines, so that a renamed metric cannot leave a rule that never
// fires.
func TestAlertMetricsExist(t *testing.T) {
	rules, err := os.ReadFile("deploy/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".go") && !strings.HasSuffix(f.Name(), "_test.go") {
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	names := regexp.MustCompile(`\bshortener_([a-z_]+)`).FindAllStringSubmatch(string(rules), -1)
	if len(names) < 10 {
		t.Fatalf("%d metric names found in deploy/alerts.yml, want the rules' (at least 10)", len(names))
	}
	for _, m := range names {
		name := strings.TrimSuffix(m[1], "_bucket")
		if !strings.Contains(src.String(), `"`+name+`"`) {
			t.Errorf("deploy/alerts.yml reads shortener_%s, which no metric in the code is named", m[1])
		}
	}
}
