package main

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Store is where links live: memoryStore (step 01) or pgStore (step 02),
// and the caches and wrappers in front of them, each a Store around a Store.
// Save returns ErrCodeTaken if code is in use; Lookup returns ErrNotFound.
type Store interface {
	Save(ctx context.Context, code string, l NewLink) error
	// Lookup returns what a redirect needs; a deleted link is a Target
	// with Deleted set, so that caches can keep the tombstone.
	Lookup(ctx context.Context, code string) (Target, error)
	// Link returns a link with its creation time and clicks, or ErrNotFound.
	Link(ctx context.Context, code string) (Link, error)
	// AddClicks adds one click for each entry of codes (a code may repeat).
	AddClicks(ctx context.Context, codes []string) error
	// Change edits or deletes a link whose token hashes to tokenHash, and
	// returns it as it now is: ErrNotFound, ErrGone (deleted already) or
	// ErrForbidden change nothing. Each cache in front drops (or
	// replaces) what it holds of the code once the store has committed.
	Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error)
	// TakeClick counts a click of a link with max_clicks (if count; a HEAD
	// does not), and reports whether the link had a click left: false
	// means 410, and nothing counted.
	TakeClick(ctx context.Context, code string, count bool) (bool, error)
}

// Link is a short link and what is known about it.
type Link struct {
	Code      string
	URL       string // "" once deleted
	CreatedAt time.Time
	Clicks    int64
	Redirect  int       // 301, 302, 307 or 308
	ExpiresAt time.Time // zero: never
	MaxClicks int64     // 0: no limit
	DeletedAt time.Time // zero: not deleted
	Version   int64     // 1 when made, one more for each edit and the delete
}

// target is what a redirect needs of l (see Target).
func (l Link) target() Target {
	return Target{URL: l.URL, Status: l.Redirect, ExpiresAt: l.ExpiresAt, Limited: l.MaxClicks > 0,
		Deleted: !l.DeletedAt.IsZero(), Version: l.Version}
}

// memLink is a link as the memory store keeps it.
type memLink struct {
	Link      // Clicks unused: memoryStore.clicks counts them
	tokenHash []byte
}

// memoryStore keeps links in a map. A sync.RWMutex lets any number of
// readers in at once, or one writer alone: Go's maps are not safe for
// concurrent use, and the race detector (go test -race) catches code that
// forgets.
type memoryStore struct {
	mu     sync.RWMutex
	links  map[string]*memLink // code → link
	clicks map[string]int64    // code → clicks
	now    func() time.Time    // when a link is made or deleted; time.Now
}

func newMemoryStore() *memoryStore {
	return &memoryStore{links: make(map[string]*memLink), clicks: make(map[string]int64), now: time.Now}
}

// Save stores l under code, or returns ErrCodeTaken.
func (s *memoryStore) Save(ctx context.Context, code string, l NewLink) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.links[code]; ok {
		return ErrCodeTaken
	}
	redirect := l.Redirect
	if redirect == 0 {
		redirect = defaultRedirect
	}
	s.links[code] = &memLink{
		Link: Link{Code: code, URL: l.URL, CreatedAt: s.now().UTC(), Redirect: redirect,
			ExpiresAt: l.ExpiresAt, MaxClicks: l.MaxClicks, Version: 1},
		tokenHash: bytes.Clone(l.TokenHash),
	}
	return nil
}

// Lookup returns what a redirect needs of code, or ErrNotFound. A deleted
// link is found, as a tombstone (Target.Deleted).
func (s *memoryStore) Lookup(ctx context.Context, code string) (Target, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.links[code]
	if !ok {
		return Target{}, ErrNotFound
	}
	return l.target(), nil
}

// Link returns everything known about code, or ErrNotFound.
func (s *memoryStore) Link(ctx context.Context, code string) (Link, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.links[code]
	if !ok {
		return Link{}, ErrNotFound
	}
	link := l.Link
	link.Clicks = s.clicks[code]
	return link, nil
}

// AddClicks adds one click for each entry of codes.
func (s *memoryStore) AddClicks(ctx context.Context, codes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range codes {
		s.clicks[c]++
	}
	return nil
}

// Change edits or deletes code if tokenHash is its token's hash, and
// returns the link as it now is. ErrNotFound, ErrGone (deleted already)
// and ErrForbidden leave it as it was.
func (s *memoryStore) Change(ctx context.Context, code string, tokenHash []byte, ch LinkChange) (Link, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.links[code]
	switch {
	case !ok:
		return Link{}, ErrNotFound
	case !l.DeletedAt.IsZero():
		return Link{}, ErrGone
	case !tokenMatches(l.tokenHash, tokenHash):
		return Link{}, ErrForbidden
	}
	if ch.Delete {
		l.URL, l.DeletedAt = "", s.now().UTC()
	}
	if ch.URL != "" {
		l.URL = ch.URL
	}
	if ch.Redirect != 0 {
		l.Redirect = ch.Redirect
	}
	if ch.SetExpiry {
		l.ExpiresAt = ch.ExpiresAt
	}
	if ch.SetMax {
		l.MaxClicks = ch.MaxClicks
	}
	l.Version++
	link := l.Link
	link.Clicks = s.clicks[code]
	return link, nil
}

// TakeClick is the click of a link with max_clicks: it counts one (if
// count) and reports true while the link has clicks left, false once it
// has none, or is deleted or unknown.
func (s *memoryStore) TakeClick(ctx context.Context, code string, count bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.links[code]
	if !ok || !l.DeletedAt.IsZero() {
		return false, nil
	}
	if l.MaxClicks > 0 && s.clicks[code] >= l.MaxClicks {
		return false, nil
	}
	if count {
		s.clicks[code]++
	}
	return true, nil
}
