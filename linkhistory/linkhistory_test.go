package linkhistory

import (
	"net/http"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is one operation of a test history: call and ret in milliseconds.
func op(client int, kind, url string, inst int, call, ret int64, status int, loc string) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: Op{Link: "l", Kind: kind, URL: url, Inst: inst},
		Call: call * 1e6, Output: Answer{Status: status, URL: loc}, Return: ret * 1e6}
}

// record adds ops to a History as clients would, so that Ops moves the
// unknown ones to its end.
func record(ops ...porcupine.Operation) []porcupine.Operation {
	h := New()
	for _, o := range ops {
		h.Add(o.ClientId, o.Input.(Op), o.Call, o.Output.(Answer), o.Return)
	}
	return h.Ops()
}

// TestWritesOfUnknownOutcome: a write with no answer may have happened
// or not; the checker allows either, and still refuses what no outcome
// of it explains.
func TestWritesOfUnknownOutcome(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"a create that did not land, then one that did", []porcupine.Operation{
			op(0, "create", "u1", 0, 0, 10, Unknown, ""),
			op(1, "create", "u2", 1, 20, 30, http.StatusCreated, ""),
		}, porcupine.Ok},
		{"a create that landed: another's is 409 and an edit 200", []porcupine.Operation{
			op(0, "create", "u1", 0, 0, 10, Unknown, ""),
			op(1, "create", "u2", 1, 20, 30, http.StatusConflict, ""),
			op(1, "edit", "u3", 1, 40, 50, http.StatusOK, ""),
		}, porcupine.Ok},
		{"a delete that landed: an edit after it is 410", []porcupine.Operation{
			op(0, "create", "u1", 0, 0, 10, http.StatusCreated, ""),
			op(0, "delete", "", 0, 20, 30, Unknown, ""),
			op(1, "edit", "u2", 1, 40, 50, http.StatusGone, ""),
		}, porcupine.Ok},
		{"a delete that did not land: an edit after it is 200", []porcupine.Operation{
			op(0, "create", "u1", 0, 0, 10, http.StatusCreated, ""),
			op(0, "delete", "", 0, 20, 30, Unknown, ""),
			op(1, "edit", "u2", 1, 40, 50, http.StatusOK, ""),
		}, porcupine.Ok},
		{"an edit 200 after a delete 204, whatever an unknown create did", []porcupine.Operation{
			op(0, "create", "u1", 0, 0, 10, http.StatusCreated, ""),
			op(2, "create", "u9", 2, 5, 15, Unknown, ""),
			op(0, "delete", "", 0, 20, 30, http.StatusNoContent, ""),
			op(1, "edit", "u2", 1, 40, 50, http.StatusOK, ""),
		}, porcupine.Illegal},
		{"two creates answered 201", []porcupine.Operation{
			op(0, "create", "u1", 0, 0, 10, http.StatusCreated, ""),
			op(1, "edit", "u2", 1, 12, 13, Unknown, ""),
			op(1, "create", "u3", 1, 20, 30, http.StatusCreated, ""),
		}, porcupine.Illegal},
	} {
		t.Run(c.name, func(t *testing.T) {
			if res, _ := Writes(record(c.ops...), time.Minute); res != c.want {
				t.Errorf("porcupine says %s, want %s", res, c.want)
			}
		})
	}
}

// TestStaleReads: the reads' checker allows what the bound allows and
// refuses the rest, unknown writes among them.
func TestStaleReads(t *testing.T) {
	const bound = 100 * time.Millisecond
	base := []porcupine.Operation{
		op(0, "create", "u1", 0, 0, 10, http.StatusCreated, ""),
		op(0, "edit", "u2", 0, 20, 30, http.StatusOK, ""),
		op(0, "edit", "u3", 0, 40, 50, Unknown, ""),
		op(0, "delete", "", 0, 1000, 1010, http.StatusNoContent, ""),
	}
	for _, c := range []struct {
		name  string
		read  porcupine.Operation
		stale bool
	}{
		{"another instance, the URL before the edit, within the bound", op(1, "read", "", 1, 100, 101, http.StatusFound, "u1"), false},
		{"another instance, the URL before the edit, past the bound", op(1, "read", "", 1, 200, 201, http.StatusFound, "u1"), true},
		{"the editing instance, the URL before the edit, after it", op(1, "read", "", 0, 31, 32, http.StatusFound, "u1"), true},
		{"an unknown edit's URL", op(1, "read", "", 1, 60, 61, http.StatusFound, "u3"), false},
		{"an unknown edit's URL before it began", op(1, "read", "", 1, 35, 39, http.StatusFound, "u3"), true},
		{"a URL nobody wrote", op(1, "read", "", 1, 60, 61, http.StatusFound, "u7"), true},
		{"a 404 on the creating instance after the create", op(1, "read", "", 0, 11, 12, http.StatusNotFound, ""), true},
		{"a 404 elsewhere within the bound", op(1, "read", "", 2, 11, 12, http.StatusNotFound, ""), false},
		{"a 410 before any delete began", op(1, "read", "", 1, 500, 501, http.StatusGone, ""), true},
		{"a redirect after the delete, within the bound elsewhere", op(1, "read", "", 2, 1050, 1051, http.StatusFound, "u2"), false},
		{"a redirect after the delete, past the bound", op(1, "read", "", 2, 1200, 1201, http.StatusFound, "u2"), true},
		{"a redirect after the delete on the deleting instance", op(1, "read", "", 0, 1011, 1012, http.StatusFound, "u2"), true},
		{"a 410 after the delete", op(1, "read", "", 1, 1011, 1012, http.StatusGone, ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Stale(record(append(base, c.read)...), bound)
			if (len(got) > 0) != c.stale {
				t.Errorf("refused %v, want refused %v", got, c.stale)
			}
		})
	}
	if got := LeastBound(record(append(base, op(1, "read", "", 1, 180, 181, http.StatusFound, "u1"))...)); got < 150*time.Millisecond || got > 150*time.Millisecond+time.Microsecond {
		t.Errorf("least bound %v, want 150ms to the microsecond (the read began 150 ms after the edit's answer)", got)
	}
}
