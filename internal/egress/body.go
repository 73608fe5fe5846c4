package egress

import (
	"fmt"
	"io"
	"net/http"
)

// DefaultBodyLimit is how much of a response body ReadBody keeps by default: enough
// for an error summary, small enough to store with every attempt.
const DefaultBodyLimit int64 = 1 << 10

// drainLimit is how much more ReadBody is willing to read and discard so that the
// connection can go back to the pool. Beyond that, closing the connection is cheaper
// than reading a hostile or huge body to its end.
const drainLimit int64 = 64 << 10

// ReadBody reads at most limit bytes of resp's body (DefaultBodyLimit if limit <= 0)
// and closes it. A longer body is silently truncated.
//
// After the first limit bytes, up to 64 KiB more are read and discarded: a body that
// ends within that bound leaves its keep-alive connection reusable; a longer one is
// abandoned and its connection closed. So it never reads more than limit+64 KiB.
func ReadBody(resp *http.Response, limit int64) ([]byte, error) {
	if resp == nil || resp.Body == nil {
		return nil, nil
	}
	defer resp.Body.Close()
	if limit <= 0 {
		limit = DefaultBodyLimit
	}

	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return b, fmt.Errorf("egress: read response body: %w", err)
	}
	// When the length is known to exceed what would be drained, skip the pointless
	// partial read; the connection is lost either way.
	if resp.ContentLength < 0 || resp.ContentLength <= limit+drainLimit {
		// A drain failure only costs the connection; the summary is already read.
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	}
	return b, nil
}
