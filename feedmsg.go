package main

import (
	"context"
	"strings"
)

func (f *codeFeed) badMessage(err error) {
	f.counts.badMessages.Inc()
	f.bad.warn(context.Background(), "code feed: message ignored", err)
}

// clip shortens what is quoted from a bad message in the log.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// announcement is "<code> <instance id> <mac>".
func (f *codeFeed) announcement(code string) string {
	b := make([]byte, 0, len(code)+1+len(f.id)+1+macTextLen)
	b = append(b, code...)
	b = append(b, ' ')
	b = append(b, f.id...)
	b = append(b, ' ')
	return string(f.auth.sum(b, "feed-code", f.codes, code, f.id))
}

// ackMessage is "<code> <instance id> <mac>", for the channel it is sent
// on. The id is the acknowledging instance's: a create counts each
// instance once, so that a copy of one genuine acknowledgement, published
// again, does not stand for another instance.
func (f *codeFeed) ackMessage(channel, code string) string {
	b := make([]byte, 0, len(code)+1+len(f.id)+1+macTextLen)
	b = append(b, code...)
	b = append(b, ' ')
	b = append(b, f.id...)
	b = append(b, ' ')
	return string(f.auth.sum(b, "feed-ack", channel, code, f.id))
}

// parseAck reads what ackMessage wrote for this instance's channel, and
// checks its MAC.
func (f *codeFeed) parseAck(p string) (code, from string, ok bool) {
	code, rest, found := strings.Cut(p, " ")
	if !found || !validCode(code) {
		return "", "", false
	}
	from, mac, found := strings.Cut(rest, " ")
	if !found || !validInstanceID(from) || !f.auth.verify(mac, "feed-ack", f.acks, code, from) {
		return "", "", false
	}
	return code, from, true
}

// parseAnnouncement reads what announcement wrote, and checks its MAC.
func (f *codeFeed) parseAnnouncement(p string) (code, from string, ok bool) {
	code, rest, found := strings.Cut(p, " ")
	if !found || !validCode(code) {
		return "", "", false
	}
	from, mac, found := strings.Cut(rest, " ")
	if !found || !validInstanceID(from) || !f.auth.verify(mac, "feed-code", f.codes, code, from) {
		return "", "", false
	}
	return code, from, true
}

// validInstanceID reports whether s is what rand.Text returns: 26
// characters of the base32 alphabet, upper case.
func validInstanceID(s string) bool {
	if len(s) != feedIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}
