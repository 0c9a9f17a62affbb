package main

import (
	"crypto/rand"
	"fmt"
	"strings"
)

// codeLength characters of base62 give 62^7 ≈ 3.5 trillion codes.
const codeLength = 7

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// reserved reports whether code is one of reservedAliases: a generated
// code that spells one is skipped (since step 18 the list is the
// aliases'; it was healthz, shorten and metrics).
func reserved(code string) bool { return reservedAliases[strings.ToLower(code)] }

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

// Step 18: custom aliases. A client may name its link instead of taking
// a code: aliasMinLength to aliasMaxLength characters of aliasAlphabet
// (letters, digits, '-' and '_'), beginning and ending with a letter or
// digit, and not one of reservedAliases, whatever its case. Like codes,
// aliases are case-sensitive: /Docs and /docs are two links.
const (
	aliasMinLength = 4
	aliasMaxLength = 32
	aliasAlphabet  = alphabet + "-_"
)

// reservedAliases are paths a route owns, or that a reader of a short
// link would take for the service's own (a login page, the API, static
// files), now or in a later step. Matched without regard to case:
// /API would be read as the API's.
var reservedAliases = map[string]bool{
	"healthz": true, "shorten": true, "metrics": true, "api": true, "static": true, "assets": true,
	"debug": true, "admin": true, "login": true, "logout": true, "signup": true, "account": true,
	"stats": true, "links": true, "favicon": true, "robots": true, "sitemap": true, "well-known": true,
	"index": true, "help": true, "about": true, "docs": true, "status": true, "www": true,
}

// checkAlias says why alias cannot name a link, or nil if it can. Its
// errors wrap ErrBadRequest, with our text and the alias: a 400.
func checkAlias(alias string) error {
	if n := len(alias); n < aliasMinLength || n > aliasMaxLength {
		return fmt.Errorf("%w: alias must be %d to %d characters, not %d", ErrBadRequest, aliasMinLength, aliasMaxLength, min(n, 1000))
	}
	if !validCode(alias) {
		return fmt.Errorf("%w: alias may hold only letters, digits, '-' and '_', and must begin and end with a letter or digit", ErrBadRequest)
	}
	if reservedAliases[strings.ToLower(alias)] {
		return fmt.Errorf("%w: alias %q is reserved", ErrBadRequest, alias)
	}
	return nil
}

// validCode reports whether s could be a link's code, generated (seven
// characters of alphabet) or an alias, so that a path that cannot be one
// gets a 404 without a trip to storage. Since step 18 that is any alias's
// shape: every generated code has it too.
func validCode(s string) bool {
	if len(s) < aliasMinLength || len(s) > aliasMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') &&
			(c != '-' && c != '_' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
