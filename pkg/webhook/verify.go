package webhook

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Tolerance is how far a webhook-timestamp may be from the verifier's clock, in either
// direction. The spec leaves the number open; every reference library uses five
// minutes, so senders already keep their clocks within it.
const Tolerance = 5 * time.Minute

// DefaultMaxBody bounds the request body read by VerifyRequest when the caller passes
// maxBody <= 0. Thin events are small; anything near this size is not one of ours.
const DefaultMaxBody int64 = 1 << 20

// Verification failures. Every error returned by Verify, VerifyAt and VerifyRequest
// wraps exactly one of these (or ErrBodyTooLarge / ErrInvalidEvent / a read error for
// VerifyRequest), so handlers can map them to responses with errors.Is.
var (
	ErrMissingHeaders      = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrInvalidTimestamp    = errors.New("webhook: webhook-timestamp is not an integer")
	ErrTimestampTooOld     = errors.New("webhook: timestamp too old")
	ErrTimestampTooNew     = errors.New("webhook: timestamp too new")
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
	ErrBodyTooLarge        = errors.New("webhook: request body too large")
)

// Verifier checks Standard Webhooks v1 signatures against one or more secrets.
// It is safe for concurrent use.
type Verifier struct {
	keys [][]byte
}

// NewVerifier returns a Verifier that accepts a message signed with any of secrets.
//
// Several secrets are the receiving side of a rotation: keep the old secret next to
// the new one until the sender has stopped signing with it.
func NewVerifier(secrets ...string) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secrets given", ErrInvalidSecret)
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			// The index says which secret is bad without repeating any of it.
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		keys = append(keys, key)
	}
	return &Verifier{keys: keys}, nil
}

// Verify checks the Standard Webhooks headers in h against body at the current time.
// body must be the raw request body, exactly as received.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	return v.VerifyAt(h, body, time.Now())
}

// VerifyAt is Verify with an explicit clock, for tests and for replaying stored
// requests.
//
// The tolerance is applied in whole seconds, the resolution of the header: a message
// exactly five minutes old is still accepted.
func (v *Verifier) VerifyAt(h http.Header, body []byte, now time.Time) error {
	msgID := headerValue(h, HeaderID)
	tsText := headerValue(h, HeaderTimestamp)
	sigs := headerValues(h, HeaderSignature)
	if msgID == "" || tsText == "" || len(sigs) == 0 {
		return ErrMissingHeaders
	}

	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrInvalidTimestamp
	}
	// Whole seconds, as JS and Rust do: ts is attacker-chosen and may sit near the
	// int64 limits, so the distance is taken as uint64 only once its sign is known.
	nowUnix, tol := now.Unix(), uint64(Tolerance/time.Second)
	switch {
	case ts < nowUnix && uint64(nowUnix)-uint64(ts) > tol:
		return ErrTimestampTooOld
	case ts > nowUnix && uint64(ts)-uint64(nowUnix) > tol:
		return ErrTimestampTooNew
	}

	// One MAC per key, computed before looking at the header so the work does not
	// depend on how many entries an attacker puts in it.
	expected := make([][]byte, len(v.keys))
	for i, key := range v.keys {
		expected[i] = mac(key, msgID, ts, body)
	}
	for _, line := range sigs {
		for entry := range strings.FieldsSeq(line) {
			version, sig, ok := strings.Cut(entry, ",")
			// Other versions (v1a, future ones) are skipped, not failed: a sender may
			// sign with several schemes at once.
			if !ok || version != signatureVersion {
				continue
			}
			for _, exp := range expected {
				if hmac.Equal([]byte(sig), exp) {
					return nil
				}
			}
		}
	}
	return ErrNoMatchingSignature
}

// VerifyRequest reads r's body (at most maxBody bytes; DefaultMaxBody if maxBody <= 0),
// verifies its signature and decodes the thin event.
//
// It returns the raw body too, so callers can store or forward the exact bytes that
// were signed. The body is verified before it is parsed: unauthenticated input never
// reaches the JSON decoder. The caller still owns r.Body and the server closes it.
func (v *Verifier) VerifyRequest(r *http.Request, maxBody int64) (*Event, []byte, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	// Fail on missing headers before reading anything: it is cheap and it keeps
	// unsigned junk from costing a body read.
	if headerValue(r.Header, HeaderID) == "" || headerValue(r.Header, HeaderTimestamp) == "" ||
		len(headerValues(r.Header, HeaderSignature)) == 0 {
		return nil, nil, ErrMissingHeaders
	}
	if r.ContentLength > maxBody {
		return nil, nil, ErrBodyTooLarge
	}
	if r.Body == nil {
		// A server request always has a body; a hand-built one may not. Treat it as
		// empty so the signature check decides.
		r.Body = http.NoBody
	}
	// Read one byte past the limit to tell "exactly maxBody" from "more".
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: read body: %w", err)
	}
	if int64(len(body)) > maxBody {
		return nil, nil, ErrBodyTooLarge
	}
	if err := v.Verify(r.Header, body); err != nil {
		return nil, body, err
	}
	ev, err := Decode(body)
	if err != nil {
		return nil, body, err
	}
	return ev, body, nil
}

// headerValue returns the first value of the header named name, or "".
//
// Values are used verbatim, exactly as the signer's SetHeaders put them: trimming here
// but not there would make the two sides disagree on the signed content.
func headerValue(h http.Header, name string) string {
	if vs := headerValues(h, name); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// headerValues returns all non-empty values of the header named name.
//
// http.Header.Values only finds canonical keys, which is all a server produces; the
// fallback also finds keys that callers put into a hand-built map verbatim
// ("webhook-id"), as receivers in tests and adapters often do.
func headerValues(h http.Header, name string) []string {
	vs := h.Values(name)
	if len(vs) == 0 {
		for k, v := range h {
			if strings.EqualFold(k, name) {
				vs = v
				break
			}
		}
	}
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
