package delivery

import (
	"net/http"
	"strings"
	"time"
)

// ParseRetryAfter interprets a response's Retry-After header values (RFC 9110
// §10.2.3) as a delay from now, clamped to [0, maxDelay]. It reports false when
// there is nothing usable, in which case the caller falls back to its normal backoff.
//
// Rules (docs/spec.md#retry-after):
//   - absent, empty, or repeated with different values: false (ambiguous);
//   - all ASCII digits: that many seconds (leading zeros allowed);
//   - otherwise an HTTP-date (IMF-fixdate, rfc850 or asctime); a date in the past is 0;
//   - anything else, e.g. "+120", "-1", "1.5", "1e3" or a date in a zone other than
//     GMT: false, never 0, so a malformed header cannot force an immediate retry;
//   - maxDelay <= 0: false, as no delay could be honoured.
//
// The cap exists because the value is chosen by the receiver: without it an endpoint
// could park a delivery for years.
func ParseRetryAfter(values []string, now time.Time, maxDelay time.Duration) (time.Duration, bool) {
	if len(values) == 0 || maxDelay <= 0 {
		return 0, false
	}
	v := trimOWS(values[0])
	for _, other := range values[1:] {
		if trimOWS(other) != v {
			return 0, false
		}
	}
	if v == "" {
		return 0, false
	}

	if secs, ok := parseDelaySeconds(v, maxDelay); ok {
		return secs, true
	}

	at, ok := parseHTTPDate(v)
	if !ok {
		return 0, false
	}
	// Sub saturates instead of overflowing, so far-off dates just hit the cap.
	return min(max(at.Sub(now), 0), maxDelay), true
}

// parseDelaySeconds parses delay-seconds = 1*DIGIT, capped at limit.
//
// strconv would accept a sign, and Duration(n)*time.Second silently wraps for large n
// (9223372036854775807 s becomes -1 s), so digits are accumulated by hand and the cap
// is applied before anything is multiplied.
func parseDelaySeconds(v string, limit time.Duration) (time.Duration, bool) {
	limitSecs := int64(limit / time.Second)
	var n int64
	capped := false
	for i := range len(v) {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		// Keep scanning after the cap: "99999x" must still be rejected as malformed.
		if !capped {
			n = n*10 + int64(c-'0') // n <= limitSecs < MaxInt64/10 here, so no overflow
			capped = n > limitSecs
		}
	}
	if capped {
		return limit, true
	}
	return time.Duration(n) * time.Second, true
}

// parseHTTPDate parses the three HTTP-date forms of RFC 9110 §5.6.7.
//
// http.ParseTime alone is too lenient: its rfc850 layout takes any zone abbreviation
// and reads an unknown one such as "PST" as +0000, silently shifting the time. The
// grammar allows only "GMT" there (asctime has no zone at all), so require it.
func parseHTTPDate(v string) (time.Time, bool) {
	if strings.HasSuffix(v, " GMT") {
		t, err := http.ParseTime(v)
		return t, err == nil
	}
	t, err := time.Parse(time.ANSIC, v)
	return t, err == nil
}

// trimOWS strips the optional whitespace (SP / HTAB) around a field value. net/http
// already does this for received headers; callers building values by hand may not.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}
