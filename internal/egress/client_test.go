package egress_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

var loopbackV4 = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// receiver is an httptest server on 127.0.0.1 that counts the requests reaching it.
type receiver struct {
	*httptest.Server
	hits atomic.Int64
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		if h != nil {
			h(w, req)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) port(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(r.URL)
	require.NoError(t, err)
	return u.Port()
}

func TestNewClientConfiguration(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()

		client := egress.NewClient(egress.Config{})
		require.Equal(t, egress.DefaultTimeout, client.Timeout)
		require.Nil(t, client.Jar)

		tr, ok := client.Transport.(*http.Transport)
		require.True(t, ok)
		// HTTP_PROXY and friends must never apply: with a proxy the dial check sees
		// only the proxy. (t.Setenv cannot be combined with t.Parallel, so assert
		// the configuration rather than the behaviour.)
		require.Nil(t, tr.Proxy)
		require.Nil(t, tr.DialTLSContext, "a separate TLS dialer would bypass the check")
		require.Nil(t, tr.Dial) //nolint:staticcheck // deprecated, but it would bypass DialContext if set
		require.NotNil(t, tr.DialContext)
		require.True(t, tr.ForceAttemptHTTP2)
		require.Equal(t, uint16(tls.VersionTLS12), tr.TLSClientConfig.MinVersion)
		require.False(t, tr.TLSClientConfig.InsecureSkipVerify)
		require.Equal(t, egress.DefaultMaxIdleConnsPerHost, tr.MaxIdleConnsPerHost)
		require.Equal(t, 90*time.Second, tr.IdleConnTimeout)
		require.False(t, tr.DisableKeepAlives)
	})

	t.Run("Overrides", func(t *testing.T) {
		t.Parallel()

		client := egress.NewClient(egress.Config{Timeout: 3 * time.Second, MaxIdleConnsPerHost: 2})
		require.Equal(t, 3*time.Second, client.Timeout)
		require.Equal(t, 2, client.Transport.(*http.Transport).MaxIdleConnsPerHost)
	})

	t.Run("NewTransportHasNoProxy", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, egress.NewTransport(egress.Config{}).Proxy)
	})
}

func TestClientLoopback(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		receiver *receiver
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{receiver: newReceiver(t, nil)}
	}

	t.Run("RefusedByDefault", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		resp, err := egress.NewClient(egress.Config{}).Post(bundle.receiver.URL, "application/json", nil)
		if resp != nil {
			resp.Body.Close()
		}
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, bundle.receiver.hits.Load(), "the handler must never run")

		// The sentinel survives the standard wrappers, and the dial error does not
		// name the address it refused.
		var urlErr *url.Error
		require.ErrorAs(t, err, &urlErr)
		var opErr *net.OpError
		require.ErrorAs(t, err, &opErr)
		require.Nil(t, opErr.Addr)
		require.NotContains(t, opErr.Error(), "127.0.0.1")
		require.Equal(t, "dial tcp: egress: destination not allowed", opErr.Error())
	})

	t.Run("ReachedWithAllowList", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		resp, err := egress.NewClient(egress.Config{AllowCIDRs: loopbackV4}).Post(bundle.receiver.URL, "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		require.Equal(t, int64(1), bundle.receiver.hits.Load())
	})

	t.Run("MappedSpellingRefused", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		resp, err := egress.NewClient(egress.Config{}).Get("http://[::ffff:127.0.0.1]:" + bundle.receiver.port(t) + "/")
		if resp != nil {
			resp.Body.Close()
		}
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, bundle.receiver.hits.Load())
	})

	t.Run("UnspecifiedAddressRefused", func(t *testing.T) {
		t.Parallel()

		// On Linux 0.0.0.0 connects to the local host; even with loopback allowed it
		// is not loopback and must be refused.
		bundle := setup(t)
		resp, err := egress.NewClient(egress.Config{AllowCIDRs: loopbackV4}).Get("http://0.0.0.0:" + bundle.receiver.port(t) + "/")
		if resp != nil {
			resp.Body.Close()
		}
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, bundle.receiver.hits.Load())
	})
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()

	internal := newReceiver(t, nil)
	redirector := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/admin", http.StatusFound)
	})

	req, err := http.NewRequest(http.MethodPost, redirector.URL, nil)
	require.NoError(t, err)
	req.Header.Set("webhook-signature", "v1,secret-bearing")
	resp, err := egress.NewClient(egress.Config{AllowCIDRs: loopbackV4}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()

	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, internal.URL+"/admin", resp.Header.Get("Location"))
	require.Equal(t, int64(1), redirector.hits.Load())
	require.Zero(t, internal.hits.Load(), "the redirect target must never be contacted")
}

func TestClientTimeout(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	slow := newReceiver(t, func(http.ResponseWriter, *http.Request) { <-release })
	// Unblock the handler before the server's Close (registered earlier, runs later)
	// waits for it.
	t.Cleanup(func() { close(release) })

	client := egress.NewClient(egress.Config{AllowCIDRs: loopbackV4, Timeout: 200 * time.Millisecond})
	resp, err := client.Get(slow.URL)
	if resp != nil {
		resp.Body.Close()
	}
	var urlErr *url.Error
	require.ErrorAs(t, err, &urlErr)
	require.True(t, urlErr.Timeout())
	require.NotErrorIs(t, err, egress.ErrBlocked)
	require.Equal(t, int64(1), slow.hits.Load(), "exactly one attempt: the client never retries")
}

func TestClientResolvedAddressChecked(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		receiver *receiver
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{receiver: newReceiver(t, nil)}
	}
	// get requests http://receiver.example:<port>/ through a fake DNS server that
	// answers with answers.
	get := func(t *testing.T, bundle *testBundle, allow []netip.Prefix, answers ...netip.Addr) (*http.Response, error) {
		t.Helper()
		client := egress.NewClient(egress.Config{AllowCIDRs: allow, Resolver: fakeDNS(t, answers...)})
		resp, err := client.Get("http://receiver.example:" + bundle.receiver.port(t) + "/")
		if resp != nil {
			resp.Body.Close()
		}
		return resp, err
	}

	t.Run("HostnameToBlockedAddressRefused", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		_, err := get(t, bundle, nil, netip.MustParseAddr("127.0.0.1"))
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, bundle.receiver.hits.Load())
		require.NotContains(t, err.Error(), "127.0.0.1", "the resolved internal address must not leak")
		t.Log(err)
	})

	t.Run("HostnameToAllowedAddressReached", func(t *testing.T) {
		t.Parallel()

		// Control case: the same resolver path works when the address is allowed,
		// so the refusal above is the policy, not a DNS failure.
		bundle := setup(t)
		resp, err := get(t, bundle, loopbackV4, netip.MustParseAddr("127.0.0.1"))
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		require.Equal(t, int64(1), bundle.receiver.hits.Load())
	})

	t.Run("BlockedRecordSkippedForAllowedOne", func(t *testing.T) {
		t.Parallel()

		// Each resolved address is judged on its own: a refused record makes the
		// dialer move on to the next, as smokescreen's "first allowed IP" does.
		bundle := setup(t)
		only := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		resp, err := get(t, bundle, only, netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"))
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	})

	t.Run("AllRecordsBlocked", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		_, err := get(t, bundle, nil, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"))
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, bundle.receiver.hits.Load())
	})
}

// fakeDNS starts a UDP DNS server on 127.0.0.1 that answers every A/AAAA query with
// the matching addresses from answers, and returns a resolver that uses only it.
func fakeDNS(t *testing.T, answers ...netip.Addr) *net.Resolver {
	t.Helper()

	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })

	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			if resp := dnsResponse(buf[:n], answers); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()

	server := pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", server)
		},
	}
}

// dnsResponse builds the answer to a single-question query (RFC 1035 §4.1), or
// returns nil for anything it does not understand.
func dnsResponse(query []byte, answers []netip.Addr) []byte {
	const (
		typeA    = 1
		typeAAAA = 28
	)
	if len(query) < 12 || binary.BigEndian.Uint16(query[4:6]) != 1 {
		return nil
	}
	// Skip QNAME (uncompressed labels in a query) to find QTYPE and QCLASS.
	i := 12
	for i < len(query) && query[i] != 0 {
		i += int(query[i]) + 1
	}
	if i+5 > len(query) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(query[i+1 : i+3])
	question := query[12 : i+5]

	var records [][]byte
	for _, a := range answers {
		switch {
		case qtype == typeA && a.Is4():
			b := a.As4()
			records = append(records, b[:])
		case qtype == typeAAAA && a.Is6():
			b := a.As16()
			records = append(records, b[:])
		}
	}

	resp := make([]byte, 12, 512)
	copy(resp[0:2], query[0:2])                   // ID
	binary.BigEndian.PutUint16(resp[2:4], 0x8180) // QR, RD, RA, NOERROR
	binary.BigEndian.PutUint16(resp[4:6], 1)      // QDCOUNT
	binary.BigEndian.PutUint16(resp[6:8], uint16(len(records)))
	resp = append(resp, question...)
	for _, rdata := range records {
		resp = append(resp, 0xc0, 12) // pointer to the question's name
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 0) // TTL: never cache
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rdata)))
		resp = append(resp, rdata...)
	}
	return resp
}
