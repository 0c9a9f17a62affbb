package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
)

// decodeJSON reads one JSON object from the body into dst, refusing bodies
// over maxBodyBytes, unknown fields, a key given twice or in another case
// (checkJSONKeys), and anything after the object.
//
// A network error's text carries the server's address ("read tcp
// 10.0.0.5:8080->…: i/o timeout"). So the body is read whole first (it is
// at most maxBodyBytes), an error from reading it is never shown as it is,
// and only the decoder's own complaints about the JSON are.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	// MaxBytesReader tells net/http's own ResponseWriter that the body was
	// too large, so that it closes the connection rather than read the
	// rest; a middleware's wrapper around it would hide that, hence unwrap.
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return bodyReadError(err)
	}
	if err := checkJSONKeys(raw, jsonFields(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return fmt.Errorf(`%w: body is empty; send {"url":"https://…"}`, ErrBadRequest)
		case errors.As(err, &typeErr):
			if typeErr.Field == "" {
				return fmt.Errorf(`%w: body must be a JSON object like {"url":"https://…"}`, ErrBadRequest)
			}
			return fmt.Errorf("%w: field %q must be a %s", ErrBadRequest, typeErr.Field, typeErr.Type)
		default:
			return decodeError(err)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body must hold one JSON object and nothing after it", ErrBadRequest)
	}
	return nil
}

// checkJSONKeys refuses an object that names a field twice, or names one
// in another case than its own. Go's decoder matches keys to fields
// without regard to case and keeps the last it reads, so
// {"url":"https://a","URL":"https://b"} was a link to b here, while a
// proxy, a log or a filter in front that reads the first key saw a
// (issue 24, item 15): one body, two readings. Keys are compared as
// Unicode case folding compares them (bytes.EqualFold), as the decoder
// does, so "\u212a" (the Kelvin sign) counts as a "k". A key that is no
// field's is left to the decoder to refuse (DisallowUnknownFields), and
// so is anything that is not an object, or not well formed.
//
// It reads the object's top level with a scanner of its own rather than
// the decoder's Token, which allocates for every key and value (a first
// version with Token cost about 3 µs and 31 allocations more per
// create's body, by benchmarks/decodecost.sh, output not kept; docs/27);
// this one allocates only for a key with an escape in it.
func checkJSONKeys(raw []byte, fields []string) error {
	var seen uint64 // bit i: fields[i] given; the request types have fewer than 64
	return topLevelKeys(raw, func(key []byte) error {
		for i, f := range fields {
			if !bytes.EqualFold(key, []byte(f)) {
				continue
			}
			switch {
			case string(key) != f:
				return fmt.Errorf("%w: key %q: write it %q (keys are case-sensitive)", ErrBadRequest, key, f)
			case i < 64 && seen&(1<<i) != 0:
				return fmt.Errorf("%w: key %q appears twice", ErrBadRequest, key)
			case i < 64:
				seen |= 1 << i
			}
			return nil
		}
		return nil
	})
}

// topLevelKeys calls fn with each key of the JSON object raw holds, at its
// top level, unescaped, in order, and returns fn's first error. When raw
// is not an object, or not one it can read, it stops and returns nil:
// the decoder then refuses it, with its own words.
func topLevelKeys(raw []byte, fn func(key []byte) error) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil
	}
	for i < len(raw) && raw[i] == '"' {
		end, escaped := stringEnd(raw, i)
		if end < 0 {
			return nil
		}
		key := raw[i+1 : end-1]
		if escaped {
			var k string
			if json.Unmarshal(raw[i:end], &k) != nil {
				return nil
			}
			key = []byte(k)
		}
		if err := fn(key); err != nil {
			return err
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return nil
		}
		if i = valueEnd(raw, skipSpace(raw, i+1)); i < 0 {
			return nil
		}
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] != ',' {
			return nil // '}' or malformed: either way, done
		}
		i = skipSpace(raw, i+1)
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the closing quote of the string that
// begins at b[i] (a '"'), and whether it holds an escape; -1 if it does
// not end.
func stringEnd(b []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// valueEnd is the index after the JSON value that begins at b[i], or -1
// if it does not end: a string, an object or array (brackets counted
// outside strings), or a number or literal (up to the next delimiter).
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}

// jsonFieldNames holds, per struct type, the keys its json tags name.
var jsonFieldNames sync.Map // reflect.Type → []string

// jsonFields is the keys the struct dst points to reads (its json tags,
// or its field names where it has none).
func jsonFields(dst any) []string {
	t := reflect.TypeOf(dst)
	if names, ok := jsonFieldNames.Load(t); ok {
		return names.([]string)
	}
	var names []string
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		st := t.Elem()
		for i := range st.NumField() {
			f := st.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-" || !f.IsExported():
				continue
			case name == "":
				name = f.Name
			}
			names = append(names, name)
		}
	}
	jsonFieldNames.Store(t, names)
	return names
}

// bodyReadError turns an error from reading the body into one errorStatus
// answers with a fixed message: 413 for a body over the limit, 408 for one
// that stalled past the read deadline, 400 for one cut short or broken.
func bodyReadError(err error) error {
	var maxErr *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &maxErr):
		return err
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: body ended early: %w", ErrBodyRead, err)
	default:
		return fmt.Errorf("%w: %w", ErrBodyRead, err)
	}
}

// decodeError turns an error from the JSON decoder (not from reading) into one
// whose text may be shown: a syntax error names a character of the body and
// where it is, an unknown field names the client's own key. Anything else
// would be a bug here (such as a dst the decoder cannot fill) and is left
// to errorStatus to answer as an internal error.
func decodeError(err error) error {
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("%w: malformed JSON: %s", ErrBadRequest, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: malformed JSON: the body ends before the JSON value does", ErrBadRequest)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// DisallowUnknownFields reports this with fmt.Errorf, no type.
		return fmt.Errorf("%w: %s", ErrBadRequest, strings.TrimPrefix(err.Error(), "json: "))
	default:
		return fmt.Errorf("decode json: %w", err)
	}
}
