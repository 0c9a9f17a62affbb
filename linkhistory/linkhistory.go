// Package linkhistory is the history checker of issue 24: clients record
// what they asked of the service and what it answered, each with when it
// was asked and when it answered, while faults happen; then checkers
// decide whether the history is one the service is allowed to have.
//
// It is a package of its own, not a part of the service, since step 36:
// the suite's TestHistoryUnderFaults (history_test.go) and the clients
// run against the three hosts (benchmarks/historyclients) check with the
// same code. The service's one main package does not import it.
//
// The writes (creates, edits, deletes, each with the status it got) must
// be linearizable: some order of them, each placed between its call and
// its return, explains every status, for a link modelled as a register
// that a create sets, an edit changes and a delete ends for good.
// porcupine (github.com/anishathalye/porcupine) decides that; the search
// over orders is what the standard library has nothing like.
//
// The reads are checked against the writes with the bound the service
// promises instead (docs/operations.md): an instance that did not make a
// change may serve the link as it was for a bound. Every URL written is
// unique, so a redirect names the write it saw, and a read is refused
// when a write it must have seen had ended more than the bound before it
// began: a redirect to a URL that a later edit had replaced, or a link
// that a DELETE had ended; a 404 after the link's create; a URL no write
// had begun to set. On the instance that made a change there is no
// bound: a read there that began after the change's answer must see it.
// (porcupine with each read's call moved back by the bound would check
// the same and more, but proved too slow: with reads that overlap by
// seconds, it ran out its two minutes on a history of 2,400 operations.)
//
// A write whose answer never came (the connection cut, the request timed
// out) or came as a 5xx may or may not have happened: its status is
// Unknown, and it is recorded as returning at the history's end, so that
// porcupine may place it anywhere after its call, or last, where it
// changes nothing another operation saw. A read with no answer says
// nothing and is not recorded.
package linkhistory

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Unknown is the status of a write whose outcome is not known.
const Unknown = 0

// Op is what a client asked: Kind is create, edit, delete or read; Inst
// the instance it asked.
type Op struct {
	Link, Kind, URL string
	Inst            int
}

// Answer is what the service said: the status, and for a redirect where
// to.
type Answer struct {
	Status int
	URL    string
}

// state is one link as the model holds it.
type state struct {
	made, deleted bool
	url           string
}

// Model is a link as a register that a create sets, an edit changes and
// a delete ends for good; a read must see it as it is.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var links []string
		for _, o := range history {
			l := o.Input.(Op).Link
			if _, ok := by[l]; !ok {
				links = append(links, l)
			}
			by[l] = append(by[l], o)
		}
		parts := make([][]porcupine.Operation, 0, len(links))
		for _, l := range links {
			parts = append(parts, by[l])
		}
		return parts
	},
	Init: func() any { return state{} },
	Step: func(st, input, output any) (bool, any) {
		s, in, out := st.(state), input.(Op), output.(Answer)
		switch in.Kind {
		case "create":
			switch out.Status {
			case http.StatusCreated:
				return !s.made, state{made: true, url: in.URL}
			case http.StatusConflict: // the alias is, or was, a link's
				return s.made, s
			case Unknown: // it took effect where it could, or did not
				if !s.made {
					return true, state{made: true, url: in.URL}
				}
				return true, s
			}
		case "edit":
			switch out.Status {
			case http.StatusOK:
				return s.made && !s.deleted, state{made: true, url: in.URL}
			case http.StatusGone:
				return s.deleted, s
			case Unknown:
				if s.made && !s.deleted {
					return true, state{made: true, url: in.URL}
				}
				return true, s
			}
		case "delete":
			switch out.Status {
			case http.StatusNoContent:
				return s.made && !s.deleted, state{made: true, deleted: true}
			case http.StatusGone:
				return s.deleted, s
			case Unknown:
				if s.made {
					return true, state{made: true, deleted: true}
				}
				return true, s
			}
		case "read":
			switch out.Status {
			case http.StatusFound:
				return s.made && !s.deleted && out.URL == s.url, s
			case http.StatusGone:
				return s.deleted, s
			case http.StatusNotFound:
				return !s.made, s
			}
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Op), output.(Answer)
		return fmt.Sprintf("%s %s via %d (%s) -> %d %s", in.Kind, in.Link, in.Inst, in.URL, out.Status, out.URL)
	},
	DescribeState: func(st any) string {
		s := st.(state)
		return fmt.Sprintf("made=%v deleted=%v %s", s.made, s.deleted, s.url)
	},
}

// History is the operations the clients recorded, safe to add to at once.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

// New starts a history now.
func New() *History { return &History{start: time.Now()} }

// Now is the time since the history began, in nanoseconds, as its
// operations' Call and Return are.
func (h *History) Now() int64 { return time.Since(h.start).Nanoseconds() }

// Start is when the history began.
func (h *History) Start() time.Time { return h.start }

// Add records one operation. A write with status Unknown is recorded as
// returning at the history's end (Ops sets it).
func (h *History) Add(client int, in Op, call int64, out Answer, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Ops is a copy of the operations recorded, each write of unknown
// outcome returning after every other operation (Settle).
func (h *History) Ops() []porcupine.Operation { return Settle(h.Raw()) }

// Raw is a copy of the operations as recorded: a write of unknown
// outcome returns when its client gave up on it.
func (h *History) Raw() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Settle is ops, recorded as they were, made ready for the checkers:
// each write of unknown outcome returns after every other operation,
// since it may take effect at any time after its call.
func Settle(raw []porcupine.Operation) []porcupine.Operation {
	ops := slices.Clone(raw)
	var end int64
	for _, o := range ops {
		end = max(end, o.Return)
	}
	for i, o := range ops {
		if o.Output.(Answer).Status == Unknown {
			ops[i].Return = end + 1
		}
	}
	return ops
}

// Writes is porcupine's verdict on the writes of ops, with what it needs
// to draw them (porcupine.VisualizePath).
func Writes(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	var writes []porcupine.Operation
	for _, o := range ops {
		if o.Input.(Op).Kind != "read" {
			writes = append(writes, o)
		}
	}
	return porcupine.CheckOperationsVerbose(Model, writes, timeout)
}

// Stale are the reads in ops that no state within bound before them
// explains (see the package's comment), each described.
func Stale(ops []porcupine.Operation, bound time.Duration) []string {
	b := bound.Nanoseconds()
	byLink := map[string][]porcupine.Operation{}
	for _, o := range ops {
		in := o.Input.(Op)
		byLink[in.Link] = append(byLink[in.Link], o)
	}
	var stale []string
	for link, lops := range byLink {
		// The writes that changed the link (changes), those that may have
		// (maybe: of unknown outcome), and who set each URL.
		var changes, maybe []porcupine.Operation
		setBy := map[string]porcupine.Operation{}
		for _, o := range lops {
			in, out := o.Input.(Op), o.Output.(Answer)
			switch {
			case (in.Kind == "create" && out.Status == http.StatusCreated) || (in.Kind == "edit" && out.Status == http.StatusOK) ||
				(in.Kind == "delete" && out.Status == http.StatusNoContent):
				changes = append(changes, o)
			case in.Kind != "read" && out.Status == Unknown:
				maybe = append(maybe, o)
			default:
				continue
			}
			if in.Kind != "delete" {
				setBy[in.URL] = o
			}
		}
		// must: whether a read r had to see change c, given the bound:
		// c ended before r began, by more than the bound unless r went to
		// the instance that made c.
		must := func(r, c porcupine.Operation) bool {
			if r.Input.(Op).Inst == c.Input.(Op).Inst {
				return c.Return < r.Call
			}
			return c.Return+b < r.Call
		}
		for _, r := range lops {
			in, out := r.Input.(Op), r.Output.(Answer)
			if in.Kind != "read" {
				continue
			}
			say := func(why string) {
				stale = append(stale, fmt.Sprintf("%s via instance %d at %v answered %d %s: %s", link, in.Inst,
					time.Duration(r.Call), out.Status, out.URL, why))
			}
			switch out.Status {
			case http.StatusFound:
				w, ok := setBy[out.URL]
				switch {
				case !ok:
					say("no write set that URL")
				case w.Call > r.Return:
					say("the write that set it had not begun")
				default:
					for _, c := range changes {
						// A change that began after w ended replaced it;
						// a delete ends the link whenever it began.
						if (c.Call > w.Return || c.Input.(Op).Kind == "delete") && must(r, c) {
							say(fmt.Sprintf("replaced by %s via %d, which ended %v before", c.Input.(Op).Kind,
								c.Input.(Op).Inst, time.Duration(r.Call-c.Return)))
							break
						}
					}
				}
			case http.StatusNotFound:
				for _, c := range changes {
					if c.Input.(Op).Kind == "create" && must(r, c) {
						say(fmt.Sprintf("created via %d %v before", c.Input.(Op).Inst, time.Duration(r.Call-c.Return)))
						break
					}
				}
			case http.StatusGone:
				deleted := false
				for _, c := range append(changes, maybe...) {
					if c.Input.(Op).Kind == "delete" && c.Call < r.Return {
						deleted = true
					}
				}
				if !deleted {
					say("no DELETE had begun")
				}
			default:
				say("not an answer a read may give")
			}
		}
	}
	slices.Sort(stale)
	return stale
}

// LeastBound is the least bound, to the microsecond, that ops meet: how
// late the latest read on another instance was to see a change. It is
// above an hour when no bound explains them (a read no bound explains:
// a URL never written, a 410 before any DELETE).
func LeastBound(ops []porcupine.Operation) time.Duration {
	lo, hi := time.Duration(0), time.Second
	for len(Stale(ops, hi)) > 0 {
		if hi > time.Hour {
			return time.Duration(math.MaxInt64)
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > time.Microsecond {
		if mid := (lo + hi) / 2; len(Stale(ops, mid)) == 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
