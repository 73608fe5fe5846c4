package portal

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// BenchmarkListPages is each list page's server time (the handler, its
// service calls and Postgres; no browser, no network) for one owner with
// 100,000 deliveries over 50 endpoints (most delivered, some failed, some
// waiting) and their 100,000 events, as the portal serves them. It reports
// the p95 of the iterations as p95-ms, against the 150 ms target:
//
//	go test -run '^$' -bench BenchmarkListPages -benchtime 50x ./internal/portal/
func BenchmarkListPages(b *testing.B) {
	bundle := setup(b)
	ctx := b.Context()
	const owner, deliveries, endpoints = "owner-bench", 100_000, 50
	ids := make([]string, endpoints)
	for i := range ids {
		c, err := bundle.svc.Create(ctx, endpoint.CreateParams{OwnerID: owner, URL: "https://receiver.example.com/" + strconv.Itoa(i), EventTypes: []string{"*"}})
		require.NoError(b, err)
		ids[i] = c.Endpoint.ID.String()
	}
	_, err := bundle.db.Pool.Exec(ctx, `
INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source)
SELECT 'ev-' || g, $1, (ARRAY['booking.created', 'booking.cancelled', 'code.issued', 'code.revoked'])[1 + g % 4],
       'app://thing/' || g, now() - g * interval '3 seconds', '{}', 'test'
  FROM generate_series(1, $2::int) g`, owner, deliveries)
	require.NoError(b, err)
	jobs := make([]river.InsertManyParams, 0, deliveries)
	for g := 1; g <= deliveries; g++ {
		jobs = append(jobs, river.InsertManyParams{Args: job.DeliverArgs{EndpointID: ids[g%endpoints], EventID: "ev-" + strconv.Itoa(g)}})
	}
	_, err = bundle.db.InsertOnlyClient(b).InsertManyFast(ctx, jobs)
	require.NoError(b, err)
	// 90 % delivered, 5 % failed, the rest waiting; spread over a week.
	_, err = bundle.db.Pool.Exec(ctx, `
UPDATE river_job SET created_at = now() - (id % 604800) * interval '1 second',
       state = CASE WHEN id % 20 = 0 THEN 'discarded'::river_job_state WHEN id % 20 = 1 THEN 'available'::river_job_state ELSE 'completed'::river_job_state END,
       finalized_at = CASE WHEN id % 20 = 1 THEN NULL ELSE now() END,
       attempt = 1
 WHERE kind = $1`, job.KindDeliver)
	require.NoError(b, err)
	_, err = bundle.db.Pool.Exec(ctx, `ANALYZE events; ANALYZE river_job`)
	require.NoError(b, err)
	var someJob int64
	require.NoError(b, bundle.db.Pool.QueryRow(ctx, `SELECT max(id) FROM river_job WHERE kind = $1`, job.KindDeliver).Scan(&someJob))
	cookie := bundle.open(b, owner, AccessManage)

	for _, page := range []struct{ name, path string }{
		{"Endpoints", "/portal/"},
		{"EndpointDeliveries", "/portal/endpoints/" + ids[0]},
		{"EndpointDeliveries7d", "/portal/endpoints/" + ids[0] + "?window=7d"},
		{"DeliveriesFailed", "/portal/endpoints/" + ids[0] + "?state=failed"},
		{"DeliveriesByType", "/portal/endpoints/" + ids[0] + "?type=booking.*"},
		{"DeliveriesTimeRange", "/portal/endpoints/" + ids[0] + "?after=" + time.Now().Add(-72*time.Hour).UTC().Format("2006-01-02T15:04") + "&before=" + time.Now().Add(-48*time.Hour).UTC().Format("2006-01-02T15:04")},
		{"Delivery", "/portal/deliveries/" + strconv.FormatInt(someJob, 10)},
		{"Events", "/portal/events"},
		{"EventsByType", "/portal/events?type=code.issued"},
		{"Catalog", "/portal/catalog"},
	} {
		b.Run(page.name, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				start := time.Now()
				rec := bundle.get(b, cookie, page.path)
				times = append(times, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", page.path, rec.Code, rec.Body.String())
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[(len(times)*95+99)/100-1].Microseconds())/1000, "p95-ms")
		})
	}
}
