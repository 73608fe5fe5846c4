package auth

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Proxies is the set of reverse proxies (-trusted-proxies) whose
// X-Forwarded-For or Forwarded headers say who the client is. The zero
// value trusts none: every client is its peer address.
type Proxies struct {
	prefixes []netip.Prefix
}

// ParseProxies parses a comma-separated list of CIDR prefixes or bare IPs
// ("10.0.0.0/8, 192.168.1.7"); "" trusts none.
func ParseProxies(s string) (Proxies, error) {
	var p Proxies
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			ip, err := netip.ParseAddr(f)
			if err != nil {
				return Proxies{}, fmt.Errorf("trusted proxy %q is neither a CIDR prefix nor an IP: %w", f, err)
			}
			ip = ip.Unmap()
			f = netip.PrefixFrom(ip, ip.BitLen()).String()
		}
		pre, err := netip.ParsePrefix(f)
		if err != nil {
			return Proxies{}, fmt.Errorf("trusted proxy %q is not a CIDR prefix: %w", f, err)
		}
		if pre.Addr().Is4In6() {
			pre = netip.PrefixFrom(pre.Addr().Unmap(), max(pre.Bits()-96, 0))
		}
		p.prefixes = append(p.prefixes, pre.Masked())
	}
	return p, nil
}

// Len is how many prefixes are trusted.
func (p Proxies) Len() int { return len(p.prefixes) }

// String lists the prefixes, comma-separated.
func (p Proxies) String() string {
	s := make([]string, len(p.prefixes))
	for i, pre := range p.prefixes {
		s[i] = pre.String()
	}
	return strings.Join(s, ",")
}

// Trusted reports whether ip is a trusted proxy.
func (p Proxies) Trusted(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, pre := range p.prefixes {
		if pre.Contains(ip) {
			return true
		}
	}
	return false
}

// ClientAddr returns the address a request is counted under: when its peer
// (remote, "host:port" or a bare IP) is a trusted proxy, the rightmost hop
// of X-Forwarded-For (or, without one, of Forwarded's for=) that is not a
// trusted proxy itself; otherwise the peer. Hops right of the client were
// appended by proxies the operator trusts, so a client can forge only hops
// left of its own, which are never read. get returns a header's values
// (http.Header.Values, or gRPC metadata's Get, whose keys are lower case).
//
// A hop that is not an IP ("unknown", an obfuscated identifier) ends the
// walk at the proxy that wrote it: the client cannot be told apart from
// that proxy's other clients. With every hop trusted, the leftmost is the
// client.
func (p Proxies) ClientAddr(remote string, get func(name string) []string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	peerIP, err := netip.ParseAddr(host)
	if err != nil || len(p.prefixes) == 0 || !p.Trusted(peerIP) {
		return remote
	}
	hops := forwardedFor(get)
	client := peerIP.Unmap()
	for _, hop := range slices.Backward(hops) {
		ip, ok := parseHop(hop)
		if !ok {
			break
		}
		client = ip
		if !p.Trusted(ip) {
			break
		}
	}
	return client.String()
}

// ClientAddrHTTP is ClientAddr for an HTTP request.
func (p Proxies) ClientAddrHTTP(r *http.Request) string {
	if len(p.prefixes) == 0 {
		return r.RemoteAddr
	}
	return p.ClientAddr(r.RemoteAddr, func(name string) []string { return r.Header.Values(name) })
}

// forwardedFor returns the hops, left to right, of X-Forwarded-For or,
// when no request carries that, of Forwarded's for= parameters.
func forwardedFor(get func(name string) []string) []string {
	var hops []string
	for _, v := range get(strings.ToLower("X-Forwarded-For")) {
		for h := range strings.SplitSeq(v, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	if len(hops) > 0 {
		return hops
	}
	for _, v := range get(strings.ToLower("Forwarded")) {
		for elem := range strings.SplitSeq(v, ",") {
			for pair := range strings.SplitSeq(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
					hops = append(hops, strings.Trim(strings.TrimSpace(val), `"`))
				}
			}
		}
	}
	return hops
}

// parseHop parses one hop: an IP, "IP:port", "[IPv6]" or "[IPv6]:port".
func parseHop(h string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		if ip, err := netip.ParseAddr(h[1 : len(h)-1]); err == nil {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
