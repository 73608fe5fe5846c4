package delivery

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	// Sunday 2026-03-01 12:00:00 UTC; the dates below are written relative to it.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const maxDelay = 24 * time.Hour

	tests := []struct {
		name   string
		values []string
		max    time.Duration // maxDelay when zero
		want   time.Duration
		ok     bool
	}{
		// Absent or ambiguous.
		{name: "Absent", values: nil},
		{name: "Empty", values: []string{""}},
		{name: "Whitespace", values: []string{" \t"}},
		{name: "RepeatedDifferent", values: []string{"120", "60"}},
		{name: "RepeatedOneEmpty", values: []string{"120", ""}},
		{name: "RepeatedSame", values: []string{"120", "120"}, want: 120 * time.Second, ok: true},
		{name: "CommaJoinedByProxy", values: []string{"120, 60"}},

		// delay-seconds = 1*DIGIT.
		{name: "Seconds", values: []string{"120"}, want: 120 * time.Second, ok: true},
		{name: "Zero", values: []string{"0"}, want: 0, ok: true},
		{name: "LeadingZeros", values: []string{"00120"}, want: 120 * time.Second, ok: true},
		{name: "SurroundingOWS", values: []string{" 120\t"}, want: 120 * time.Second, ok: true},
		{name: "ExactlyMax", values: []string{"86400"}, want: maxDelay, ok: true},
		{name: "OverMax", values: []string{"86401"}, want: maxDelay, ok: true},
		{name: "TenBillion", values: []string{"10000000000"}, want: maxDelay, ok: true},
		{name: "MaxInt64Seconds", values: []string{"9223372036854775807"}, want: maxDelay, ok: true},
		{name: "Huge", values: []string{"999999999999999999999999999999999999"}, want: maxDelay, ok: true},
		{name: "SubSecondMax", values: []string{"2"}, max: 1500 * time.Millisecond, want: 1500 * time.Millisecond, ok: true},
		{name: "ManyLeadingZeros", values: []string{"000000000000000000000000000007"}, want: 7 * time.Second, ok: true},

		// Malformed numbers: strconv would take several of these.
		{name: "PlusSign", values: []string{"+120"}},
		{name: "Negative", values: []string{"-1"}},
		{name: "Decimal", values: []string{"1.5"}},
		{name: "Exponent", values: []string{"1e3"}},
		{name: "HexFloat", values: []string{"0x1p4"}},
		{name: "NaN", values: []string{"NaN"}},
		{name: "Inf", values: []string{"Inf"}},
		{name: "Infinity", values: []string{"infinity"}},
		{name: "Unit", values: []string{"120s"}},
		{name: "InnerSpace", values: []string{"1 20"}},
		{name: "HugeThenGarbage", values: []string{"99999999999999999999x"}},
		{name: "NonASCIIDigit", values: []string{"١٢٠"}},

		// HTTP-date, all three forms RFC 9110 §5.6.7 requires recipients to accept.
		{name: "IMFFixdate", values: []string{"Sun, 01 Mar 2026 12:02:00 GMT"}, want: 2 * time.Minute, ok: true},
		{name: "RFC850", values: []string{"Sunday, 01-Mar-26 12:02:00 GMT"}, want: 2 * time.Minute, ok: true},
		{name: "ASCTime", values: []string{"Sun Mar  1 12:02:00 2026"}, want: 2 * time.Minute, ok: true},
		{name: "DateNow", values: []string{"Sun, 01 Mar 2026 12:00:00 GMT"}, want: 0, ok: true},
		{name: "DatePast", values: []string{"Fri, 31 Dec 1999 23:59:59 GMT"}, want: 0, ok: true},
		{name: "DateFarFuture", values: []string{"Fri, 31 Dec 9999 23:59:59 GMT"}, want: maxDelay, ok: true},
		// Go reads two-digit years 69..99 as 19xx and 00..68 as 20xx (RFC 9110 would
		// say 2069 for "69"); either way the result stays inside [0, max].
		{name: "RFC850Year69IsPast", values: []string{"Tuesday, 01-Jan-69 00:00:00 GMT"}, want: 0, ok: true},
		{name: "RFC850Year68IsCapped", values: []string{"Sunday, 01-Jan-68 00:00:00 GMT"}, want: maxDelay, ok: true},

		// Malformed dates.
		{name: "LowerCase", values: []string{"sun, 01 mar 2026 12:02:00 gmt"}},
		{name: "UTCZone", values: []string{"Sun, 01 Mar 2026 12:02:00 UTC"}},
		{name: "NumericZone", values: []string{"Sun, 01 Mar 2026 12:02:00 +0000"}},
		{name: "PSTZone", values: []string{"Sun, 01 Mar 2026 12:02:00 PST"}},
		// Go's rfc850 layout would accept these and read PST as +0000.
		{name: "RFC850UTCZone", values: []string{"Sunday, 01-Mar-26 12:02:00 UTC"}},
		{name: "RFC850PSTZone", values: []string{"Sunday, 01-Mar-26 12:02:00 PST"}},
		{name: "ASCTimeWithZone", values: []string{"Sun Mar  1 12:02:00 2026 GMT"}},
		{name: "DayMonthYear", values: []string{"01-Mar-2026"}},
		{name: "ISO8601", values: []string{"2026-03-01T12:02:00Z"}},
		{name: "Garbage", values: []string{"soon"}},

		// A non-positive cap means nothing can be honoured, not "no cap".
		{name: "NonPositiveMax", values: []string{"120"}, max: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			limit := tt.max
			if limit == 0 {
				limit = maxDelay
			}
			got, ok := ParseRetryAfter(tt.values, now, limit)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}

	t.Run("DateIsRelativeToNowWithFraction", func(t *testing.T) {
		t.Parallel()

		got, ok := ParseRetryAfter([]string{"Sun, 01 Mar 2026 12:02:00 GMT"}, now.Add(250*time.Millisecond), maxDelay)
		require.True(t, ok)
		require.Equal(t, 2*time.Minute-250*time.Millisecond, got)
	})

	t.Run("MaxDurationCap", func(t *testing.T) {
		t.Parallel()

		got, ok := ParseRetryAfter([]string{"9223372036854775807"}, now, math.MaxInt64)
		require.True(t, ok)
		require.Equal(t, time.Duration(math.MaxInt64), got)

		got, ok = ParseRetryAfter([]string{"9223372036"}, now, math.MaxInt64)
		require.True(t, ok)
		require.Equal(t, 9223372036*time.Second, got)
	})
}

// FuzzParseRetryAfter checks that whatever a receiver sends, the delay stays within
// [0, max] and a rejected header yields 0.
func FuzzParseRetryAfter(f *testing.F) {
	seeds := []string{
		"120", "0", "00120", "+120", "-1", "1.5", "1e3", "0x1p4", "NaN", "9223372036854775807",
		"99999999999999999999999", "Fri, 31 Dec 1999 23:59:59 GMT", "Friday, 31-Dec-99 23:59:59 GMT",
		"Fri Dec 31 23:59:59 1999", "Friday, 31-Dec-99 23:59:59 PST", "Fri, 31 Dec 9999 23:59:59 GMT", "",
	}
	for _, s := range seeds {
		f.Add(s, s, int64(1_772_366_400), int64(24*time.Hour))
	}
	f.Add("120", "60", int64(0), int64(time.Second))
	f.Add("Sun, 01 Mar 2026 12:02:00 GMT", "Sun, 01 Mar 2026 12:02:00 GMT", int64(math.MinInt64), int64(math.MaxInt64))
	f.Add("Sun, 01 Mar 2026 12:02:00 GMT", "", int64(math.MaxInt64), int64(1))

	f.Fuzz(func(t *testing.T, v1, v2 string, nowUnix, maxNanos int64) {
		t.Parallel()

		limit := time.Duration(maxNanos)
		now := time.Unix(nowUnix, 0)
		for _, values := range [][]string{{v1}, {v1, v2}} {
			got, ok := ParseRetryAfter(values, now, limit)
			if !ok {
				require.Zero(t, got)
				continue
			}
			require.Positive(t, limit, "a delay with a non-positive cap")
			require.GreaterOrEqual(t, got, time.Duration(0))
			require.LessOrEqual(t, got, limit)
		}
	})
}
