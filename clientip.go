package main

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// trustedProxies are the addresses whose X-Forwarded-For header the service
// believes (TRUSTED_PROXIES). Anyone can send that header; only a proxy we
// run, which appends the address it saw, makes it true.
type trustedProxies []netip.Prefix

// parseTrustedProxies reads a comma-separated list of IP addresses and
// CIDR prefixes, such as "127.0.0.1/32,10.0.0.0/8,::1". Unless wide
// (TRUSTED_PROXIES_WIDE=true), a prefix that reaches outside the private
// ranges must be no wider than a /16 (IPv6: /32): step 26 accepted
// 0.0.0.0/1,128.0.0.0/1 without a word, which trusts every address but
// one's own rate limit (issue 24, item 14).
func parseTrustedProxies(raw string, wide bool) (trustedProxies, error) {
	var tp trustedProxies
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			// An IPv4 prefix written the IPv6 way (::ffff:10.0.0.0/104)
			// is kept as the IPv4 prefix it means: trusts unmaps every
			// peer, so the mapped form would never match anything.
			if p.Addr().Is4In6() {
				if p.Bits() < 96 {
					return nil, fmt.Errorf("%q mixes IPv4-mapped and other IPv6 addresses: write the IPv4 prefix", s)
				}
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			// Trusting every address lets any client name its own
			// address, and so choose its own rate limit. (Checked after
			// the unmapping: ::ffff:0.0.0.0/96 is 0.0.0.0/0.)
			if p.Bits() == 0 {
				return nil, fmt.Errorf("%q trusts every address, so any client could choose its own: name the proxies", s)
			}
			if !wide && tooWide(p) {
				return nil, fmt.Errorf("%q reaches past the private ranges (%s) and is wider than /%d: any client in it could choose its own address; "+
					"name the proxies, or set TRUSTED_PROXIES_WIDE=true if it is meant", s, privateRanges(p.Addr().Is4()), widestPublic(p.Addr().Is4()))
			}
			tp = append(tp, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or a CIDR prefix", s)
		}
		tp = append(tp, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return tp, nil
}

// privateNets are the ranges no client on the internet has an address
// in: loopback, RFC 1918, shared address space (RFC 6598), link-local,
// unique local IPv6 (RFC 4193). A prefix inside one of them can name
// only proxies on networks the operator runs.
var privateNets = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}

// widestPublic is the widest prefix accepted outside privateNets without
// TRUSTED_PROXIES_WIDE: a cloud's or a CDN's block of proxies fits in a
// /16 (IPv6: /32) mostly; wider ones are asked to be meant.
func widestPublic(v4 bool) int {
	if v4 {
		return 16
	}
	return 32
}

// tooWide says whether p reaches outside every private range and is wider
// than widestPublic.
func tooWide(p netip.Prefix) bool {
	for _, n := range privateNets {
		if n.Bits() <= p.Bits() && n.Contains(p.Addr()) {
			return false // p lies inside n
		}
	}
	return p.Bits() < widestPublic(p.Addr().Is4())
}

// privateRanges lists privateNets of one family, for a message.
func privateRanges(v4 bool) string {
	var names []string
	for _, n := range privateNets {
		if n.Addr().Is4() == v4 {
			names = append(names, n.String())
		}
	}
	return strings.Join(names, ", ")
}

func (tp trustedProxies) trusts(a netip.Addr) bool {
	// A link-local peer comes with its zone (fe80::1%eth0), and a prefix
	// contains no zoned address.
	a = a.Unmap().WithZone("")
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// maxHopLen is the longest X-Forwarded-For entry read as an address: an
// IPv6 address with an IPv4 tail is 45 characters; anything longer is not
// one of our proxies' writing, and is not parsed.
const maxHopLen = 64

// clientIP is the address of the client that sent r. It is the connection's
// peer unless the peer is a trusted proxy; then X-Forwarded-For is read
// from the right (each proxy appends the address it saw), skipping trusted
// proxies, and the first address that is not one is the client. Entries to
// the left of it were written by the client itself and are ignored.
func (tp trustedProxies) clientIP(r *http.Request) netip.Addr {
	client, _ := tp.client(r)
	return client
}

// client is clientIP, and whether the peer is a trusted proxy.
func (tp trustedProxies) client(r *http.Request) (client netip.Addr, peerTrusted bool) {
	peer := peerAddr(r)
	if !peer.IsValid() || !tp.trusts(peer) {
		return peer, false
	}
	// Several X-Forwarded-For headers are one list, in order: read the
	// last header first, each from its right end.
	client = peer
	hs := r.Header.Values("X-Forwarded-For")
	for i := len(hs) - 1; i >= 0; i-- {
		h := hs[i]
		for h != "" {
			hop := h
			if j := strings.LastIndexByte(h, ','); j >= 0 {
				hop, h = h[j+1:], h[:j]
			} else {
				h = ""
			}
			hop = strings.TrimSpace(hop)
			if len(hop) > maxHopLen {
				return client, true // not an address: the last one we could believe stands
			}
			a, err := netip.ParseAddr(hop)
			if err != nil {
				// Not written by a proxy of ours, which writes addresses:
				// the last one we could believe stands.
				return client, true
			}
			// A zone ("%eth0") means nothing beyond its host, and would
			// make one client many for the rate limit.
			client = a.Unmap().WithZone("")
			if !tp.trusts(client) {
				return client, true
			}
		}
	}
	return client, true
}

// peerAddr is the address at the other end of r's connection.
func peerAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
