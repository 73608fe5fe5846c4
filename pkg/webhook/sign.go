package webhook

import (
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

// signatureVersion is the only scheme implemented: HMAC-SHA256 with a shared secret.
const signatureVersion = "v1"

// Sign returns one signature entry, "v1,<base64>", over msgID, ts and body.
//
// ts is truncated to whole Unix seconds, which is what the webhook-timestamp header
// carries; body must be the exact bytes that will be sent, never a re-serialisation.
func Sign(key []byte, msgID string, ts time.Time, body []byte) string {
	return signatureVersion + "," + string(mac(key, msgID, ts.Unix(), body))
}

// SignatureHeader returns the webhook-signature header value for body: one v1 entry
// per key, space-separated, in the order given.
//
// Several keys are passed during a secret rotation grace period (new and old key), so
// receivers that still hold the old secret keep verifying. It returns "" if keys is
// empty.
func SignatureHeader(keys [][]byte, msgID string, ts time.Time, body []byte) string {
	var b strings.Builder
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Sign(key, msgID, ts, body))
	}
	return b.String()
}

// SetHeaders sets the three Standard Webhooks headers on h for one delivery attempt.
//
// Call it immediately before each attempt with that attempt's time: receivers reject
// timestamps more than five minutes away from their clock, so a retry must be
// re-signed rather than replayed.
func SetHeaders(h http.Header, keys [][]byte, msgID string, ts time.Time, body []byte) {
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, SignatureHeader(keys, msgID, ts, body))
}

// mac returns the padded standard base64 text of HMAC-SHA256(key, id.ts.body).
//
// The text, not the raw MAC, is what verifiers compare (the Go, JS and Rust reference
// libraries compare base64 strings), so the encoding must be canonical.
func mac(key []byte, msgID string, unix int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	// Writing the parts separately avoids copying the body into a joined buffer.
	h.Write([]byte(msgID))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, unix, 10))
	h.Write([]byte{'.'})
	h.Write(body)
	sum := h.Sum(nil)
	out := make([]byte, base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(out, sum)
	return out
}
