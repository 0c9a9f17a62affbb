package main

import (
	"context"
	"sync"
	"time"
)

// Link is a short link and what is known about it.
type Link struct {
	Code      string
	URL       string
	CreatedAt time.Time
	Clicks    int64
}

// memoryStore keeps links in a map. A sync.RWMutex lets any number of
// readers in at once, or one writer alone: Go's maps are not safe for
// concurrent use, and the race detector (go test -race) catches code that
// forgets.
type memoryStore struct {
	mu      sync.RWMutex
	links   map[string]string    // code → URL
	created map[string]time.Time // code → when it was made
	clicks  map[string]int64     // code → clicks
}

func newMemoryStore() *memoryStore {
	return &memoryStore{
		links:   make(map[string]string),
		created: make(map[string]time.Time),
		clicks:  make(map[string]int64),
	}
}

// Save stores url under code, or returns ErrCodeTaken.
func (s *memoryStore) Save(ctx context.Context, code, url string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.links[code]; ok {
		return ErrCodeTaken
	}
	s.links[code] = url
	s.created[code] = time.Now().UTC()
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

// Link returns everything known about code, or ErrNotFound.
func (s *memoryStore) Link(ctx context.Context, code string) (Link, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	url, ok := s.links[code]
	if !ok {
		return Link{}, ErrNotFound
	}
	return Link{Code: code, URL: url, CreatedAt: s.created[code], Clicks: s.clicks[code]}, nil
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
