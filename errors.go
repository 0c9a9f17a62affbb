package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Every error a client can be told about is here, beside errorStatus, the
// one function that turns an error into a status code and a message.
var (
	// ErrBadRequest is wrapped by every reason a request body is refused.
	ErrBadRequest = errors.New("bad request")
	// ErrInvalidURL is wrapped by every reason normalizeURL refuses a URL;
	// the text after it is safe to show to the client.
	ErrInvalidURL = errors.New("invalid url")
	// ErrOwnHost means the URL points at the shortener itself, which would
	// make a redirect loop.
	ErrOwnHost = errors.New("url points at this shortener")
	// ErrBodyTimeout means the request body did not arrive before the
	// server's read deadline. The error it wraps names the server's socket
	// address, so only the log sees it.
	ErrBodyTimeout = errors.New("request body not received in time")
	// ErrBodyRead means the connection failed while the body was being
	// read (reset, or closed before Content-Length bytes). As with
	// ErrBodyTimeout, the wrapped error is for the log alone.
	ErrBodyRead = errors.New("request body could not be read")
	// ErrNotFound means no link has that code.
	ErrNotFound = errors.New("not found")
	// ErrGone means the link existed and is no more: deleted, past its
	// expires_at, or out of clicks (max_clicks). 410, not 404: the code
	// is not free, and never will be.
	ErrGone = errors.New("gone")
	// ErrUnauthorized means an edit came without a token, or with
	// something that is not one: 401, with WWW-Authenticate: Bearer.
	// The text after it is ours alone (never the header's value).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden means the token is not this link's, or the link has
	// no token (made before tokens existed): 403, nothing changed.
	ErrForbidden = errors.New("token does not match this link")
	// ErrCodeTaken means a link with that code exists already.
	ErrCodeTaken = errors.New("code already taken")
	// ErrAliasTaken means a create asked for an alias that a link has,
	// or had (a deleted link keeps its code): 409.
	ErrAliasTaken = errors.New("alias taken")
	// ErrOverloaded means the server has as many requests in flight as
	// MAX_IN_FLIGHT allows, and refused this one rather than queue it.
	ErrOverloaded = errors.New("server busy")
	// errGroupCommitClosed means a create arrived after the store began
	// to close (a shutdown): another instance, or this one restarted, can
	// take it, so it is a 503 with Retry-After, not a server error.
	errGroupCommitClosed = errors.New("group commit closed")
	// errStatsOff means stats were asked for and this deployment keeps
	// none: STATS=off, no Postgres, or CLICKS=off.
	errStatsOff = errors.New("stats are off")
)

// rateLimitedError means the client has used up its allowance of creates;
// retryAfter is how long until the next one would be allowed.
type rateLimitedError struct {
	retryAfter time.Duration
}

func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("rate limited: retry after %v", e.retryAfter)
}

// statusClientClosed is the status recorded for a request whose client
// hung up before its answer was ready: nginx's 499 (not in any RFC; no
// client reads it, it is for the logs and metrics).
const statusClientClosed = 499

// unavailableRetry is the Retry-After of every 503: a backend that timed
// out or a server that is full may well have room a second later, and a
// client that waits that long spreads the retries out.
const unavailableRetry = time.Second

// backendSlowLog samples the log lines for requests that a backend's
// deadline cut short: in an outage there is one per request. It is shared
// by every handler (the log it writes to is the caller's).
var backendSlowLog = &sampledLog{every: 10 * time.Second}

// backendDownLog samples the log lines for requests answered 503 because
// Postgres could not be reached (pgUnreachable).
var backendDownLog = &sampledLog{every: 10 * time.Second}

// errorStatus maps an error to the status code and message a client sees,
// and, for 429 and 503, how long it should wait before trying again. Only
// errors that describe the client's own input keep their text; anything
// else is an internal error, and its text goes to the log alone.
func errorStatus(err error) (status int, msg string, retryAfter time.Duration) {
	var maxErr *http.MaxBytesError
	var limited *rateLimitedError
	switch {
	case errors.As(err, &maxErr):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxErr.Limit), 0
	case errors.Is(err, ErrBodyTimeout):
		return http.StatusRequestTimeout, ErrBodyTimeout.Error(), 0
	case errors.Is(err, io.ErrUnexpectedEOF) && errors.Is(err, ErrBodyRead):
		return http.StatusBadRequest, "request body ended early", 0
	case errors.Is(err, ErrBodyRead):
		return http.StatusBadRequest, ErrBodyRead.Error(), 0
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrInvalidURL):
		// Every error wrapping these is built from our own text and the
		// client's input, never from another error's text.
		return http.StatusBadRequest, err.Error(), 0
	case errors.Is(err, ErrOwnHost):
		return http.StatusBadRequest, "invalid url: points at this shortener, which would redirect to itself", 0
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "not found", 0
	case errors.Is(err, ErrGone):
		return http.StatusGone, "gone: this link was deleted, has expired, or has had all its clicks", 0
	case errors.Is(err, ErrUnauthorized):
		// Built from our own text alone (bearerHash): safe to show.
		return http.StatusUnauthorized, err.Error(), 0
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "forbidden: the token is not this link's, or the link was made without one and cannot be changed", 0
	case errors.Is(err, ErrAliasTaken):
		return http.StatusConflict, "alias taken: a link has this alias, or had it; choose another", 0
	case errors.As(err, &limited):
		return http.StatusTooManyRequests, "too many requests from your address (creates, edits and stats reads share one allowance); try again later", limited.retryAfter
	case errors.Is(err, ErrOverloaded):
		return http.StatusServiceUnavailable, "server busy, try again", unavailableRetry
	case errors.Is(err, errGroupCommitClosed):
		return http.StatusServiceUnavailable, "shutting down, try again", unavailableRetry
	case errors.Is(err, errStatsOff):
		return http.StatusNotImplemented, "stats are off here: they need Postgres, CLICKS not off and STATS=on", 0
	case errors.Is(err, context.DeadlineExceeded):
		// A backend took longer than its deadline: say so, and that
		// trying again may work, rather than a bare 500.
		return http.StatusServiceUnavailable, "temporarily unavailable, try again", unavailableRetry
	case errors.Is(err, context.Canceled):
		// The client went away: nobody reads this answer, and it is not
		// a server error. Before step 27 it was a 503, so a slow Postgres
		// and impatient clients read as a storm of 5xx on the dashboards;
		// 499 is nginx's code for it, and the error rate leaves it out
		// (docs/27).
		return statusClientClosed, "client closed request", 0
	case pgUnreachable(err):
		// Postgres could not be reached, or is no primary now: during a
		// failover, HAProxy takes the connection and closes it (EOF)
		// until a standby is promoted. The same request will work in a
		// few seconds; it is not a bug in this program.
		return http.StatusServiceUnavailable, "temporarily unavailable, try again", unavailableRetry
	default:
		return http.StatusInternalServerError, "internal error", 0
	}
}

// notFoundBody is a 404's body, made once: what writeJSON would write for
// ErrNotFound, byte for byte.
var notFoundBody = []byte("{\"error\":\"not found\"}\n")

// jsonContentType is the Content-Type of every JSON answer, as a header
// value that can be set without Header.Set's check and copy.
var jsonContentType = []string{"application/json"}

func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if err == ErrNotFound {
		// A flood of unknown codes (step 15) is answered here, and after
		// the Bloom filter, this was most of a 404's cost: errorStatus's
		// errors.As (reflection) and errors.Is, then json.Marshal of a
		// map. The store returns ErrNotFound itself, never wrapped, on
		// that path; a wrapped one takes the general way below.
		w.Header()["Content-Type"] = jsonContentType
		w.WriteHeader(http.StatusNotFound)
		w.Write(notFoundBody) //nolint:errcheck // a failed write means the client left; nothing to do
		return
	}
	status, msg, retryAfter := errorStatus(err)
	switch {
	case status == http.StatusInternalServerError:
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "client", clientIPFrom(r.Context()), "err", err)
	case errors.Is(err, context.DeadlineExceeded):
		// A backend was too slow: the operator needs to know which, but
		// under an outage this is one line per request, so it is sampled.
		backendSlowLog.warnTo(r.Context(), log, "backend deadline exceeded", err)
	case status == http.StatusServiceUnavailable && pgUnreachable(err):
		// Postgres out of reach (a failover, or a wrong address): sampled
		// the same way, so that a 503 that never ends still shows.
		backendDownLog.warnTo(r.Context(), log, "postgres unreachable", err)
	case errors.Is(err, ErrBodyTimeout), errors.Is(err, ErrBodyRead):
		// The client's fault, or the network's, but its detail (which
		// addresses, which deadline) is only in err, and only here.
		log.WarnContext(r.Context(), "read request body", "method", r.Method, "path", r.URL.Path, "client", clientIPFrom(r.Context()), "err", err)
	}
	if status == http.StatusRequestTimeout {
		// The rest of the body may still be on its way; the connection
		// cannot carry another request (RFC 9110, section 15.5.9).
		w.Header().Set("Connection", "close")
	}
	if status == http.StatusUnauthorized {
		// RFC 6750, section 3: a 401 names the scheme the client must use.
		w.Header().Set("WWW-Authenticate", `Bearer realm="shortener"`)
	}
	if retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(retryAfter))
	}
	writeJSON(w, r, log, status, map[string]string{"error": msg})
}

// retryAfterSeconds is d as Retry-After wants it: whole seconds, rounded
// up, at least 1 (RFC 9110, section 10.2.3, has no fractions).
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
