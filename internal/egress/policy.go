// Package egress is the dispatcher's only way out to the internet: an HTTP client that
// refuses to connect to internal, loopback, link-local, private, metadata and other
// special-purpose addresses (SSRF defence), never follows redirects, and reads
// response bodies only up to a small bound.
//
// The address policy runs inside net.Dialer's ControlContext, i.e. after DNS
// resolution and immediately before connect(2), on the IP that is actually dialled.
// That single check covers DNS rebinding, hostnames with several A/AAAA records,
// odd IP spellings and every connection the transport opens; a check on the URL before
// the request would cover none of them. Policy.Check on a literal IP at endpoint
// registration time is a courtesy to the user, not the control.
//
// The Go pitfalls behind this design are in docs/design.md (egress); the blocked
// ranges are below, each with its reason.
package egress

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
)

// ErrBlocked is returned (wrapped) when a destination is refused by the policy.
//
// Its text is deliberately generic: the message may reach the endpoint's owner, and
// naming the resolved address would turn the dispatcher into a probe of the internal
// network.
var ErrBlocked = errors.New("egress: destination not allowed")

// Policy decides which IP addresses may be dialled. The zero value is the default
// policy: public unicast only.
type Policy struct {
	// AllowCIDRs are explicitly permitted ranges that override the deny table, for
	// loopback receivers in tests and local development. Empty by default; never
	// populate it in production from anything a tenant controls.
	AllowCIDRs []netip.Prefix
}

// Allowed reports whether addr may be dialled.
//
// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry and zones are
// ignored, so every spelling of one address gets one answer.
func (p Policy) Allowed(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	addr = addr.Unmap().WithZone("")

	for _, allow := range p.AllowCIDRs {
		if unmapPrefix(allow).Contains(addr) {
			return true
		}
	}

	if addr.Is4() {
		return !containsAny(deniedV4, addr)
	}
	// Everything outside global unicast is special in IPv6 (loopback, unspecified,
	// IPv4-compatible, NAT64, discard, unique-local, link-local, site-local,
	// multicast, SRv6, …), so an allow-by-range rule is both shorter and safer than
	// enumerating those.
	if !globalUnicastV6.Contains(addr) {
		return false
	}
	return !containsAny(deniedV6, addr)
}

// Check returns nil if addr may be dialled and ErrBlocked otherwise.
func (p Policy) Check(addr netip.Addr) error {
	if !p.Allowed(addr) {
		return ErrBlocked
	}
	return nil
}

// Control is a net.Dialer ControlContext function enforcing p. It is called for every
// address the dialer tries, with the resolved IP literal, before the connection is
// attempted; a refused address makes the dialer move on to the next one.
//
// Only TCP is permitted: the client speaks HTTP/1.1 and HTTP/2 and nothing else.
func (p Policy) Control(_ context.Context, network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp4", "tcp6":
	default:
		return ErrBlocked
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Control always receives an IP literal; anything else is unexpected and
		// refusing it is the safe answer.
		return ErrBlocked
	}
	return p.Check(ap.Addr())
}

// unmapPrefix turns an IPv4-mapped prefix (::ffff:10.0.0.0/104) into its IPv4 form so
// that it matches the unmapped addresses Allowed compares against.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

func containsAny(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// deniedV4 is the IANA IPv4 special-purpose registry plus multicast and reserved space
// (RFC 6890 and its updates). Some entries (AS112, AMT) are globally reachable in the
// registry; no webhook receiver lives there, so they are refused too.
var deniedV4 = mustPrefixes(
	"0.0.0.0/8",       // "this network"; 0.0.0.0 reaches the local host on Linux
	"10.0.0.0/8",      // private-use (RFC 1918)
	"100.64.0.0/10",   // shared address space / CGNAT (RFC 6598); Alibaba metadata
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local; cloud metadata 169.254.169.254
	"172.16.0.0/12",   // private-use (RFC 1918)
	"192.0.0.0/24",    // IETF protocol assignments (RFC 6890)
	"192.0.2.0/24",    // TEST-NET-1 (RFC 5737)
	"192.31.196.0/24", // AS112-v4 (RFC 7535)
	"192.52.193.0/24", // AMT (RFC 7450)
	"192.88.99.0/24",  // deprecated 6to4 relay anycast (RFC 7526)
	"192.168.0.0/16",  // private-use (RFC 1918)
	"192.175.48.0/24", // AS112 direct delegation (RFC 7534)
	"198.18.0.0/15",   // benchmarking (RFC 2544)
	"198.51.100.0/24", // TEST-NET-2 (RFC 5737)
	"203.0.113.0/24",  // TEST-NET-3 (RFC 5737)
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, including 255.255.255.255 broadcast
)

// globalUnicastV6 is the only IPv6 space that may be dialled at all.
var globalUnicastV6 = netip.MustParsePrefix("2000::/3")

// deniedV6 are the special-purpose entries inside 2000::/3. Those outside it (::1,
// ::/96, 64:ff9b::/96, 64:ff9b:1::/48, 100::/64, 5f00::/16, fc00::/7, fe80::/10,
// fec0::/10, ff00::/8, …) are already refused by the 2000::/3 rule.
var deniedV6 = mustPrefixes(
	"2001::/23",         // IETF protocol assignments: Teredo 2001::/32 (embeds IPv4), benchmarking, ORCHID
	"2001:db8::/32",     // documentation (RFC 3849)
	"2002::/16",         // 6to4 (embeds IPv4)
	"2620:4f:8000::/48", // AS112 direct delegation (RFC 7534)
	"3fff::/20",         // documentation (RFC 9637)
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
