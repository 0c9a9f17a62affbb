package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
)

// TestErrorStatusHidesInternalText feeds errorStatus errors whose text must
// not reach a client, and checks the status and that none of it does.
func TestErrorStatusHidesInternalText(t *testing.T) {
	const secret = "10.1.2.3:5432"
	netErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5432}, Err: err}
	}
	tests := []struct {
		name   string
		err    error
		status int
	}{
		{"body read timeout", bodyReadError(netErr(os.ErrDeadlineExceeded)), http.StatusRequestTimeout},
		{"body connection reset", bodyReadError(netErr(syscall.ECONNRESET)), http.StatusBadRequest},
		{"body cut short", bodyReadError(fmt.Errorf("%s: %w", secret, io.ErrUnexpectedEOF)), http.StatusBadRequest},
		{"decoder error that is not about the JSON", decodeError(errors.New("json: cannot decode into " + secret)), http.StatusInternalServerError},
		{"store failure", fmt.Errorf("store: save: dial tcp %s: connection refused", secret), http.StatusInternalServerError},
		{"store timeout", fmt.Errorf("store: get %s: %w", secret, context.DeadlineExceeded), http.StatusServiceUnavailable},
		// The client hung up: 499, not a server error (issue 24, item 9).
		{"client hung up", fmt.Errorf("store: get %s: %w", secret, context.Canceled), statusClientClosed},
		// Postgres out of reach (a failover): 503, to be tried again.
		{"store connection closed by a proxy with no server", fmt.Errorf("store: save %q: batch of 1: insert: %w", secret, io.EOF), http.StatusServiceUnavailable},
		{"store connection refused", fmt.Errorf("codes: take a block: %w", netErr(syscall.ECONNREFUSED)), http.StatusServiceUnavailable},
		{"store is a standby now", fmt.Errorf("store: save: %w", &pq.Error{Code: "25006", Message: "cannot execute INSERT in a read-only transaction " + secret}), http.StatusServiceUnavailable},
		{"store shutting down", fmt.Errorf("store: save: %w", &pq.Error{Code: "57P01", Message: secret}), http.StatusServiceUnavailable},
		{"store connection failure", fmt.Errorf("store: save: %w", &pq.Error{Code: "08006", Message: secret}), http.StatusServiceUnavailable},
		// Postgres said no: a bug or bad data, not an outage.
		{"store refused the statement", fmt.Errorf("store: save: %w", &pq.Error{Code: "23505", Message: secret}), http.StatusInternalServerError},
		{"store syntax error", fmt.Errorf("store: save: %w", &pq.Error{Code: "42601", Message: secret}), http.StatusInternalServerError},
		{"store protocol violation (a bug, though of class 08)", fmt.Errorf("store: save: %w", &pq.Error{Code: "08P01", Message: secret}), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		status, msg, _ := errorStatus(tt.err)
		if status != tt.status {
			t.Errorf("%s: status = %d, want %d", tt.name, status, tt.status)
		}
		if strings.Contains(msg, secret) || strings.Contains(msg, "10.1.2.3") {
			t.Errorf("%s: message %q shows internal text", tt.name, msg)
		}
	}
}

// TestRetryAfter checks that every 429 and 503 says when to come back, in
// whole seconds, and that no other status does.
func TestRetryAfter(t *testing.T) {
	tests := []struct {
		err    error
		status int
		retry  string
	}{
		{&rateLimitedError{retryAfter: 100 * time.Millisecond}, http.StatusTooManyRequests, "1"},
		{&rateLimitedError{retryAfter: 2500 * time.Millisecond}, http.StatusTooManyRequests, "3"},
		{fmt.Errorf("wrapped: %w", &rateLimitedError{retryAfter: 4 * time.Second}), http.StatusTooManyRequests, "4"},
		{ErrOverloaded, http.StatusServiceUnavailable, "1"},
		{fmt.Errorf("store: save %q: %w", "abcdefg", errGroupCommitClosed), http.StatusServiceUnavailable, "1"},
		{fmt.Errorf("store: lookup: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "1"},
		{ErrNotFound, http.StatusNotFound, ""},
		{errors.New("boom"), http.StatusInternalServerError, ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		writeError(rec, httptest.NewRequest("GET", "/x", nil), discardLog, tt.err)
		if rec.Code != tt.status {
			t.Errorf("%v: status %d, want %d", tt.err, rec.Code, tt.status)
		}
		if got := rec.Header().Get("Retry-After"); got != tt.retry {
			t.Errorf("%v: Retry-After %q, want %q", tt.err, got, tt.retry)
		}
		jsonError(t, rec)
	}
}

// TestNotFoundFastPath: a bare ErrNotFound takes writeError's shortcut,
// and a wrapped one the general way; a client must not be able to tell
// them apart, header or byte.
func TestNotFoundFastPath(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := httptest.NewRequest("GET", "/AAAAAAA", nil)
	fast, slow := httptest.NewRecorder(), httptest.NewRecorder()
	writeError(fast, r, log, ErrNotFound)
	writeError(slow, r, log, fmt.Errorf("lookup: %w", ErrNotFound))
	if fast.Code != http.StatusNotFound || slow.Code != http.StatusNotFound {
		t.Fatalf("status %d and %d, want 404 both", fast.Code, slow.Code)
	}
	if !reflect.DeepEqual(fast.Header(), slow.Header()) {
		t.Errorf("headers differ: %v against %v", fast.Header(), slow.Header())
	}
	if fast.Body.String() != slow.Body.String() {
		t.Errorf("bodies differ: %q against %q", fast.Body.String(), slow.Body.String())
	}
}
