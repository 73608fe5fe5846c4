package egress_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

// embeddings returns the IPv6 spellings that carry an IPv4 address. Apart from the
// IPv4-mapped form (which is judged as the IPv4 address itself), all of them reach
// the IPv4 address only through a translator, so the policy refuses them outright.
func embeddings(v4 netip.Addr) (mapped netip.Addr, tunnelled map[string]netip.Addr) {
	b := v4.As4()
	mapped = netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
	return mapped, map[string]netip.Addr{
		// RFC 6052 well-known prefix: 64:ff9b::a.b.c.d
		"NAT64": netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		// RFC 8215 local-use translation prefix
		"NAT64Local": netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 5: 0x01, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		// RFC 3056: 2002:aabb:ccdd::/48
		"SixToFour": netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1}),
		// RFC 4380: 2001:0:<server v4>:<flags>:<port^ffff>:<client v4^ffffffff>
		"Teredo": netip.AddrFrom16([16]byte{
			0: 0x20, 1: 0x01, 4: b[0], 5: b[1], 6: b[2], 7: b[3], 8: 0x80, 10: 0xff, 11: 0xff,
			12: ^b[0], 13: ^b[1], 14: ^b[2], 15: ^b[3],
		}),
		// RFC 4291 §2.5.5.1 deprecated IPv4-compatible ::a.b.c.d
		"IPv4Compatible": netip.AddrFrom16([16]byte{12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
	}
}

func TestPolicyIPv4(t *testing.T) {
	t.Parallel()

	// One row per denied range, with its first, a middle and its last address.
	denied := []struct {
		name    string
		samples []string
	}{
		{"ThisNetwork", []string{"0.0.0.0", "0.1.2.3", "0.255.255.255"}},
		{"Private10", []string{"10.0.0.0", "10.1.2.3", "10.255.255.255"}},
		{"SharedCGNAT", []string{"100.64.0.0", "100.100.100.200", "100.127.255.255"}},
		{"Loopback", []string{"127.0.0.0", "127.0.0.1", "127.255.255.255"}},
		{"LinkLocalMetadata", []string{"169.254.0.0", "169.254.169.254", "169.254.255.255"}},
		{"Private172", []string{"172.16.0.0", "172.20.1.2", "172.31.255.255"}},
		{"IETFProtocolAssignments", []string{"192.0.0.0", "192.0.0.192", "192.0.0.255"}},
		{"TestNet1", []string{"192.0.2.0", "192.0.2.1", "192.0.2.255"}},
		{"AS112v4", []string{"192.31.196.0", "192.31.196.1", "192.31.196.255"}},
		{"AMT", []string{"192.52.193.0", "192.52.193.1", "192.52.193.255"}},
		{"SixToFourRelay", []string{"192.88.99.0", "192.88.99.1", "192.88.99.255"}},
		{"Private192", []string{"192.168.0.0", "192.168.1.1", "192.168.255.255"}},
		{"AS112Direct", []string{"192.175.48.0", "192.175.48.1", "192.175.48.255"}},
		{"Benchmarking", []string{"198.18.0.0", "198.19.1.2", "198.19.255.255"}},
		{"TestNet2", []string{"198.51.100.0", "198.51.100.1", "198.51.100.255"}},
		{"TestNet3", []string{"203.0.113.0", "203.0.113.1", "203.0.113.255"}},
		{"Multicast", []string{"224.0.0.0", "239.1.2.3", "239.255.255.255"}},
		{"Reserved", []string{"240.0.0.0", "250.1.2.3", "255.255.255.254"}},
		{"Broadcast", []string{"255.255.255.255"}},
	}
	for _, tt := range denied {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var policy egress.Policy
			for _, s := range tt.samples {
				v4 := netip.MustParseAddr(s)
				mapped, tunnelled := embeddings(v4)
				require.ErrorIs(t, policy.Check(v4), egress.ErrBlocked, s)
				require.ErrorIs(t, policy.Check(mapped), egress.ErrBlocked, "%s as %s", s, mapped)
				for form, addr := range tunnelled {
					require.ErrorIs(t, policy.Check(addr), egress.ErrBlocked, "%s as %s %s", s, form, addr)
				}
			}
		})
	}

	t.Run("PublicAllowed", func(t *testing.T) {
		t.Parallel()

		var policy egress.Policy
		// Well-known public resolvers, plus the first address outside each denied
		// range, so an off-by-one in a prefix length shows up here.
		for _, s := range []string{
			"1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
			"126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255",
			"172.32.0.0", "192.0.1.255", "192.0.3.0", "192.88.98.255", "192.167.255.255",
			"192.169.0.0", "198.17.255.255", "198.20.0.0", "203.0.112.255", "223.255.255.255",
		} {
			v4 := netip.MustParseAddr(s)
			mapped, tunnelled := embeddings(v4)
			require.NoError(t, policy.Check(v4), s)
			require.True(t, policy.Allowed(v4), s)
			require.NoError(t, policy.Check(mapped), "%s as %s", s, mapped)
			// Even a public IPv4 address is refused behind a translator: the
			// translator, not the policy, would pick the real destination.
			for form, addr := range tunnelled {
				require.ErrorIs(t, policy.Check(addr), egress.ErrBlocked, "%s as %s %s", s, form, addr)
			}
		}
	})
}

func TestPolicyIPv6(t *testing.T) {
	t.Parallel()

	denied := []struct {
		name    string
		samples []string
	}{
		{"Unspecified", []string{"::"}},
		{"Loopback", []string{"::1"}},
		{"IPv4Compatible", []string{"::7f00:1", "::a9fe:a9fe", "::101:101"}},
		{"NAT64", []string{"64:ff9b::a9fe:a9fe", "64:ff9b::101:101"}},
		{"NAT64LocalUse", []string{"64:ff9b:1::1", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff"}},
		{"DiscardOnly", []string{"100::", "100::ffff:ffff:ffff:ffff"}},
		{"DummyPrefix", []string{"100:0:0:1::1"}},
		{"Teredo", []string{"2001::", "2001:0:4136:e378:8000:63bf:3fff:fdd2"}},
		{"IETFProtocolAssignments", []string{"2001:2::1", "2001:10::1", "2001:20::1", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff"}},
		{"Documentation", []string{"2001:db8::", "2001:db8:ffff::1"}},
		{"SixToFour", []string{"2002::", "2002:7f00:1::1", "2002:ffff:ffff::1"}},
		{"AS112Direct", []string{"2620:4f:8000::", "2620:4f:8000:ffff::1"}},
		{"Documentation3fff", []string{"3fff::", "3fff:fff:ffff::1"}},
		{"SRv6", []string{"5f00::", "5f00:ffff::1"}},
		{"UniqueLocal", []string{"fc00::", "fd00:ec2::254", "fdff:ffff::1"}},
		{"LinkLocal", []string{"fe80::", "fe80::1", "fe80::1%eth0", "febf:ffff::1"}},
		{"SiteLocal", []string{"fec0::", "feff:ffff::1"}},
		{"Multicast", []string{"ff00::", "ff02::1", "ff0e::1%lo"}},
		{"OutsideGlobalUnicast", []string{"1::1", "1fff:ffff::1", "4000::", "8000::1", "e000::1"}},
	}
	for _, tt := range denied {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var policy egress.Policy
			for _, s := range tt.samples {
				addr := netip.MustParseAddr(s)
				require.ErrorIs(t, policy.Check(addr), egress.ErrBlocked, s)
				require.False(t, policy.Allowed(addr), s)
			}
		})
	}

	t.Run("PublicAllowed", func(t *testing.T) {
		t.Parallel()

		var policy egress.Policy
		for _, s := range []string{
			"2606:4700::1111", "2606:4700:4700::1001", "2001:4860:4860::8888", "2a00:1450:4001::1",
			"2000::1",                                 // first address of 2000::/3
			"2001:200::1",                             // just past 2001::/23
			"2001:db9::1",                             // just past the documentation /32
			"2003::1",                                 // just past 6to4
			"2620:4f:7fff:ffff::1", "2620:4f:8001::1", // either side of AS112
			"3ffe:ffff::1", // just below 3fff::/20
			"3fff:1000::1", // just past 3fff::/20
		} {
			addr := netip.MustParseAddr(s)
			require.NoError(t, policy.Check(addr), s)
			require.True(t, policy.Allowed(addr), s)
			require.NoError(t, policy.Check(addr.WithZone("eth0")), "%s with zone", s)
		}
	})

	t.Run("InvalidAddress", func(t *testing.T) {
		t.Parallel()

		var policy egress.Policy
		require.ErrorIs(t, policy.Check(netip.Addr{}), egress.ErrBlocked)
	})
}

func TestPolicyAllowCIDRs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		allow   []string
		allowed []string
		blocked []string
	}{
		{
			name:    "LoopbackV4",
			allow:   []string{"127.0.0.0/8"},
			allowed: []string{"127.0.0.1", "127.255.255.254", "::ffff:127.0.0.1"},
			// The opt-in is exactly what it says: not IPv6 loopback, not another
			// private range, not loopback behind NAT64.
			blocked: []string{"::1", "10.0.0.1", "169.254.169.254", "64:ff9b::7f00:1", "::7f00:1"},
		},
		{
			name:    "LoopbackV6",
			allow:   []string{"::1/128"},
			allowed: []string{"::1"},
			blocked: []string{"127.0.0.1", "::2"},
		},
		{
			name:    "MappedPrefixIsUnmapped",
			allow:   []string{"::ffff:10.0.0.0/104"},
			allowed: []string{"10.1.2.3", "::ffff:10.1.2.3"},
			blocked: []string{"172.16.0.1", "192.168.0.1"},
		},
		{
			name:    "UnmaskedPrefix",
			allow:   []string{"192.168.1.77/24"},
			allowed: []string{"192.168.1.1"},
			blocked: []string{"192.168.2.1"},
		},
		{
			name:    "PublicStillAllowed",
			allow:   []string{"127.0.0.1/32"},
			allowed: []string{"1.1.1.1", "2606:4700::1111"},
			blocked: []string{"127.0.0.2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var policy egress.Policy
			for _, s := range tt.allow {
				policy.AllowCIDRs = append(policy.AllowCIDRs, netip.MustParsePrefix(s))
			}
			for _, s := range tt.allowed {
				require.NoError(t, policy.Check(netip.MustParseAddr(s)), s)
			}
			for _, s := range tt.blocked {
				require.ErrorIs(t, policy.Check(netip.MustParseAddr(s)), egress.ErrBlocked, s)
			}
		})
	}
}

func TestPolicyControl(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		network string
		address string
		ok      bool
	}{
		{name: "PublicTCP4", network: "tcp4", address: "1.1.1.1:443", ok: true},
		{name: "PublicTCP6", network: "tcp6", address: "[2606:4700::1111]:443", ok: true},
		{name: "Loopback", network: "tcp4", address: "127.0.0.1:80"},
		{name: "MappedLoopback", network: "tcp6", address: "[::ffff:127.0.0.1]:80"},
		{name: "ZonedLinkLocal", network: "tcp6", address: "[fe80::1%lo]:9"},
		{name: "Unspecified", network: "tcp4", address: "0.0.0.0:80"},
		{name: "UDP", network: "udp4", address: "1.1.1.1:53"},
		{name: "UnqualifiedTCP", network: "tcp", address: "1.1.1.1:443"},
		{name: "Unix", network: "unix", address: "/var/run/docker.sock"},
		{name: "Hostname", network: "tcp4", address: "example.com:443"},
		{name: "NoPort", network: "tcp4", address: "1.1.1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var policy egress.Policy
			err := policy.Control(context.Background(), tt.network, tt.address, nil)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, egress.ErrBlocked)
		})
	}
}

// FuzzPolicyCheck checks, over arbitrary 16-byte addresses, that the policy never
// panics and that every spelling of one address gets one answer.
func FuzzPolicyCheck(f *testing.F) {
	for _, s := range []string{"::ffff:127.0.0.1", "::ffff:1.1.1.1", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "2606:4700::1111", "fe80::1", "::", "2001::1"} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:])
	}

	allowLoopback := egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::ffff:10.0.0.0/104")}}
	globalUnicast := netip.MustParsePrefix("2000::/3")

	f.Fuzz(func(t *testing.T, raw []byte) {
		t.Parallel()

		var b [16]byte
		copy(b[:], raw)
		addr := netip.AddrFrom16(b)
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[12], 13: b[13], 14: b[14], 15: b[15]})

		for _, policy := range []egress.Policy{{}, allowLoopback} {
			got := policy.Check(addr)
			require.Equal(t, got == nil, policy.Allowed(addr))
			if got != nil {
				require.ErrorIs(t, got, egress.ErrBlocked)
			}
			require.Equal(t, got, policy.Check(addr.WithZone("eth0")), "zone must not matter")
			if addr.Is4In6() {
				require.Equal(t, got, policy.Check(addr.Unmap()), "mapped and unmapped must agree")
			}
			require.Equal(t, policy.Check(v4), policy.Check(mapped), "mapped and unmapped must agree")
		}
		// Without an allow-list nothing outside 2000::/3 but IPv4 is ever dialled.
		if !addr.Is4In6() && !globalUnicast.Contains(addr) {
			require.ErrorIs(t, egress.Policy{}.Check(addr), egress.ErrBlocked)
		}
	})
}
