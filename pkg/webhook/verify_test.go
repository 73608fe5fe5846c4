package webhook_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

const (
	testMsgID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	testBody  = `{"id":"msg_p5jXN8AQM9LWM0D4loKWxJek","type":"corpus.note.changed","subject":"wiki://software/project/standmeet/architecture","occurred_at":"2026-01-02T03:04:05Z","data":{"op":"updated","published":true,"was_published":true}}`
)

type testBundle struct {
	secret   string
	key      []byte
	verifier *webhook.Verifier
	now      time.Time
	body     []byte
}

func setup(t *testing.T) *testBundle {
	t.Helper()

	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	key, err := webhook.ParseSecret(secret)
	require.NoError(t, err)
	verifier, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	return &testBundle{
		secret:   secret,
		key:      key,
		verifier: verifier,
		now:      time.Unix(1_780_000_000, 0),
		body:     []byte(testBody),
	}
}

// signed returns headers for bundle.body signed with keys at ts.
func (b *testBundle) signed(ts time.Time, keys ...[]byte) http.Header {
	if len(keys) == 0 {
		keys = [][]byte{b.key}
	}
	h := http.Header{}
	webhook.SetHeaders(h, keys, testMsgID, ts, b.body)
	return h
}

func TestSetHeaders(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	ts := time.Unix(1_780_000_000, 999_999_999) // sub-second part must be dropped
	h := bundle.signed(ts)

	require.Equal(t, testMsgID, h.Get(webhook.HeaderID))
	require.Equal(t, "1780000000", h.Get(webhook.HeaderTimestamp))
	require.Equal(t, webhook.Sign(bundle.key, testMsgID, ts, bundle.body), h.Get(webhook.HeaderSignature))
	require.True(t, strings.HasPrefix(h.Get(webhook.HeaderSignature), "v1,"))
	require.Len(t, h.Get(webhook.HeaderSignature), len("v1,")+44)
}

func TestSignatureHeader(t *testing.T) {
	t.Parallel()

	t.Run("NoKeys", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, webhook.SignatureHeader(nil, testMsgID, time.Unix(0, 0), nil))
	})

	t.Run("OneEntryPerKeyInOrder", func(t *testing.T) {
		t.Parallel()

		bundle, other := setup(t), setup(t)
		ts := bundle.now
		got := webhook.SignatureHeader([][]byte{bundle.key, other.key}, testMsgID, ts, bundle.body)
		require.Equal(t, []string{
			webhook.Sign(bundle.key, testMsgID, ts, bundle.body),
			webhook.Sign(other.key, testMsgID, ts, bundle.body),
		}, strings.Split(got, " "))
	})
}

func TestVerifierRotation(t *testing.T) {
	t.Parallel()

	t.Run("SenderSignsWithOldAndNew", func(t *testing.T) {
		t.Parallel()

		oldKey, newKey := setup(t), setup(t)
		h := oldKey.signed(oldKey.now, newKey.key, oldKey.key)

		// A receiver that has not picked up the new secret yet, one that already
		// dropped the old one, and one holding both all accept.
		require.NoError(t, oldKey.verifier.VerifyAt(h, oldKey.body, oldKey.now))
		require.NoError(t, newKey.verifier.VerifyAt(h, oldKey.body, oldKey.now))
		both, err := webhook.NewVerifier(newKey.secret, oldKey.secret)
		require.NoError(t, err)
		require.NoError(t, both.VerifyAt(h, oldKey.body, oldKey.now))

		stranger := setup(t)
		require.ErrorIs(t, stranger.verifier.VerifyAt(h, oldKey.body, oldKey.now), webhook.ErrNoMatchingSignature)
	})

	t.Run("ReceiverHoldsOldAndNew", func(t *testing.T) {
		t.Parallel()

		oldKey, newKey := setup(t), setup(t)
		both, err := webhook.NewVerifier(oldKey.secret, newKey.secret)
		require.NoError(t, err)
		require.NoError(t, both.VerifyAt(oldKey.signed(oldKey.now), oldKey.body, oldKey.now))
		require.NoError(t, both.VerifyAt(oldKey.signed(oldKey.now, newKey.key), oldKey.body, oldKey.now))
	})
}

func TestNewVerifier(t *testing.T) {
	t.Parallel()

	t.Run("NoSecrets", func(t *testing.T) {
		t.Parallel()
		_, err := webhook.NewVerifier()
		require.ErrorIs(t, err, webhook.ErrInvalidSecret)
	})

	t.Run("OneBadSecretNamesItsIndexOnly", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		bad := "whsec_c2hvcnQ=" // 5 bytes
		_, err := webhook.NewVerifier(bundle.secret, bad)
		require.ErrorIs(t, err, webhook.ErrInvalidSecret)
		require.Contains(t, err.Error(), "secret 1")
		require.NotContains(t, err.Error(), "c2hvcnQ")
		require.NotContains(t, err.Error(), strings.TrimPrefix(bundle.secret, webhook.SecretPrefix))
	})
}

func TestVerifyAt(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		require.NoError(t, bundle.verifier.VerifyAt(bundle.signed(bundle.now), bundle.body, bundle.now))
	})

	t.Run("VerifyUsesWallClock", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		require.NoError(t, bundle.verifier.Verify(bundle.signed(time.Now()), bundle.body))
		require.ErrorIs(t, bundle.verifier.Verify(bundle.signed(time.Now().Add(-time.Hour)), bundle.body), webhook.ErrTimestampTooOld)
	})

	t.Run("Tolerance", func(t *testing.T) {
		t.Parallel()

		tests := []struct {
			name   string
			offset time.Duration // signing time relative to now
			want   error
		}{
			{name: "Exactly300sOld", offset: -300 * time.Second},
			{name: "Exactly300sAhead", offset: 300 * time.Second},
			{name: "301sOld", offset: -301 * time.Second, want: webhook.ErrTimestampTooOld},
			{name: "301sAhead", offset: 301 * time.Second, want: webhook.ErrTimestampTooNew},
			{name: "DayOld", offset: -24 * time.Hour, want: webhook.ErrTimestampTooOld},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()

				bundle := setup(t)
				err := bundle.verifier.VerifyAt(bundle.signed(bundle.now.Add(tt.offset)), bundle.body, bundle.now)
				if tt.want == nil {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, tt.want)
			})
		}
	})

	t.Run("ExtremeTimestampsDoNotOverflow", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		for ts, want := range map[int64]error{
			math.MaxInt64: webhook.ErrTimestampTooNew,
			math.MinInt64: webhook.ErrTimestampTooOld,
			-1:            webhook.ErrTimestampTooOld,
		} {
			h := bundle.signed(bundle.now)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
			require.ErrorIs(t, bundle.verifier.VerifyAt(h, bundle.body, bundle.now), want, "ts=%d", ts)
		}
		// A clock at the far end of time must not wrap either.
		far := time.Unix(math.MaxInt64-100, 0)
		h := bundle.signed(bundle.now)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(math.MinInt64, 10))
		require.ErrorIs(t, bundle.verifier.VerifyAt(h, bundle.body, far), webhook.ErrTimestampTooOld)
	})

	t.Run("MissingHeaders", func(t *testing.T) {
		t.Parallel()

		for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
			bundle := setup(t)
			h := bundle.signed(bundle.now)
			h.Del(name)
			require.ErrorIs(t, bundle.verifier.VerifyAt(h, bundle.body, bundle.now), webhook.ErrMissingHeaders, name)

			h = bundle.signed(bundle.now)
			h.Set(name, "")
			require.ErrorIs(t, bundle.verifier.VerifyAt(h, bundle.body, bundle.now), webhook.ErrMissingHeaders, name)
		}
		bundle := setup(t)
		require.ErrorIs(t, bundle.verifier.VerifyAt(nil, bundle.body, bundle.now), webhook.ErrMissingHeaders)
	})

	t.Run("InvalidTimestamp", func(t *testing.T) {
		t.Parallel()

		for _, ts := range []string{"hello", "1780000000.5", "1e9", " 1780000000", "99999999999999999999"} {
			bundle := setup(t)
			h := bundle.signed(bundle.now)
			h.Set(webhook.HeaderTimestamp, ts)
			require.ErrorIs(t, bundle.verifier.VerifyAt(h, bundle.body, bundle.now), webhook.ErrInvalidTimestamp, ts)
		}
	})

	t.Run("TamperedInputs", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		h := bundle.signed(bundle.now)
		noMatch := func(h http.Header, body []byte) {
			t.Helper()
			require.ErrorIs(t, bundle.verifier.VerifyAt(h, body, bundle.now), webhook.ErrNoMatchingSignature)
		}

		noMatch(h, append(bytes.Clone(bundle.body), ' '))
		noMatch(h, nil)

		changedID := h.Clone()
		changedID.Set(webhook.HeaderID, "msg_other")
		noMatch(changedID, bundle.body)

		// Re-dated within tolerance: the timestamp is signed, so this still fails.
		changedTS := h.Clone()
		changedTS.Set(webhook.HeaderTimestamp, strconv.FormatInt(bundle.now.Unix()+1, 10))
		noMatch(changedTS, bundle.body)
	})

	t.Run("SignatureEntries", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		valid := webhook.Sign(bundle.key, testMsgID, bundle.now, bundle.body)
		sig := strings.TrimPrefix(valid, "v1,")
		tests := []struct {
			name   string
			header string
			ok     bool
		}{
			{name: "Single", header: valid, ok: true},
			{name: "AfterUnknownVersions", header: "v1a," + sig + " v2," + sig + " " + valid, ok: true},
			{name: "ExtraWhitespace", header: "  v1,AAAA \t " + valid + "  ", ok: true},
			{name: "OtherVersionLabel", header: "v2," + sig},
			{name: "UpperCaseVersion", header: "V1," + sig},
			{name: "NoComma", header: sig},
			{name: "Unpadded", header: "v1," + strings.TrimRight(sig, "=")},
			{name: "DecodedBytesNotText", header: "v1," + strings.TrimRight(sig, "=") + "=="},
			{name: "TrailingGarbage", header: valid + "x"},
			{name: "CommaOnly", header: ","},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()

				h := bundle.signed(bundle.now)
				h.Set(webhook.HeaderSignature, tt.header)
				err := bundle.verifier.VerifyAt(h, bundle.body, bundle.now)
				if tt.ok {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, webhook.ErrNoMatchingSignature)
			})
		}
	})

	t.Run("SeveralSignatureHeaderLines", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		h := bundle.signed(bundle.now)
		valid := h.Get(webhook.HeaderSignature)
		h.Set(webhook.HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
		h.Add(webhook.HeaderSignature, valid)
		require.NoError(t, bundle.verifier.VerifyAt(h, bundle.body, bundle.now))
	})

	t.Run("NonCanonicalHeaderKeys", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		canonical := bundle.signed(bundle.now)
		// Keys exactly as on the wire, bypassing http.Header's canonicalisation.
		h := http.Header{
			"webhook-id":        canonical.Values(webhook.HeaderID),
			"WEBHOOK-TIMESTAMP": canonical.Values(webhook.HeaderTimestamp),
			"webhook-signature": canonical.Values(webhook.HeaderSignature),
		}
		require.NoError(t, bundle.verifier.VerifyAt(h, bundle.body, bundle.now))
	})
}

func TestVerifyRequest(t *testing.T) {
	t.Parallel()

	request := func(bundle *testBundle, body []byte) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
		webhook.SetHeaders(r.Header, [][]byte{bundle.key}, testMsgID, time.Now(), body)
		return r
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		ev, raw, err := bundle.verifier.VerifyRequest(request(bundle, bundle.body), 0)
		require.NoError(t, err)
		require.Equal(t, bundle.body, raw)
		require.Equal(t, testMsgID, ev.ID)
		require.Equal(t, "corpus.note.changed", ev.Type)
		require.Equal(t, "wiki://software/project/standmeet/architecture", ev.Subject)
		require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ev.OccurredAt)
		require.JSONEq(t, `{"op":"updated","published":true,"was_published":true}`, string(ev.Data))
	})

	t.Run("BodyExactlyAtLimit", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		_, _, err := bundle.verifier.VerifyRequest(request(bundle, bundle.body), int64(len(bundle.body)))
		require.NoError(t, err)
	})

	t.Run("BodyOverLimitByContentLength", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		_, _, err := bundle.verifier.VerifyRequest(request(bundle, bundle.body), int64(len(bundle.body))-1)
		require.ErrorIs(t, err, webhook.ErrBodyTooLarge)
	})

	t.Run("BodyOverLimitWithoutContentLength", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		r := request(bundle, bundle.body)
		r.ContentLength = -1
		// Far more than the limit is available; only limit+1 bytes may be read.
		counter := &countingReader{r: io.MultiReader(bytes.NewReader(bundle.body), zeroReader{})}
		r.Body = io.NopCloser(counter)
		_, _, err := bundle.verifier.VerifyRequest(r, 1024)
		require.ErrorIs(t, err, webhook.ErrBodyTooLarge)
		require.LessOrEqual(t, counter.n, int64(1025))
	})

	t.Run("MissingHeadersBeforeReadingBody", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		r := httptest.NewRequest(http.MethodPost, "/hook", nil)
		counter := &countingReader{r: bytes.NewReader(bundle.body)}
		r.Body = io.NopCloser(counter)
		_, _, err := bundle.verifier.VerifyRequest(r, 0)
		require.ErrorIs(t, err, webhook.ErrMissingHeaders)
		require.Zero(t, counter.n)
	})

	t.Run("BadSignatureIsNotDecoded", func(t *testing.T) {
		t.Parallel()

		bundle, other := setup(t), setup(t)
		ev, raw, err := other.verifier.VerifyRequest(request(bundle, bundle.body), 0)
		require.ErrorIs(t, err, webhook.ErrNoMatchingSignature)
		require.Nil(t, ev)
		require.Equal(t, bundle.body, raw)
	})

	t.Run("AuthenticButNotAnEvent", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		_, _, err := bundle.verifier.VerifyRequest(request(bundle, []byte(`{"hello":"world"}`)), 0)
		require.ErrorIs(t, err, webhook.ErrInvalidEvent)
	})

	t.Run("ReadError", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		r := request(bundle, bundle.body)
		boom := errors.New("connection reset")
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(bundle.body[:10]), errReader{boom}))
		_, _, err := bundle.verifier.VerifyRequest(r, 0)
		require.ErrorIs(t, err, boom)
	})

	t.Run("NilBody", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		r := request(bundle, nil)
		r.Body = nil
		_, _, err := bundle.verifier.VerifyRequest(r, 0)
		require.ErrorIs(t, err, webhook.ErrInvalidEvent) // empty body, correctly signed
	})
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
