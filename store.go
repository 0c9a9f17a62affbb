package main

import (
	"context"
	"errors"
	"sync"
)

var (
	// ErrNotFound means no link has that code.
	ErrNotFound = errors.New("not found")
	// ErrCodeTaken means a link with that code exists already.
	ErrCodeTaken = errors.New("code already taken")
)

// memoryStore keeps links in a map. A sync.RWMutex lets any number of
// readers in at once, or one writer alone: Go's maps are not safe for
// concurrent use, and the race detector (go test -race) catches code that
// forgets.
type memoryStore struct {
	mu    sync.RWMutex
	links map[string]string // code → URL
}

func newMemoryStore() *memoryStore {
	return &memoryStore{links: make(map[string]string)}
}

// Save stores url under code, or returns ErrCodeTaken.
func (s *memoryStore) Save(ctx context.Context, code, url string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.links[code]; ok {
		return ErrCodeTaken
	}
	s.links[code] = url
	return nil
}

// Lookup returns the URL stored under code, or ErrNotFound.
func (s *memoryStore) Lookup(ctx context.Context, code string) (string, error) {
	s.mu.RLock()
	url, ok := s.links[code]
	s.mu.RUnlock()
	if !ok {
		return "", ErrNotFound
	}
	return url, nil
}
