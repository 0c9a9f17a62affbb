package main

import "crypto/rand"

// codeLength characters of base62 give 62^7 ≈ 3.5 trillion codes.
const codeLength = 7

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// reservedCodes are seven-letter paths that a route owns (or will own in a
// later step). A link with one of these codes could never be reached.
var reservedCodes = map[string]bool{"healthz": true, "shorten": true, "metrics": true}

// newCode returns a random code. crypto/rand, not math/rand: codes must not
// be guessable from one another, or anyone could walk the list of links.
// Bytes of 248 and over are thrown away so that each of the 62 characters is
// equally likely (248 = 4 × 62); b % 62 on all 256 values would favour the
// first eight.
func newCode() string {
	var code [codeLength]byte
	var buf [16]byte
	n := 0
	for n < codeLength {
		// Since Go 1.24, rand.Read never returns an error: if the
		// operating system cannot supply randomness the program crashes,
		// because carrying on without it would be worse.
		rand.Read(buf[:])
		for _, b := range buf {
			if b >= 248 {
				continue
			}
			code[n] = alphabet[b%62]
			n++
			if n == codeLength {
				break
			}
		}
	}
	return string(code[:])
}

// validCode reports whether s could be a code, so that a path that cannot be
// one gets a 404 without a trip to storage.
func validCode(s string) bool {
	if len(s) != codeLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}
