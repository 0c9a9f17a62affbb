package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
)

// maxBodyBytes bounds a POST /shorten body: a 2,048-byte URL, JSON-escaped,
// fits with room to spare, and a client cannot make the server read more.
const maxBodyBytes = 8 << 10

// maxCodeAttempts is how many fresh codes handleShorten tries before giving
// up. With 62^7 codes a second attempt is already a once-in-millions event.
const maxCodeAttempts = 5

// Store is where links live: memoryStore (step 01) or pgStore (step 02).
// Save returns ErrCodeTaken if code is in use; Lookup returns ErrNotFound.
type Store interface {
	Save(ctx context.Context, code, url string) error
	Lookup(ctx context.Context, code string) (string, error)
}

var (
	// ErrBadRequest is wrapped by every reason a request body is refused.
	ErrBadRequest = errors.New("bad request")
	// ErrOwnHost means the URL points at the shortener itself, which would
	// make a redirect loop.
	ErrOwnHost = errors.New("url points at this shortener")
)

func handleShorten(store Store, cfg config, log *slog.Logger) http.Handler {
	type request struct {
		URL string `json:"url"`
	}
	type response struct {
		Code     string `json:"code"`
		ShortURL string `json:"short_url"`
		URL      string `json:"url"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, r, log, err)
			return
		}
		if req.URL == "" {
			writeError(w, r, log, fmt.Errorf(`%w: field "url" is required`, ErrBadRequest))
			return
		}
		u, err := normalizeURL(req.URL)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if h := u.Hostname(); sameHost(h, cfg.baseHost) || sameHost(h, requestHost(r)) {
			writeError(w, r, log, ErrOwnHost)
			return
		}
		target := u.String()
		code, err := saveWithNewCode(r.Context(), store, target)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		short := shortURL(cfg, r, code)
		w.Header().Set("Location", short)
		writeJSON(w, r, log, http.StatusCreated, response{Code: code, ShortURL: short, URL: target})
	})
}

// saveWithNewCode stores target under a fresh random code, drawing again if
// the code is taken.
func saveWithNewCode(ctx context.Context, store Store, target string) (string, error) {
	for range maxCodeAttempts {
		code := newCode()
		if reservedCodes[code] {
			continue
		}
		err := store.Save(ctx, code, target)
		if errors.Is(err, ErrCodeTaken) {
			continue
		}
		if err != nil {
			return "", err
		}
		return code, nil
	}
	return "", fmt.Errorf("save: no free code after %d attempts", maxCodeAttempts)
}

func handleRedirect(store Store, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := r.PathValue("code")
		if !validCode(code) {
			writeError(w, r, log, ErrNotFound)
			return
		}
		target, err := store.Lookup(r.Context(), code)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		w.Header().Set("Location", target)
		w.WriteHeader(http.StatusFound)
	})
}

func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok") //nolint:errcheck // a failed write means the client left; nothing to do
	})
}

// decodeJSON reads one JSON object from the body into dst, refusing bodies
// over maxBodyBytes, unknown fields and anything after the object.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var maxErr *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &maxErr):
			return err
		case errors.Is(err, io.EOF):
			return fmt.Errorf(`%w: body is empty; send {"url":"https://…"}`, ErrBadRequest)
		case errors.As(err, &typeErr):
			if typeErr.Field == "" {
				return fmt.Errorf(`%w: body must be a JSON object like {"url":"https://…"}`, ErrBadRequest)
			}
			return fmt.Errorf("%w: field %q must be a %s", ErrBadRequest, typeErr.Field, typeErr.Type)
		default:
			return fmt.Errorf("%w: malformed JSON: %v", ErrBadRequest, strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return err
		}
		return fmt.Errorf("%w: body must hold one JSON object and nothing after it", ErrBadRequest)
	}
	return nil
}

// errorStatus maps an error to the status code and message a client sees.
// Only errors that describe the client's own input keep their text; anything
// else is an internal error, and its text goes to the log alone.
func errorStatus(err error) (int, string) {
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxErr.Limit)
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrInvalidURL):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, ErrOwnHost):
		return http.StatusBadRequest, "invalid url: points at this shortener, which would redirect to itself"
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "not found"
	case errors.Is(err, context.DeadlineExceeded):
		// A backend took longer than its deadline: say so, and that
		// trying again may work, rather than a bare 500.
		return http.StatusServiceUnavailable, "temporarily unavailable, try again"
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer, and it is not
		// a server error worth a log line.
		return http.StatusServiceUnavailable, "request cancelled"
	default:
		return http.StatusInternalServerError, "internal error"
	}
}

func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	status, msg := errorStatus(err)
	if status == http.StatusInternalServerError {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, r, log, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, r *http.Request, log *slog.Logger, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		log.Error("encode response", "method", r.Method, "path", r.URL.Path, "err", err)
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n')) //nolint:errcheck // a failed write means the client left; nothing to do
}

// shortURL is BASE_URL/code, or, without BASE_URL, built from the host the
// client asked for (port kept).
func shortURL(cfg config, r *http.Request, code string) string {
	if cfg.baseURL != "" {
		return cfg.baseURL + "/" + code
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/" + code
}

// requestHost is the host name the client used to reach us, in asciiHost's
// form, or "" if there is none.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host, err := asciiHost(strings.Trim(host, "[]"))
	if err != nil {
		return ""
	}
	return host
}
