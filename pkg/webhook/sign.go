package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names defined by Standard Webhooks. They are case-insensitive on the wire;
// http.Header canonicalises them (Webhook-Id, …), which receivers must tolerate.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// The signature schemes: v1 is HMAC-SHA256 with a shared secret, v1a Ed25519
// with a key pair.
const (
	signatureVersion           = "v1"
	signatureVersionAsymmetric = "v1a"
)

// Sign returns one signature entry, "v1,<base64>", over msgID, ts and body.
//
// ts is truncated to whole Unix seconds, which is what the webhook-timestamp header
// carries; body must be the exact bytes that will be sent, never a re-serialisation.
func Sign(key []byte, msgID string, ts time.Time, body []byte) string {
	return signatureVersion + "," + string(mac(key, msgID, ts.Unix(), body))
}

// SignEd25519 returns one asymmetric signature entry, "v1a,<base64>", over msgID,
// ts and body, with the same signed content as Sign.
func SignEd25519(key ed25519.PrivateKey, msgID string, ts time.Time, body []byte) string {
	sig := ed25519.Sign(key, signedContent(msgID, ts.Unix(), body))
	return signatureVersionAsymmetric + "," + base64.StdEncoding.EncodeToString(sig)
}

// SignatureHeader returns the webhook-signature header value for body: one v1 entry
// per key, space-separated, in the order given.
//
// Several keys are passed during a secret rotation grace period (new and old key), so
// receivers that still hold the old secret keep verifying. It returns "" if keys is
// empty.
func SignatureHeader(keys [][]byte, msgID string, ts time.Time, body []byte) string {
	return Keys{HMAC: keys}.SignatureHeader(msgID, ts, body)
}

// SetHeaders sets the three Standard Webhooks headers on h for one delivery attempt,
// signed with the HMAC keys (v1). Keys.SetHeaders also signs with Ed25519 keys.
//
// Call it immediately before each attempt with that attempt's time: receivers reject
// timestamps more than five minutes away from their clock, so a retry must be
// re-signed rather than replayed.
func SetHeaders(h http.Header, keys [][]byte, msgID string, ts time.Time, body []byte) {
	Keys{HMAC: keys}.SetHeaders(h, msgID, ts, body)
}

// Keys are what one message is signed with. Each key gives one entry of the
// webhook-signature header: v1 entries for the HMAC keys, then v1a entries for
// the Ed25519 keys, each in the order given. Several keys of one kind are the
// overlap of a rotation; a header may mix both kinds, and verifiers skip the
// entries of a scheme they do not hold a key for.
type Keys struct {
	// HMAC keys, as ParseSecret returns them, sign v1 entries.
	HMAC [][]byte
	// Ed25519 private keys, as ParseSigningKey returns them, sign v1a entries.
	Ed25519 []ed25519.PrivateKey
}

// SignatureHeader returns the webhook-signature header value for body, or "" if
// k holds no key.
func (k Keys) SignatureHeader(msgID string, ts time.Time, body []byte) string {
	var b strings.Builder
	for _, key := range k.HMAC {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Sign(key, msgID, ts, body))
	}
	for _, key := range k.Ed25519 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(SignEd25519(key, msgID, ts, body))
	}
	return b.String()
}

// SetHeaders sets the three Standard Webhooks headers on h for one delivery
// attempt, as the package's SetHeaders does, signed with every key of k.
func (k Keys) SetHeaders(h http.Header, msgID string, ts time.Time, body []byte) {
	// Stored as h.Set stores them, under the names' canonical forms, which
	// are known here: canonicalizing the same three names again costs an
	// allocation each on every delivery.
	h[canonicalHeaderID] = []string{msgID}
	h[canonicalHeaderTimestamp] = []string{strconv.FormatInt(ts.Unix(), 10)}
	h[canonicalHeaderSignature] = []string{k.SignatureHeader(msgID, ts, body)}
}

// The canonical forms (textproto.CanonicalMIMEHeaderKey) of HeaderID,
// HeaderTimestamp and HeaderSignature: the keys http.Header.Set uses for them.
const (
	canonicalHeaderID        = "Webhook-Id"
	canonicalHeaderTimestamp = "Webhook-Timestamp"
	canonicalHeaderSignature = "Webhook-Signature"
)

// signedContent is "<id>.<timestamp>.<body>", the bytes both schemes sign.
func signedContent(msgID string, unix int64, body []byte) []byte {
	b := make([]byte, 0, len(msgID)+24+len(body))
	b = append(b, msgID...)
	b = append(b, '.')
	b = strconv.AppendInt(b, unix, 10)
	b = append(b, '.')
	return append(b, body...)
}

// mac returns the padded standard base64 text of HMAC-SHA256(key, id.ts.body).
//
// The text, not the raw MAC, is what verifiers compare (the Go, JS and Rust reference
// libraries compare base64 strings), so the encoding must be canonical.
func mac(key []byte, msgID string, unix int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	// The id and the timestamp are joined in one small buffer; the body is
	// written on its own, not copied into it.
	prefix := make([]byte, 0, len(msgID)+22) // 22: '.', an int64's 20 digits and sign, '.'
	prefix = append(prefix, msgID...)
	prefix = append(prefix, '.')
	prefix = strconv.AppendInt(prefix, unix, 10)
	prefix = append(prefix, '.')
	h.Write(prefix)
	h.Write(body)
	sum := h.Sum(nil)
	out := make([]byte, base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(out, sum)
	return out
}
