package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// editResults counts edits and deletes by how they ended (metrics.go):
// shortener_link_changes_total{op,result}.
type editResults func(op, result string)

// editResult is the label an edit's error gets: a fixed set, never the
// error's text.
func editResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrGone):
		return "gone"
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrInvalidURL), errors.Is(err, ErrOwnHost):
		return "bad_request"
	default:
		return "error"
	}
}

// handleEdit answers PATCH /api/links/{code}: with "Authorization: Bearer
// <token>", a JSON object with any of "url", "expires_at" (null clears
// it), "max_clicks" (null clears it) and "redirect" changes those, and
// the answer is the link as it now is (200). The token's form is checked
// before the body is read: a request without a well-formed one is 401 and
// learns nothing of the body's checks. Whether it is this link's token is
// checked by the store, after the body: a wrong token with a bad body is
// 400, with a good one 403; either way nothing changes.
//
// Once Postgres has committed, each cache in front forgets or replaces
// the code (Store.Change), and the other instances are told (see
// invalidate.go).
func handleEdit(store Store, cfg config, count editResults, log *slog.Logger) http.Handler {
	type request struct {
		URL       jsonField `json:"url"`
		ExpiresAt jsonField `json:"expires_at"`
		MaxClicks jsonField `json:"max_clicks"`
		Redirect  jsonField `json:"redirect"`
	}
	now := cfg.clock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, hash, fail, ok := changeRequest(w, r, "edit", count, log)
		if !ok {
			return
		}
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout)); err != nil &&
			!errors.Is(err, http.ErrNotSupported) {
			fail(fmt.Errorf("set body deadline: %w", err))
			return
		}
		var req request
		if err := decodeJSON(w, r, &req); err != nil {
			fail(err)
			return
		}
		var ch LinkChange
		var err error
		if !req.URL.set && !req.ExpiresAt.set && !req.MaxClicks.set && !req.Redirect.set {
			fail(fmt.Errorf(`%w: nothing to change; send any of "url", "expires_at", "max_clicks", "redirect"`, ErrBadRequest))
			return
		}
		if req.URL.set {
			raw, err := jsonString(req.URL.raw, "url")
			if err == nil && raw == "" {
				err = fmt.Errorf(`%w: field "url" must not be empty`, ErrBadRequest)
			}
			if err == nil {
				ch.URL, err = checkTarget(cfg, r, raw)
			}
			if err != nil {
				fail(err)
				return
			}
		}
		if req.ExpiresAt.set {
			ch.SetExpiry = true
			if !req.ExpiresAt.null() {
				if ch.ExpiresAt, err = parseExpiresAt(req.ExpiresAt.raw, now()); err != nil {
					fail(err)
					return
				}
			}
		}
		if req.MaxClicks.set {
			ch.SetMax = true
			if !req.MaxClicks.null() {
				if ch.MaxClicks, err = parseMaxClicks(req.MaxClicks.raw); err != nil {
					fail(err)
					return
				}
			}
		}
		if req.Redirect.set {
			if ch.Redirect, err = parseRedirect(req.Redirect.raw); err != nil {
				fail(err)
				return
			}
		}
		l, err := store.Change(r.Context(), code, hash, ch)
		if err != nil {
			fail(err)
			return
		}
		count("edit", "ok")
		writeJSON(w, r, log, http.StatusOK, newLinkJSON(l, now()))
	})
}

// handleDelete answers DELETE /api/links/{code} with the link's token: 204,
// and from then on the code answers 410 everywhere. The row stays, its URL
// blanked, so that the code is never given to another link: a printed or
// bookmarked old link must never lead somewhere new.
func handleDelete(store Store, count editResults, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, hash, fail, ok := changeRequest(w, r, "delete", count, log)
		if !ok {
			return
		}
		if _, err := store.Change(r.Context(), code, hash, LinkChange{Delete: true}); err != nil {
			fail(err)
			return
		}
		count("delete", "ok")
		w.WriteHeader(http.StatusNoContent)
	})
}

// jsonString reads a JSON string field; null, a number or anything else is
// a 400 naming the field.
func jsonString(raw []byte, field string) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("%w: field %q must be a string", ErrBadRequest, field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: field %q must be a string", ErrBadRequest, field)
	}
	return s, nil
}

// changeRequest reads what an edit and a delete both begin with: the code
// from the path and the link's token. ok is false when it has answered
// already: 404 for a code that cannot exist, 401 for a missing or
// malformed token (the body left unread, and the connection closed after
// the answer). fail answers an error, counted under action.
func changeRequest(w http.ResponseWriter, r *http.Request, action string, count editResults, log *slog.Logger) (code string, hash []byte, fail func(error), ok bool) {
	fail = func(err error) {
		count(action, editResult(err))
		writeError(w, r, log, err)
	}
	code = r.PathValue("code")
	if !validCode(code) {
		fail(ErrNotFound)
		return "", nil, fail, false
	}
	hash, err := bearerHash(r.Header)
	if err != nil {
		closeUnreadBody(w, r)
		fail(err)
		return "", nil, fail, false
	}
	return code, hash, fail, true
}
