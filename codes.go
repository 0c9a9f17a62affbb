package main

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Step 18: where new codes come from (CODES).
//
//   - random (steps 01–17): seven characters from crypto/rand, and the
//     unique index on code decides: a code already taken is drawn again.
//     No coordination, no state, and a collision is a retry that grows
//     more likely as the table fills (at a billion links, 1 create in
//     3,500).
//   - sequence: unique by construction, across every instance. Each
//     instance takes a block of codeBlock numbers from a Postgres sequence
//     (one round trip per codeBlock creates), and turns each number into
//     a code through a keyed permutation of the 62^7 codes, so that the
//     codes still say nothing about one another: without the key, code
//     n+1 cannot be told from code n. The key is made once, at random,
//     and kept in Postgres (code_keys), where every instance reads it.
//
// A code can still be taken under sequence: by a custom alias, or by a
// random code made before the switch. The store refuses it as before,
// and the next number is tried: the retry stays, as a safety net.
type codeSource interface {
	next(ctx context.Context) (string, error)
}

// randomCodes is CODES=random.
type randomCodes struct{}

func (randomCodes) next(context.Context) (string, error) { return newCode(), nil }

// codeSpace is how many codes of codeLength there are: 62^7.
const codeSpace = 3_521_614_606_208

// codeBlock is how many numbers an instance takes from the sequence at a
// time. Numbers are never reused: the ones left in a block when an
// instance stops are skipped, which costs nothing but numbers.
const codeBlock = 1000

// permBits is the width of the Feistel network the permutation runs on:
// 2^42 is the smallest even power of two past codeSpace.
const (
	permRounds = 10
	permBits   = 42
	permHalf   = permBits / 2
	permMask   = 1<<permHalf - 1
)

// codePerm is a keyed permutation of [0, codeSpace): a Feistel network
// on 42 bits, permRounds rounds, each round's function AES-128 of (round,
// half) under the key truncated to 21 bits, and "cycle walking" to stay
// below codeSpace (a number that lands past it is permuted again, until
// it does not; since the network is a permutation of [0, 2^42), this is
// one of [0, codeSpace)). Ten rounds, as NIST's FF1 format-preserving
// encryption uses: with halves this small, the four rounds of the
// Luby-Rackoff proof promise nothing past a few thousand codes seen.
type codePerm struct {
	block cipher.Block
}

func newCodePerm(key []byte) (*codePerm, error) {
	if len(key) != 16 {
		return nil, fmt.Errorf("code key: %d bytes, want 16", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("code key: %w", err)
	}
	return &codePerm{block: b}, nil
}

func (p *codePerm) round(i int, half uint64) uint64 {
	var in, out [aes.BlockSize]byte
	in[0] = byte(i)
	binary.BigEndian.PutUint32(in[1:], uint32(half))
	p.block.Encrypt(out[:], in[:])
	return uint64(binary.BigEndian.Uint32(out[:])) & permMask
}

// permute maps n, below codeSpace, to a number below codeSpace; two
// numbers never map to the same one.
func (p *codePerm) permute(n uint64) uint64 {
	for {
		l, r := n>>permHalf, n&permMask
		for i := range permRounds {
			l, r = r, l^p.round(i, r)
		}
		n = l<<permHalf | r
		if n < codeSpace {
			return n
		}
	}
}

// encodeCode writes n, below codeSpace, as codeLength base-62 digits.
func encodeCode(n uint64) string {
	var c [codeLength]byte
	for i := codeLength - 1; i >= 0; i-- {
		c[i] = alphabet[n%62]
		n /= 62
	}
	return string(c[:])
}

// sequenceCodes is CODES=sequence.
type sequenceCodes struct {
	db      *sql.DB // the primary
	perm    *codePerm
	timeout time.Duration // DB_TIMEOUT, for taking a block

	mu       sync.Mutex
	cur, end uint64  // the numbers left in this instance's block: [cur, end)
	refill   *refill // the block being taken, or nil
	blocks   int64   // blocks taken, for tests
}

// refill is one nextval in flight; done is closed once it has ended, err
// set if it failed.
type refill struct {
	done chan struct{}
	err  error
}

// codeKeySQL makes the key on first use and returns it. Every instance
// that runs it gets the first one made: ON CONFLICT DO UPDATE (to the
// same key) waits for another instance's insert to commit, and returns
// its row (DO NOTHING would return no row at all in that case).
const codeKeySQL = `INSERT INTO code_keys (id, key) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET key = code_keys.key
RETURNING key`

// newSequenceCodes reads (or makes) the shared key.
func newSequenceCodes(ctx context.Context, db *sql.DB, timeout time.Duration) (*sequenceCodes, error) {
	fresh := make([]byte, 16)
	rand.Read(fresh)
	var key []byte
	if err := db.QueryRowContext(ctx, codeKeySQL, fresh).Scan(&key); err != nil {
		return nil, fmt.Errorf("codes: read the code key: %w", err)
	}
	perm, err := newCodePerm(key) // what comes back from Postgres is checked too
	if err != nil {
		return nil, fmt.Errorf("codes: the code key in code_keys: %w", err)
	}
	return &sequenceCodes{db: db, perm: perm, timeout: timeout}, nil
}

// errCodesExhausted means the sequence has given out every number.
var errCodesExhausted = errors.New("codes: every code of seven characters has been given out")

// next returns the next code of this instance's block. When the block
// is used up, one create takes the next (a round trip, at most
// DB_TIMEOUT however Postgres behaves), and the others that arrive
// meanwhile wait for it, each no longer than its own ctx: the lock is
// never held across the round trip.
func (s *sequenceCodes) next(ctx context.Context) (string, error) {
	for {
		s.mu.Lock()
		if s.cur < s.end {
			n := s.cur
			s.cur++
			s.mu.Unlock()
			return encodeCode(s.perm.permute(n)), nil
		}
		r := s.refill
		if r == nil {
			r = &refill{done: make(chan struct{})}
			s.refill = r
			go s.takeBlock(r)
		}
		s.mu.Unlock()
		select {
		case <-r.done:
			if r.err != nil {
				return "", r.err
			}
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// takeBlock takes the next block from the sequence for r.
func (s *sequenceCodes) takeBlock(r *refill) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var b int64
	err := bounded(ctx, func() error {
		var got int64
		if err := s.db.QueryRowContext(ctx, `SELECT nextval('link_code_blocks')`).Scan(&got); err != nil {
			return err
		}
		b = got
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		r.err = fmt.Errorf("codes: take a block: %w", deadline(ctx, err))
	case b < 0 || uint64(b) >= codeSpace/codeBlock:
		r.err = errCodesExhausted
	default:
		s.cur, s.end = uint64(b)*codeBlock, uint64(b+1)*codeBlock
		s.blocks++
	}
	s.refill = nil
	close(r.done)
}
