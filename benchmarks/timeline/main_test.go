package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTimeline feeds four results over three seconds, two of them
// failures, and checks each second's line, the failure window, and the
// codes of the successes.
func TestTimeline(t *testing.T) {
	// Bodies are base64, as vegeta encodes them: {"code":"abc"} and {"code":"xyz"}.
	in := strings.Join([]string{
		`{"code":201,"timestamp":"2026-12-02T10:00:00.100Z","latency":2000000,"error":"","body":"eyJjb2RlIjoiYWJjIn0="}`,
		`{"code":503,"timestamp":"2026-12-02T10:00:01.200Z","latency":500000000,"error":"503 Service Unavailable","body":"eyJlcnJvciI6InNlcnZlciBidXN5In0K","headers":{"X-Request-Id":["0123abcd"]}}`,
		`{"code":0,"timestamp":"2026-12-02T10:00:01.700Z","latency":10000000,"error":"Post \"http://x/shorten\": dial tcp: connection refused","body":""}`,
		`{"code":201,"timestamp":"2026-12-02T10:00:02.300Z","latency":4000000,"error":"","body":"eyJjb2RlIjoieHl6In0="}`,
	}, "\n") + "\n"
	codes := filepath.Join(t.TempDir(), "codes")
	var out strings.Builder
	// t0 at 10:00:00 UTC, the harm at 10:00:01.5.
	const t0 = "1796205600"
	if err := run([]string{"-ok", "201", "-t0", t0, "-mark", "1796205601.5", "-codes", codes}, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"     0      1      1      0       2.0       2.0  \n",
		"     1      2      0      2     500.0     500.0  <-- harm done here; 1×0 connection refused; 1×503 503 Service Unavailable\n",
		"     2      1      1      0       4.0       4.0  \n",
		"total: 4 sent, 2 ok, 2 failed\n",
		"failures: from 1.2 s to 1.7 s (0.5 s, first request sent to last failure's answer)\n",
		"failed answers (2 of 2): second, status, latency, X-Request-Id, body or error\n",
		"     1.20  503     500.0 ms  0123abcd  {\"error\":\"server busy\"}\n",
		"     1.70    0      10.0 ms  -  Post \"http://x/shorten\": dial tcp: connection refused\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
	b, err := os.ReadFile(codes)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "abc\nxyz\n" {
		t.Errorf("codes = %q, want abc and xyz", b)
	}
}

// TestTimelineRefusesASuccessWithoutCode: a 201 whose body names no code
// cannot be looked for afterwards; that is an error, not a skipped line.
func TestTimelineRefusesASuccessWithoutCode(t *testing.T) {
	in := `{"code":201,"timestamp":"2026-12-02T10:00:00Z","latency":1,"error":"","body":"e30="}` + "\n"
	var out strings.Builder
	err := run([]string{"-ok", "201", "-codes", filepath.Join(t.TempDir(), "c")}, strings.NewReader(in), &out)
	if err == nil || !strings.Contains(err.Error(), "no code") {
		t.Errorf("err = %v, want one about the missing code", err)
	}
}
