package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/base64"
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

// maxAsymmetricEntries bounds the v1a entries of one header that are checked:
// each costs an Ed25519 verification, and a sender signs with at most a
// couple of keys (two during a rotation).
const maxAsymmetricEntries = 8

// Verifier checks Standard Webhooks signatures against one or more secrets (v1,
// HMAC-SHA256) or public keys (v1a, Ed25519). It is safe for concurrent use.
type Verifier struct {
	keys [][]byte
	pubs []ed25519.PublicKey
}

// NewVerifier returns a Verifier that accepts a message signed with any of keys.
// Each is a shared secret ("whsec_…", the prefix optional) for v1 signatures or
// a public key ("whpk_…", the prefix required) for v1a signatures.
//
// Several keys are the receiving side of a rotation: keep the old one next to the
// new one until the sender has stopped signing with it.
func NewVerifier(keys ...string) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no secrets given", ErrInvalidSecret)
	}
	v := &Verifier{}
	for i, s := range keys {
		if strings.HasPrefix(s, PublicKeyPrefix) {
			pub, err := ParsePublicKey(s)
			if err != nil {
				return nil, fmt.Errorf("key %d: %w", i, err)
			}
			v.pubs = append(v.pubs, pub)
			continue
		}
		key, err := ParseSecret(s)
		if err != nil {
			// The index says which secret is bad without repeating any of it.
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
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
	var content []byte // for v1a, built on the first v1a entry
	asymmetric := 0
	for _, line := range sigs {
		for entry := range strings.FieldsSeq(line) {
			version, sig, ok := strings.Cut(entry, ",")
			switch {
			case !ok:
			case version == signatureVersion:
				for _, exp := range expected {
					if hmac.Equal([]byte(sig), exp) {
						return nil
					}
				}
			case version == signatureVersionAsymmetric && len(v.pubs) > 0 && asymmetric < maxAsymmetricEntries:
				asymmetric++
				raw, err := base64.StdEncoding.DecodeString(sig)
				if err != nil || len(raw) != ed25519.SignatureSize {
					continue
				}
				if content == nil {
					content = signedContent(msgID, ts, body)
				}
				for _, pub := range v.pubs {
					if ed25519.Verify(pub, content, raw) {
						return nil
					}
				}
			}
			// Anything else (another version, a scheme this Verifier holds no
			// key for) is skipped, not failed: a sender may sign with several
			// schemes at once.
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
