package webhook

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

// BenchmarkSetHeaders is the signing of one delivery, as the delivery worker
// does it: the three webhook-* headers on a request's header map, one HMAC
// key, a 1 KiB body.
func BenchmarkSetHeaders(b *testing.B) {
	keys := Keys{HMAC: [][]byte{bytes.Repeat([]byte{7}, 32)}}
	body := bytes.Repeat([]byte("x"), 1024)
	ts := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		h := make(http.Header, 8)
		keys.SetHeaders(h, "0190a3c2-7b7e-7c6f-8e1a-1c2d3e4f5a6b", ts, body)
	}
}
