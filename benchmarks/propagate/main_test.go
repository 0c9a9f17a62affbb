package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// fakeLinks is what the instances share: one link, its URL, deleted or
// not. An instance that is deaf never sees a change made elsewhere.
type fakeLinks struct {
	mu      sync.Mutex
	url     string
	deleted bool
	stale   map[int]string // deaf instance → the URL it keeps serving
	patches int
}

const fakeToken = "tok"

func (f *fakeLinks) instance(i int, deaf bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/api/links/") {
			if r.Header.Get("Authorization") != "Bearer "+fakeToken {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			switch r.Method {
			case http.MethodPatch:
				var body struct{ URL string }
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				f.url = body.URL
				f.patches++
				w.WriteHeader(http.StatusOK)
			case http.MethodDelete:
				f.deleted = true
				w.WriteHeader(http.StatusNoContent)
			}
			return
		}
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"code":"abcdefg","token":"` + fakeToken + `"}`)) //nolint:errcheck // a test server
			return
		}
		url := f.url
		if deaf {
			url = f.stale[i]
		} else if f.deleted {
			w.WriteHeader(http.StatusGone)
			return
		}
		w.Header().Set("Location", url)
		w.WriteHeader(http.StatusFound)
	})
}

func TestProbe(t *testing.T) {
	f := &fakeLinks{url: "https://example.com/0", stale: map[int]string{2: "https://example.com/old"}}
	var bases []string
	for i, deaf := range []bool{false, false, true} {
		s := httptest.NewServer(f.instance(i, deaf))
		t.Cleanup(s.Close)
		bases = append(bases, s.URL)
	}
	var out, errs bytes.Buffer
	args := []string{"-instances", strings.Join(bases, ","), "-n", "4", "-every", "0", "-timeout", "50ms", "-delete"}
	env := func(k string) string {
		if k == "PROPAGATE_TOKEN" {
			return fakeToken
		}
		return ""
	}
	if err := run(context.Background(), append(args, "-code", "abcdefg"), env, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	text := out.String()
	t.Logf("\n%s", text)
	if f.patches != 4 || !f.deleted {
		t.Errorf("%d edits and deleted %v, want 4 and true", f.patches, f.deleted)
	}
	if strings.Contains(text, "-token="+fakeToken) || !strings.Contains(text, "-token=(not shown)") {
		t.Errorf("the header shows the token, or does not say it was left out")
	}
	for _, want := range []string{
		`(?m)^# propagate .*-n=4`,
		`(?m)^# date `,
		`(?m)^   1    0  +\d+\.\d\d  +\d+\.\d\d  +\d+\.\d\d     never$`,
		`(?m)^   4    0 `, // the fourth edit through the first instance again
		`(?m)^inst2 +0 +- +- +- +- +4$`,
		`(?m)^all +8 +\d`,
		`(?m)^# never converged within 50ms: 4 of 12$`,
		`(?m)^delete via 1: .* inst2 never$`,
		`(?m)^# never converged within 50ms: 1 of 3$`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("output does not match %s", want)
		}
	}

	// Without -code, a link is made first.
	f.deleted = false
	out.Reset()
	if err := run(context.Background(), []string{"-instances", bases[0], "-n", "1", "-every", "0"}, func(string) string { return "" }, &out, &errs); err != nil {
		t.Fatalf("run creating its link: %v", err)
	}
	if !strings.Contains(out.String(), "code abcdefg (created for this run)") {
		t.Errorf("output does not say the link was created:\n%s", out.String())
	}
}

func TestProbeRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-instances", "http://x", "-n", "0"},
		{"-instances", "http://x", "-poll", "0"},
		{"-instances", "http://x", "-method", "POST"},
		{"-instances", "http://x", "-code", "abcdefg"}, // no token
		{"-instances", "http://x", "extra"},
	} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errs); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}
