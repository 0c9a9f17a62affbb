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
// CIDR prefixes, such as "127.0.0.1/32,10.0.0.0/8,::1".
func parseTrustedProxies(raw string) (trustedProxies, error) {
	var tp trustedProxies
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
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

func (tp trustedProxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP is the address of the client that sent r. It is the connection's
// peer unless the peer is a trusted proxy; then X-Forwarded-For is read
// from the right (each proxy appends the address it saw), skipping trusted
// proxies, and the first address that is not one is the client. Entries to
// the left of it were written by the client itself and are ignored.
func (tp trustedProxies) clientIP(r *http.Request) netip.Addr {
	peer := peerAddr(r)
	if !peer.IsValid() || !tp.trusts(peer) {
		return peer
	}
	// Several X-Forwarded-For headers are one list, in order.
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// Not written by a proxy of ours, which writes addresses:
			// the last one we could believe stands.
			return client
		}
		client = a.Unmap()
		if !tp.trusts(client) {
			return client
		}
	}
	return client
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
