package portal

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
)

func TestNiceMax(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]int64{0: 2, 1: 2, 2: 2, 3: 5, 7: 10, 11: 20, 230: 500, 1000: 1000} {
		require.Equal(t, want, niceMax(in), "niceMax(%d)", in)
	}
}

func TestDrawChart(t *testing.T) {
	t.Parallel()
	hours := make([]attempt.Hour, 24)
	hours[23].Attempts, hours[23].Successes = 10, 6
	c := drawChart(hours)
	require.Len(t, c.Bars, 24)
	require.EqualValues(t, 6, c.Ok)
	require.EqualValues(t, 4, c.Failed)
	last := c.Bars[23]
	// The failed part sits on the delivered part, and together they reach
	// the top of the plot (10 of a top of 10).
	require.InDelta(t, last.OkY, last.FailY+last.FailH, 1e-9)
	require.InDelta(t, chartTop, last.FailY, 1e-9)
	require.Zero(t, c.Bars[0].OkH)
}

// TestEndpointHourly reads the hour buckets through the endpoint service,
// for the endpoint's owner only.
func TestEndpointHourly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := b.svc.Create(t.Context(), endpoint.CreateParams{OwnerID: "o", URL: "https://example.com/h", EventTypes: []string{"*"}})
	require.NoError(t, err)
	id := c.Endpoint.ID
	cols := []string{"endpoint_id", "span", "bucket", "attempts", "successes", "http_4xx", "http_5xx", "http_other", "timeouts", "connection", "blocked", "retry_after"}
	vals := []string{"$1", "3600", "date_trunc('hour', now()) - interval '2 hours'", "5", "3", "0", "2", "0", "0", "0", "0", "0"}
	for i := range attempt.LatencyBuckets {
		cols = append(cols, "lat_"+strconv.Itoa(i))
		vals = append(vals, "0")
	}
	_, err = b.db.Pool.Exec(t.Context(), `INSERT INTO endpoint_stats (`+strings.Join(cols, ", ")+`) VALUES (`+strings.Join(vals, ", ")+`)`, id)
	require.NoError(t, err)

	hours, err := b.svc.EndpointHourly(t.Context(), "o", id.String(), 24)
	require.NoError(t, err)
	require.Len(t, hours, 24)
	// Two hours back by the database's clock: the 22nd entry, or the 21st
	// if an hour began between the insert and the read.
	h := hours[21]
	if h.Attempts == 0 {
		h = hours[20]
	}
	require.EqualValues(t, 5, h.Attempts)
	require.EqualValues(t, 2, h.Failures())
	require.Equal(t, 0, h.Start.Minute())
	require.WithinDuration(t, time.Now(), hours[23].Start, time.Hour+time.Minute)

	_, err = b.svc.EndpointHourly(t.Context(), "someone-else", id.String(), 24)
	require.ErrorIs(t, err, endpoint.ErrNotFound)
	_, err = b.svc.EndpointHourly(t.Context(), "o", id.String(), 24*8)
	require.ErrorIs(t, err, endpoint.ErrInvalid)
}
