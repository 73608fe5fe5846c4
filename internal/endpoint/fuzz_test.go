package endpoint

import (
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

// FuzzValidateURL feeds arbitrary strings to the endpoint URL validator. It
// must never panic, and whatever it accepts must be an absolute http(s) URL
// with a plain host (no userinfo, no fragment, no control characters) that
// the deliver worker can turn into a request, and never a literal address
// the egress policy refuses. Seeds live in testdata/fuzz/FuzzValidateURL.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{
		"https://receiver.example.com/hooks?tenant=1", "http://example.com", "https://example.com:8443/x",
		"ftp://example.com/", "javascript:alert(1)", "https://user:pass@example.com/", "https://example.com/#f",
		"https://127.0.0.1/", "https://[::ffff:127.0.0.1]/", "https://[fe80::1%25eth0]/", "http://localhost./",
		"https://<script>/", `https:\\example.com`, "https://bücher.example/", "https://[2606:4700::1111]:443/",
		"https://example.com:0/", "https://%65xample.com/", "https://example.com/\x7f", "HTTPS://EXAMPLE.COM/",
		"http://2130706433/", "http://0x7f000001/", "http://017700000001/", "http://127.1/", "http://127.0.0.1./",
		"http://134744072/", "http://8.8.8.010/", "http://a.0Xff/", "http://1.2.3.4.5/", "http://v1.example.123/",
	} {
		f.Add(s, false)
	}
	f.Add("http://example.com/", true)

	f.Fuzz(func(t *testing.T, raw string, requireHTTPS bool) {
		t.Parallel()

		val := &validator{requireHTTPS: requireHTTPS}
		problem := val.urlProblem(raw)
		if problem != "" {
			require.True(t, utf8.ValidString(problem))
			return
		}

		require.LessOrEqual(t, len(raw), MaxURLLen)
		require.True(t, utf8.ValidString(raw))
		for _, r := range raw {
			require.False(t, r <= ' ' || r == 0x7f, "control character or space accepted in %q", raw)
		}
		require.NotContains(t, raw, "#")

		u, err := url.Parse(raw)
		require.NoError(t, err)
		require.True(t, u.IsAbs())
		if requireHTTPS {
			require.Equal(t, "https", u.Scheme)
		} else {
			require.Contains(t, []string{"http", "https"}, u.Scheme)
		}
		require.Empty(t, u.Opaque)
		require.Nil(t, u.User, "userinfo accepted in %q", raw)
		require.Empty(t, u.Fragment)
		require.NotEmpty(t, u.Hostname())
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			require.NoError(t, err)
			require.True(t, n >= 1 && n <= 65535, "port %d", n)
		}

		host := u.Hostname()
		if addr, err := netip.ParseAddr(host); err == nil {
			require.NoError(t, egress.Policy{}.Check(addr), "a refused literal address accepted: %q", raw)
		} else {
			lower := strings.ToLower(strings.TrimSuffix(host, "."))
			last := lower[strings.LastIndexByte(lower, '.')+1:]
			number := last != "" && strings.Trim(last, "0123456789") == "" ||
				strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == ""
			require.False(t, number, "a host ending in a number (a numeric IPv4 spelling) accepted: %q", raw)
			require.False(t, lower == "localhost" || strings.HasSuffix(lower, ".localhost"), "localhost accepted: %q", raw)
			for _, r := range host {
				if r < utf8.RuneSelf {
					ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
					require.True(t, ok, "host character %q accepted in %q", r, raw)
				}
			}
		}

		// The deliver worker builds its request from the stored URL: what is
		// accepted here must never fail there.
		req, err := http.NewRequest(http.MethodPost, raw, nil)
		require.NoError(t, err)
		require.Equal(t, u.Hostname(), req.URL.Hostname())
	})
}

// FuzzPageToken feeds arbitrary strings to both page-token decoders and
// arbitrary positions to both encoders. Decoding must never panic; whatever
// decodes must survive a re-encode unchanged; every encoded position must
// decode back to itself; and a token of one op never decodes for the other.
// Seeds live in testdata/fuzz/FuzzPageToken.
func FuzzPageToken(f *testing.F) {
	f.Add(encodeListToken(ListCursor{CreatedAt: time.UnixMicro(1_700_000_000_000_000), ID: uuid.MustParse("0190f3a4-6b7c-7d8e-9f00-112233445566")}),
		int64(1_700_000_000_000_000), []byte("0123456789abcdef"), int64(42))
	f.Add(encodeDeliveriesToken(42), int64(0), []byte{}, int64(1))
	f.Add("", int64(-1), []byte{0xff}, int64(0))
	f.Add("%%%", int64(9223372036854775807), []byte("x"), int64(-5))
	f.Add(encodeToken("e1", "+1", "{0190f3a4-6b7c-7d8e-9f00-112233445566}"), int64(-9223372036854775808), []byte(nil), int64(9223372036854775807))
	f.Add(encodeToken("d1", "00042"), int64(1), []byte("0123456789abcdefXYZ"), int64(-9223372036854775808))

	f.Fuzz(func(t *testing.T, tok string, micros int64, idBytes []byte, jobID int64) {
		t.Parallel()

		if c, ok := decodeListToken(tok); ok {
			require.NotNil(t, c)
			again, ok := decodeListToken(encodeListToken(*c))
			require.True(t, ok, "re-encoded list token does not decode: %q", tok)
			require.Equal(t, c.CreatedAt.UnixMicro(), again.CreatedAt.UnixMicro())
			require.Equal(t, c.ID, again.ID)
			_, isDeliveries := decodeDeliveriesToken(tok)
			require.False(t, isDeliveries, "one token decodes for both ops: %q", tok)
		}
		if id, ok := decodeDeliveriesToken(tok); ok {
			require.Positive(t, id)
			again, ok := decodeDeliveriesToken(encodeDeliveriesToken(id))
			require.True(t, ok)
			require.Equal(t, id, again)
		}

		var b [16]byte
		copy(b[:], idBytes)
		cursor := ListCursor{CreatedAt: time.UnixMicro(micros), ID: uuid.UUID(b)}
		lt := encodeListToken(cursor)
		got, ok := decodeListToken(lt)
		require.True(t, ok, "encoded list token does not decode: %+v", cursor)
		require.Equal(t, micros, got.CreatedAt.UnixMicro())
		require.Equal(t, cursor.ID, got.ID)
		_, ok = decodeDeliveriesToken(lt)
		require.False(t, ok)

		dt := encodeDeliveriesToken(jobID)
		id, ok := decodeDeliveriesToken(dt)
		require.Equal(t, jobID > 0, ok, "job id %d", jobID)
		if ok {
			require.Equal(t, jobID, id)
		}
		_, ok = decodeListToken(dt)
		require.False(t, ok)
	})
}

// FuzzValidateHeaders feeds arbitrary custom headers to the validator. It
// must never panic; what it accepts must be a header the deliver worker can
// send as is (a token name, none of the refused names, a value without
// control characters that survives the wire), and no description may hold
// the value.
func FuzzValidateHeaders(f *testing.F) {
	for _, s := range [][2]string{
		{"X-Api-Key", "k3y"}, {"Host", "x"}, {"webhook-id", "x"}, {"X-K", "a\r\nb: c"}, {"X K", "v"},
		{"Content-Length", "0"}, {"Proxy-Authorization", "x"}, {"x", " lead"}, {"X-É", "v"}, {"X-K", "é"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		t.Parallel()
		var v violations
		hs := (&validator{}).headers(&v, map[string]string{name: value})
		if len(v) > 0 {
			for _, x := range v {
				require.True(t, utf8.ValidString(x.Description))
				if len(value) >= 8 {
					require.NotContains(t, x.Description, value)
				}
			}
			return
		}
		require.Len(t, hs, 1)
		require.Empty(t, headerNameProblem(name))
		lower := strings.ToLower(name)
		require.False(t, refusedHeaders[lower], name)
		for _, p := range refusedPrefixes {
			require.False(t, strings.HasPrefix(lower, p), name)
		}
		require.NotContains(t, value, "\r")
		require.NotContains(t, value, "\n")
		req, err := http.NewRequest(http.MethodPost, "http://example.com/", nil)
		require.NoError(t, err)
		req.Header.Set(name, value)
		var b strings.Builder
		require.NoError(t, req.Header.Write(&b))
		require.Equal(t, 1, strings.Count(b.String(), "\r\n"), "one header line")
	})
}
