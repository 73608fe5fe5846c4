package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// s9BigOwner holds a tenth of S9's events: the owner whose pages must stay
// fast however many events it has.
const s9BigOwner = "bench-s9-big"

// s9Calls is how many times each S9 query is timed (after s9Warmup calls).
const (
	s9Calls  = 30
	s9Warmup = 3
)

// eventSearch is S9: the admin reads of events, ListEvents and GetEvent, on
// a table of 10 million stored events (a tenth of them one owner's) and half
// a million delivery jobs, timed through the gRPC API. The rows are written
// straight into the schema with generate_series (publishing 10 million events
// would measure ingest, not search) and analyzed, as a table of that size
// would be. Each query is timed s9Calls times; the figures are per query kind,
// and the point is that they do not grow with the table: each is an index
// range scan of one page.
func (b *bench) eventSearch(ctx context.Context) (res result) {
	events := b.scaled(10_000_000, 20_000)
	res = result{Scenario: "S9", Unit: "query", Events: events,
		Title: fmt.Sprintf("event search: ListEvents and GetEvent over %d stored events", events)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S9")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env

	loaded := time.Now()
	if err := s.loadEvents(ctx, events); err != nil {
		return failed(res, err)
	}
	var size int64
	if err := s.b.admin.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, s.table("events")).Scan(&size); err != nil {
		return failed(res, fmt.Errorf("size of events: %w", err))
	}
	res.notef("loaded %d events (%d of owner %s) and %d delivery jobs in %s; events with its indexes: %d MB",
		events, events/10, s9BigOwner, events/20, time.Since(loaded).Round(time.Second), size>>20)

	p := s.procs[0]
	admin := s.creds.adminCtx(ctx)
	list := func(req *webhooksv1.ListEventsRequest) func() (int, error) {
		return func() (int, error) {
			resp, err := p.endpoints().ListEvents(admin, req)
			return len(resp.GetEvents()), err
		}
	}
	now := time.Now()
	// Deep pages: the token of the 20th page of the big owner, so the
	// timed call is a page far from the newest.
	deep := &webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50}
	for range 20 {
		resp, err := p.endpoints().ListEvents(admin, deep)
		if err != nil {
			return failed(res, fmt.Errorf("page through ListEvents: %w", err))
		}
		deep = &webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50, PageToken: resp.GetNextPageToken()}
	}
	// An event of the big owner with a delivery job (g divisible by 20).
	withDelivery := "s9-" + strconv.Itoa(20*max(1, events/40))
	queries := []struct {
		name string
		call func() (int, error)
	}{
		{"ListEvents, newest page (50)", list(&webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50})},
		{"ListEvents, the 21st page (page token)", list(deep)},
		{"ListEvents, exact type, 1 in 100 of the owner's events", list(&webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50, EventType: "ip_ban.added"})},
		{"ListEvents, glob booking.* (half)", list(&webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50, EventType: "booking.*"})},
		{"ListEvents, subject prefix, 1 in 100", list(&webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50, SubjectPrefix: "wiki://space/42/"})},
		{"ListEvents, a one-day range 10 days back", list(&webhooksv1.ListEventsRequest{OwnerId: s9BigOwner, PageSize: 50,
			OccurredAfter: timestamppb.New(now.Add(-10 * 24 * time.Hour)), OccurredBefore: timestamppb.New(now.Add(-9 * 24 * time.Hour))})},
		{"ListEvents, a small owner's newest page", list(&webhooksv1.ListEventsRequest{OwnerId: "bench-s9-7", PageSize: 50})},
		{"GetEvent with its deliveries", func() (int, error) {
			resp, err := p.endpoints().GetEvent(admin, &webhooksv1.GetEventRequest{OwnerId: s9BigOwner, EventId: withDelivery})
			return len(resp.GetDeliveries()), err
		}},
	}
	var (
		calls int
		spent time.Duration
	)
	for _, q := range queries {
		var took []time.Duration
		rows := 0
		for i := range s9Warmup + s9Calls {
			if err := ctx.Err(); err != nil {
				return failed(res, err)
			}
			t0 := time.Now()
			n, err := q.call()
			d := time.Since(t0)
			if err != nil {
				return failed(res, fmt.Errorf("%s: %w", q.name, err))
			}
			if i >= s9Warmup {
				took = append(took, d)
				rows = n
			}
		}
		slices.Sort(took)
		for _, d := range took {
			spent += d
		}
		calls += len(took)
		res.notef("%s: %d rows, p50 %s, p95 %s, max %s", q.name, rows,
			ms(took[len(took)/2]), ms(took[len(took)*95/100]), ms(took[len(took)-1]))
	}
	res.Rows = int64(calls)
	res.Seconds = round(spent.Seconds(), 3)
	if spent > 0 {
		res.Rate = round(float64(calls)/spent.Seconds(), 1)
	}
	return res
}

// loadEvents writes n events and a delivery job for every 20th straight into
// the session's schema, a million rows per statement, then analyzes both
// tables. A tenth of the events are s9BigOwner's, the rest spread over 997
// owners; four types share almost all of them and one (ip_ban.added) is one
// in a thousand (1 in 100 of the big owner's); subjects spread over 100 spaces; occurred_at one event per
// 0.2 s back from now (23 days at 10 million, inside the default retention).
func (s *session) loadEvents(ctx context.Context, n int) error {
	const chunk = 1_000_000
	for lo := 1; lo <= n; lo += chunk {
		hi := min(n, lo+chunk-1)
		if _, err := s.b.admin.Exec(ctx, `
INSERT INTO `+s.table("events")+` (id, owner_id, type, subject, occurred_at, data, source)
SELECT 's9-' || g,
       CASE WHEN g % 10 = 0 THEN '`+s9BigOwner+`' ELSE 'bench-s9-' || (g % 997) END,
       CASE WHEN g % 1000 = 0 THEN 'ip_ban.added'
            ELSE (ARRAY['corpus.note.changed', 'booking.created', 'booking.cancelled', 'code.issued'])[1 + (g / 10) % 4] END,
       'wiki://space/' || (g / 10) % 100 || '/page/' || g,
       now() - g * interval '200 milliseconds', '{}', 'test'
  FROM generate_series($1::bigint, $2::bigint) g`, lo, hi); err != nil {
			return fmt.Errorf("load events %d–%d: %w", lo, hi, err)
		}
		if _, err := s.b.admin.Exec(ctx, `
INSERT INTO `+s.table("river_job")+` (kind, args, max_attempts, state, finalized_at)
SELECT 'webhook.deliver', jsonb_build_object('endpoint_id', gen_random_uuid()::text, 'event_id', 's9-' || g), 18, 'completed', now()
  FROM generate_series($1::bigint, $2::bigint) g WHERE g % 20 = 0`, lo, hi); err != nil {
			return fmt.Errorf("load delivery jobs %d–%d: %w", lo, hi, err)
		}
	}
	if _, err := s.b.admin.Exec(ctx, `ANALYZE `+s.table("events")+`; ANALYZE `+s.table("river_job")); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + " ms"
}
