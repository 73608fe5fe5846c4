package endpoint

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Page tokens are opaque to callers: a version tag and the position after the
// last item, base64url-encoded. They carry no owner: every query is filtered
// by the request's owner anyway, so a token replayed under another owner can
// only page through that owner's own rows.

const (
	endpointsTokenTag  = "e1"
	deliveriesTokenTag = "d1"
	redeliverTokenTag  = "r1"
	attemptsTokenTag   = "a1"
)

func encodeToken(parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, "|")))
}

func decodeToken(tok, tag string, n int) ([]string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, false
	}
	parts := strings.Split(string(b), "|")
	if len(parts) != n+1 || parts[0] != tag {
		return nil, false
	}
	return parts[1:], true
}

func encodeListToken(c ListCursor) string {
	return encodeToken(endpointsTokenTag, strconv.FormatInt(c.CreatedAt.UnixMicro(), 10), c.ID.String())
}

func decodeListToken(tok string) (*ListCursor, bool) {
	parts, ok := decodeToken(tok, endpointsTokenTag, 2)
	if !ok {
		return nil, false
	}
	micros, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return nil, false
	}
	id, err := uuid.Parse(parts[1])
	if err != nil {
		return nil, false
	}
	return &ListCursor{CreatedAt: time.UnixMicro(micros), ID: id}, true
}

// encodeIDToken and decodeIDToken: the token of a page that continues after
// a positive int64 id (deliveries after a job id, attempts after an attempt id).
func encodeIDToken(tag string, id int64) string {
	return encodeToken(tag, strconv.FormatInt(id, 10))
}

func decodeIDToken(tok, tag string) (int64, bool) {
	parts, ok := decodeToken(tok, tag, 1)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

func encodeDeliveriesToken(lastJobID int64) string {
	return encodeIDToken(deliveriesTokenTag, lastJobID)
}

func decodeDeliveriesToken(tok string) (int64, bool) { return decodeIDToken(tok, deliveriesTokenTag) }

// encodeRedeliverToken carries Redeliver's since (so a continuation cannot
// silently widen or narrow the window) and the last job it examined.
func encodeRedeliverToken(since *time.Time, lastJobID int64) string {
	sinceText := ""
	if since != nil {
		sinceText = strconv.FormatInt(since.UnixMicro(), 10)
	}
	return encodeToken(redeliverTokenTag, sinceText, strconv.FormatInt(lastJobID, 10))
}

func decodeRedeliverToken(tok string) (*time.Time, int64, bool) {
	parts, ok := decodeToken(tok, redeliverTokenTag, 2)
	if !ok {
		return nil, 0, false
	}
	var since *time.Time
	if parts[0] != "" {
		micros, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil {
			return nil, 0, false
		}
		since = new(time.UnixMicro(micros))
	}
	id, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || id <= 0 {
		return nil, 0, false
	}
	return since, id, true
}
