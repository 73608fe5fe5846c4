package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/pglisten"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

// The endpoint lease lives on the endpoint row: busy_until (when it expires
// if its holder dies) and lease_token (who holds it). It is taken by a
// conditional UPDATE, never by an advisory or row lock held across a POST.
//
// A process holds an endpoint's lease for as long as it has deliveries to
// that endpoint (see lanes.go), so most attempts only read. Every database
// step of an attempt goes through one of two batchers, so the deliveries of
// all endpoints in flight at one moment share one statement:
//
//   - load: take, extend or just confirm each lease, and read what each
//     attempt needs (the endpoint row and the event row);
//   - settle: record health changes and release leases.

// lease gives the delivery the endpoint's lease and its target (acquire).
// When it cannot, the delivery's turn ends and it snoozes (held elsewhere:
// lease_busy), is cancelled (the endpoint is gone or disabled) or fails (a
// database error: River retries).
func (w *Worker) lease(ctx context.Context, d *delivery) error {
	ra := d.ahead
	d.ahead = nil
	t, token, err := w.acquire(ctx, d.ep, d.j.Args.EventID, d.waitUntil, ra)
	if err == nil {
		d.t, d.token = t, token
		return nil
	}
	// No health change to record, so nothing can fail that matters: a
	// lease that cannot be released expires by itself.
	_ = w.endTurn(ctx, d.ep, settleReq{endpointID: d.ep, token: token})
	var busy *busyError
	switch {
	case errors.As(err, &busy):
		// Until the holder's lease would expire if it died, but not for
		// long if it is alive: it may hand over any moment.
		return w.snoozeBusy(ctx, min(max(busy.heldFor, w.cfg.BusySnooze), w.cfg.LeaseTTL/3))
	case errors.Is(err, errEndpointGone), errors.Is(err, errEndpointDisabled):
		return w.cancel(d.j, "", err)
	default:
		// A database error: River retries.
		return err
	}
}

// busyError: another process holds the endpoint's lease.
type busyError struct{ heldFor time.Duration }

func (e *busyError) Error() string { return errLeaseBusy.Error() }
func (e *busyError) Unwrap() error { return errLeaseBusy }

// acquire makes sure this process holds the endpoint's lease for long enough
// and reads the attempt's target, in one batched statement. When another
// process holds the lease it waits, until waitUntil, for that process to
// release it (the release is announced) or for it to expire. It returns the
// token of the lease held (or possibly held, after a database error) so the
// caller can release it. A target read ahead (a direct run's, or ra, read
// while the delivery queued) is used instead of a read when it may be
// (prepared, fromAhead); a load that only confirms the lease reads ahead for
// the deliveries queued behind this one (ahead.go).
func (w *Worker) acquire(ctx context.Context, ep uuid.UUID, eventID string, waitUntil time.Time, ra *readAhead) (*target, uuid.UUID, error) {
	if t, token := w.prepared(ctx, ep); t != nil {
		return t, token, nil
	}
	if t, token := w.fromAhead(ep, ra); t != nil {
		return t, token, nil
	}
	var poll time.Duration
	for {
		cur := w.lanes.current(ep)
		req := loadReq{endpointID: ep, eventID: eventID, mode: leaseConfirm, token: cur.token}
		var ahead []*waiter
		switch {
		case cur.token == uuid.Nil || cur.expires.IsZero():
			req.mode, req.token = leaseTake, w.lanes.takeToken(ep)
		case time.Until(cur.expires) < w.cfg.AttemptTimeout+renewMargin:
			req.mode = leaseExtend
		default:
			ahead = w.lanes.aheadFor(ep)
			for _, q := range ahead {
				req.ahead = append(req.ahead, q.eventID)
			}
		}
		sent := time.Now()
		res, err := w.loads.Do(ctx, req)
		if err == nil && res.status == loadHeld {
			w.lanes.aheadDone(ahead, res.ahead, req.token, sent)
		} else {
			w.lanes.aheadDone(ahead, nil, req.token, sent)
		}
		if err != nil {
			// The statement may have taken the lease even so.
			w.lanes.hold(ep, lease{token: req.token, expires: time.Now().Add(w.cfg.LeaseTTL)}, 1)
			return nil, req.token, err
		}
		switch res.status {
		case loadHeld:
			w.lanes.hold(ep, lease{token: req.token, expires: res.expires}, res.target.control.maxInFlight)
			res.target.loaded, res.target.leaseTaken = true, req.mode == leaseTake
			return res.target, req.token, nil
		case loadGone:
			w.lanes.drop(ep, req.token)
			return nil, uuid.Nil, errEndpointGone
		case loadDisabled:
			return nil, req.token, errEndpointDisabled
		}
		left := time.Until(waitUntil)
		if res.ours {
			// Still ours: the row was locked by another statement at that
			// moment (a settle, another batch). Forgetting the lease here
			// would leave it held in the database, by nobody, until it
			// expires, with every delivery to the endpoint waiting for it.
			// Try again in a moment.
			if left <= 0 {
				return nil, req.token, &busyError{heldFor: res.heldFor}
			}
			timer := time.NewTimer(min(10*time.Millisecond, left))
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return nil, req.token, ctx.Err()
			}
			continue
		}
		// Busy: our lease lapsed and moved on, or the take found another
		// holder. Either way the lane holds no lease now.
		w.lanes.drop(ep, req.token)
		if req.mode != leaseTake {
			// Take it like anyone else.
			continue
		}
		if left <= 0 {
			return nil, uuid.Nil, &busyError{heldFor: res.heldFor}
		}
		// Wait for the holder's release (announced), its lease's expiry, or
		// the next poll, whichever comes first. Polls back off: with the
		// announcement working they are only a safety net.
		poll = min(max(2*poll, 20*time.Millisecond), time.Second)
		wait := min(poll, left)
		if res.heldFor > 0 {
			wait = min(wait, res.heldFor+10*time.Millisecond)
		}
		timer := time.NewTimer(wait)
		select {
		case <-w.lanes.remoteWake(ep):
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, uuid.Nil, ctx.Err()
		}
		timer.Stop()
	}
}

// endTurn records the attempt's effect on the endpoint's health (s.health)
// and ends this delivery's turn on the endpoint: the next local delivery
// takes over with the lease, or the lease lingers or is released (in the
// same statement as the health change when both are due). Only a failure to
// record a health change is returned; a lease that cannot be released
// expires by itself.
func (w *Worker) endTurn(ctx context.Context, ep uuid.UUID, s settleReq) error {
	// Settle even if the job's context just ended: the attempt happened.
	ctx = context.WithoutCancel(ctx)
	if tok := w.lanes.yield(ep); tok != uuid.Nil {
		s.token, s.release = tok, true
	}
	var err error
	if s.health != healthNone || s.release || s.clearPause {
		err = w.settle(ctx, s)
		if err != nil && s.release {
			// Retried as a plain release so the endpoint is not blocked
			// until the lease expires.
			w.release(ctx, map[uuid.UUID]uuid.UUID{ep: s.token})
		}
	}
	if tok := w.lanes.leave(ep); tok != uuid.Nil {
		w.release(ctx, map[uuid.UUID]uuid.UUID{ep: tok})
	}
	if s.health == healthNone || s.health == healthStillFailing {
		// Nothing of the endpoint's state machine is lost: a probe pushed
		// less far goes a little early, and that is all.
		return nil
	}
	return err
}

// settle runs one settlement through the batcher.
func (w *Worker) settle(ctx context.Context, s settleReq) error {
	res, err := w.settles.Do(ctx, s)
	if err != nil {
		return err
	}
	if res.recovered {
		select {
		case w.recovered <- struct{}{}:
		default: // a look is due anyway
		}
	}
	if res.disabledNow {
		w.metrics.EndpointsDisabledTotal.Inc()
		w.logger.WarnContext(ctx, "endpoint disabled after continuous failure",
			slog.String("endpoint_id", s.endpointID.String()), slog.Duration("after", w.cfg.DisableAfter))
	}
	return nil
}

// releaseRetryFor bounds how long release keeps trying once ctx is done
// (the process is stopping); releaseBackoffMax bounds the wait between two
// tries.
const (
	releaseRetryFor   = 10 * time.Second
	releaseBackoffMax = time.Second
)

// release gives leases up (endpoint → token) without touching health. A
// release that fails leaves the endpoint blocked until the lease expires
// (LeaseTTL): every process, this one included (its lane forgot the token),
// finds the lease held and waits for it. So it is tried again, at most a
// second apart, until the lease would have expired anyway: a database that
// is away for a few seconds (a restart, a failover) then costs the endpoint
// about a second after its return, not what is left of the TTL. Once ctx is
// done (the process stops) it tries for releaseRetryFor at most. Failures
// are logged, not returned: the lease expires by itself.
func (w *Worker) release(ctx context.Context, leases map[uuid.UUID]uuid.UUID) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(w.cfg.LeaseTTL, releaseRetryFor))
	defer cancel()
	var wg sync.WaitGroup
	for ep, tok := range leases {
		wg.Go(func() {
			var err error
			for failures := 1; ; failures++ {
				if err = w.settle(rctx, settleReq{endpointID: ep, token: tok, release: true}); err == nil {
					return
				}
				timer := time.NewTimer(min(pglisten.Backoff(failures), releaseBackoffMax))
				select {
				case <-rctx.Done():
					timer.Stop()
					w.logger.WarnContext(rctx, "release lease", slog.String("endpoint_id", ep.String()), slog.Any("error", err))
					return
				case <-timer.C:
				}
				if ctx.Err() != nil && time.Since(start) > releaseRetryFor {
					w.logger.WarnContext(rctx, "release lease: stopping", slog.String("endpoint_id", ep.String()), slog.Any("error", err))
					return
				}
			}
		})
	}
	wg.Wait()
}

// leaseMode is what a load does with the lease.
type leaseMode int32

const (
	// leaseConfirm: this process holds the lease; check it still does.
	leaseConfirm leaseMode = iota
	// leaseExtend: this process holds the lease; push busy_until out.
	leaseExtend
	// leaseTake: take the lease if nobody holds it (or the holder's expired).
	leaseTake
)

// loadReq asks for one attempt's target.
type loadReq struct {
	endpointID uuid.UUID
	eventID    string
	mode       leaseMode
	token      uuid.UUID
	// ahead are the events of deliveries queued behind this one whose
	// targets are read along (mode leaseConfirm only; ahead.go).
	ahead []string
}

// loadStatus says how a load ended for the lease.
type loadStatus int

const (
	loadHeld     loadStatus = iota // the lease is ours; target is filled in
	loadBusy                       // another holder; heldUntil says until when
	loadGone                       // the endpoint was deleted
	loadDisabled                   // the endpoint is disabled
)

// loadRes is one load's answer.
type loadRes struct {
	status loadStatus
	// heldUntil is the other holder's busy_until (loadBusy), as a duration
	// from the statement's time, so clocks need not agree.
	heldFor time.Duration
	// ours (loadBusy): the lease is still this token's, unexpired. The take
	// or extend was skipped because another statement had the row locked
	// at that moment; nobody else holds the lease.
	ours bool
	// expires is a conservative local deadline of our lease (loadHeld after
	// a take or an extend): the statement was sent before Postgres computed
	// busy_until, so the real expiry is later.
	expires time.Time
	target  *target
	// ahead are the targets read for req.ahead, in order: nil for one whose
	// lease was not found held (or whose endpoint is gone or disabled).
	ahead []*target
}

// target is what one attempt needs.
type target struct {
	ownerID      string
	url          string
	failingSince *time.Time
	// probeAt is the endpoint's probe_at: while it is failing, the time its
	// next recovery probe is due, which names the probe slot (probe.go,
	// failing.go).
	probeAt *time.Time
	// keys are the endpoint's sealed signing keys, opened only to sign.
	keys seal.SigningKeys
	// headers is the endpoint's sealed custom headers (nil: none).
	headers []byte
	// control is what the receiver asked of its traffic (control.go).
	control control
	// loaded: read with the lease by this delivery's load (not ahead of
	// it, as a direct run's is); leaseTaken: that load took the lease (it
	// was not this process's).
	loaded, leaseTaken bool

	eventFound      bool
	eventOwnerID    string
	eventType       string
	eventSubject    string
	eventOccurredAt time.Time
	eventData       json.RawMessage
	eventCreatedAt  time.Time
}

// loadSQL takes or extends the requested leases and reads every target in
// one statement. Rows to lease are locked with SKIP LOCKED, so concurrent
// loads never deadlock and never wait: a row locked by someone else counts
// as busy for now. Every row is reached by an index lookup per request, as
// in confirmSQL. The final SELECT sees the rows as they were
// before the UPDATE (one snapshot), which is what it reports of another
// holder. Each failed take notifies the holder that the lease is wanted.
// A take with the token that already holds the lease renews it: the runners
// of one lane take the lease with one token (lanes.takeToken), and whichever
// comes second must not find it busy. Two takes of one endpoint with
// different tokens in one batch cannot both win: only the one whose token
// the row got reports it held.
const loadSQL = `
WITH req AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::uuid[]) WITH ORDINALITY
        AS r(endpoint_id, event_id, mode, token, n)
),
lockable AS (
    SELECT ep.id, ep.ctid AS tid
      FROM req r
      JOIN LATERAL (
            SELECT id, ctid FROM webhook_endpoints
             WHERE id = r.endpoint_id AND enabled
               AND CASE WHEN r.mode = 2 THEN busy_until IS NULL OR busy_until < now() OR lease_token = r.token
                        ELSE lease_token = r.token END
               FOR NO KEY UPDATE SKIP LOCKED) ep ON true
     WHERE r.mode <> 0
),
leased AS (
    UPDATE webhook_endpoints ep
       SET busy_until = now() + make_interval(secs => $5), lease_token = r.token
      FROM req r, lockable l
     WHERE ep.ctid = l.tid AND r.endpoint_id = l.id
 RETURNING ep.id, ep.lease_token
),
wanted AS (
    SELECT pg_notify($6, 'w:' || r.endpoint_id::text)
      FROM req r JOIN webhook_endpoints ep ON ep.id = r.endpoint_id
     WHERE r.mode = 2 AND ep.enabled AND ep.busy_until >= now() AND ep.lease_token IS DISTINCT FROM r.token
       AND NOT EXISTS (SELECT FROM leased l WHERE l.id = r.endpoint_id)
)
SELECT r.n, ep.id IS NOT NULL, coalesce(ep.enabled, false),
       CASE WHEN r.mode = 0 THEN ep.lease_token IS NOT DISTINCT FROM r.token AND ep.busy_until > now()
            ELSE EXISTS (SELECT FROM leased l WHERE l.id = r.endpoint_id AND l.lease_token = r.token) END,
       extract(epoch FROM coalesce(ep.busy_until - now(), interval '0'))::float8,
       ep.owner_id, ep.url, ep.secret_enc, ep.previous_secret_enc, ep.previous_secret_expires_at, ep.failing_since, ep.probe_at, ep.headers_enc, ep.signing_scheme,
       extract(epoch FROM coalesce(ep.paused_until - now(), interval '0'))::float8, ep.max_per_second, coalesce(ep.ordered, false), ep.max_in_flight,
       e.id IS NOT NULL, e.owner_id, e.type, e.subject, e.occurred_at, e.data, e.created_at,
       (SELECT count(*) FROM wanted),
       ep.lease_token IS NOT DISTINCT FROM r.token AND ep.busy_until > now()
  FROM req r
  LEFT JOIN LATERAL (SELECT * FROM webhook_endpoints WHERE id = r.endpoint_id OFFSET 0) ep ON true
  LEFT JOIN LATERAL (SELECT * FROM events WHERE id = r.event_id OFFSET 0) e ON true
 ORDER BY r.n`

// confirmSQL is loadSQL for a batch that only confirms leases this process
// holds, by far the most common one: the same answer without the locking,
// the UPDATE and the notifications, which cost a third of a delivery's
// Postgres time when every batch paid for them.
//
// Its rows are read by one index lookup per request (a LATERAL subquery
// that OFFSET 0 keeps from being flattened into a join): pgx prepares every
// statement and Postgres caches a generic plan after five calls, and one
// planned on a new, nearly empty database would otherwise hash-join
// sequential scans of webhook_endpoints and events, and keep doing so as
// they grow. A plan test holds the shape (TestHotStatementsGenericPlans).
const confirmSQL = `
SELECT r.n, ep.id IS NOT NULL, coalesce(ep.enabled, false),
       ep.lease_token IS NOT DISTINCT FROM r.token AND ep.busy_until > now(),
       0::float8,
       ep.owner_id, ep.url, ep.secret_enc, ep.previous_secret_enc, ep.previous_secret_expires_at, ep.failing_since, ep.probe_at, ep.headers_enc, ep.signing_scheme,
       extract(epoch FROM coalesce(ep.paused_until - now(), interval '0'))::float8, ep.max_per_second, coalesce(ep.ordered, false), ep.max_in_flight,
       e.id IS NOT NULL, e.owner_id, e.type, e.subject, e.occurred_at, e.data, e.created_at,
       0::bigint,
       ep.lease_token IS NOT DISTINCT FROM r.token AND ep.busy_until > now()
  FROM unnest($1::uuid[], $2::text[], $3::int[], $4::uuid[]) WITH ORDINALITY AS r(endpoint_id, event_id, mode, token, n)
  LEFT JOIN LATERAL (SELECT * FROM webhook_endpoints WHERE id = r.endpoint_id OFFSET 0) ep ON true
  LEFT JOIN LATERAL (SELECT * FROM events WHERE id = r.event_id OFFSET 0) e ON true
 ORDER BY r.n`

// endpointSQL reads the endpoint part of targets, for deliveries whose
// events are in hand (direct.go), with no lease to take or confirm; by index
// lookups, as confirmSQL.
const endpointSQL = `
SELECT ep.id, ep.owner_id, ep.url, ep.secret_enc, ep.previous_secret_enc, ep.previous_secret_expires_at, ep.failing_since, ep.probe_at, ep.headers_enc, ep.signing_scheme,
       extract(epoch FROM coalesce(ep.paused_until - now(), interval '0'))::float8, ep.max_per_second, coalesce(ep.ordered, false), ep.max_in_flight
  FROM unnest($1::uuid[]) AS r(id)
  JOIN LATERAL (SELECT * FROM webhook_endpoints WHERE id = r.id OFFSET 0) ep ON ep.enabled`

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readEndpoints runs one batch of endpoint reads: each request is a list of
// endpoint ids, answered with their targets in order (nil for one that is
// gone or disabled), without event fields.
func readEndpoints(ctx context.Context, db querier, reqs [][]uuid.UUID) ([][]*target, error) {
	var ids []uuid.UUID
	for _, r := range reqs {
		ids = append(ids, r...)
	}
	rows, err := db.Query(ctx, endpointSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read delivery endpoints: %w", err)
	}
	byID, err := scanEndpointTargets(rows)
	if err != nil {
		return nil, err
	}
	return targetsOf(byID, reqs), nil
}

// scanEndpointTargets reads the rows of endpointSQL, by endpoint id, and
// closes them.
func scanEndpointTargets(rows pgx.Rows) (map[uuid.UUID]*target, error) {
	defer rows.Close()
	byID := make(map[uuid.UUID]*target)
	for rows.Next() {
		var (
			id                        uuid.UUID
			owner, url, scheme        string
			secret, prevSecret, hdrs  []byte
			prevExpires, failingSince *time.Time
			probeAt                   *time.Time
			pausedFor                 float64
			maxPerSecond, maxInFlight *int32
			ordered                   bool
		)
		if err := rows.Scan(&id, &owner, &url, &secret, &prevSecret, &prevExpires, &failingSince, &probeAt, &hdrs, &scheme,
			&pausedFor, &maxPerSecond, &ordered, &maxInFlight); err != nil {
			return nil, fmt.Errorf("read delivery endpoints: %w", err)
		}
		byID[id] = &target{
			ownerID: owner, url: url, failingSince: failingSince, probeAt: probeAt, headers: hdrs,
			keys:    seal.SigningKeys{Scheme: scheme, Current: secret, Previous: prevSecret, PreviousExpiresAt: prevExpires},
			control: newControl(pausedFor, maxPerSecond, maxInFlight, ordered),
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read delivery endpoints: %w", err)
	}
	return byID, nil
}

// targetsOf answers each request (a list of endpoint ids) with the targets
// of byID in order, a copy each (nil for an endpoint not in byID: gone or
// disabled).
func targetsOf(byID map[uuid.UUID]*target, reqs [][]uuid.UUID) [][]*target {
	out := make([][]*target, len(reqs))
	for i, r := range reqs {
		out[i] = make([]*target, len(r))
		for k, id := range r {
			if t := byID[id]; t != nil {
				c := *t // each delivery gets its own
				out[i][k] = &c
			}
		}
	}
	return out
}

// load runs one batch of loads. Each request's reads ahead (loadReq.ahead)
// are rows of their own after it: confirmations with its token.
func load(ctx context.Context, pool *pgxpool.Pool, ttl time.Duration, channel string, reqs []loadReq) ([]loadRes, error) {
	size := len(reqs)
	for _, r := range reqs {
		size += len(r.ahead)
	}
	// row is what each row of the statement answers: request req, its own
	// read (ahead < 0) or its ahead-th read ahead.
	type row struct{ req, ahead int }
	var (
		ids    = make([]uuid.UUID, 0, size)
		events = make([]string, 0, size)
		modes  = make([]int32, 0, size)
		tokens = make([]uuid.UUID, 0, size)
		of     = make([]row, 0, size)
	)
	for i, r := range reqs {
		ids, events, modes, tokens = append(ids, r.endpointID), append(events, r.eventID), append(modes, int32(r.mode)), append(tokens, r.token)
		of = append(of, row{i, -1})
		for k, ev := range r.ahead {
			ids, events, modes, tokens = append(ids, r.endpointID), append(events, ev), append(modes, int32(leaseConfirm)), append(tokens, r.token)
			of = append(of, row{i, k})
		}
	}
	sent := time.Now()
	var (
		rows pgx.Rows
		err  error
	)
	if confirmOnly(reqs) {
		rows, err = pool.Query(ctx, confirmSQL, ids, events, modes, tokens)
	} else {
		// Planned for its parameters on every call, never from a cached
		// generic plan: its UPDATE would be a sequential scan of
		// webhook_endpoints in a plan made while the table was small. Takes
		// and extends are rare (a lease serves many deliveries), so the
		// describe round trip and the planning cost little.
		rows, err = pool.Query(ctx, loadSQL, pgx.QueryExecModeDescribeExec, ids, events, modes, tokens, ttl.Seconds(), channel)
	}
	if err != nil {
		return nil, fmt.Errorf("load delivery targets: %w", err)
	}
	out := make([]loadRes, len(reqs))
	for i, r := range reqs {
		if len(r.ahead) > 0 {
			out[i].ahead = make([]*target, len(r.ahead))
		}
	}
	seen := 0
	for rows.Next() {
		seen++
		var (
			n                          int64
			found, enabled, held       bool
			heldFor                    float64
			owner, url                 *string
			secret, prevSecret         []byte
			headers                    []byte
			scheme                     *string
			prevExpires, failingSince  *time.Time
			probeAt                    *time.Time
			pausedFor                  float64
			maxPerSecond, maxInFlight  *int32
			ordered                    bool
			evFound                    bool
			evOwner, evType, evSubject *string
			evOccurred, evCreated      *time.Time
			evData                     []byte
			notified                   int64
			ours                       *bool
		)
		if err := rows.Scan(&n, &found, &enabled, &held, &heldFor, &owner, &url, &secret, &prevSecret, &prevExpires, &failingSince, &probeAt, &headers, &scheme,
			&pausedFor, &maxPerSecond, &ordered, &maxInFlight,
			&evFound, &evOwner, &evType, &evSubject, &evOccurred, &evData, &evCreated, &notified, &ours); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load delivery targets: %w", err)
		}
		var res loadRes
		switch {
		case !found:
			res.status = loadGone
		case !enabled:
			res.status = loadDisabled
		case !held:
			res.status = loadBusy
			res.heldFor = time.Duration(heldFor * float64(time.Second))
			res.ours = ours != nil && *ours
		default:
			res.status = loadHeld
			if modes[n-1] != int32(leaseConfirm) {
				res.expires = sent.Add(ttl)
			}
			t := &target{
				ownerID: *owner, url: *url, failingSince: failingSince, probeAt: probeAt, headers: headers,
				keys:       seal.SigningKeys{Scheme: *scheme, Current: secret, Previous: prevSecret, PreviousExpiresAt: prevExpires},
				control:    newControl(pausedFor, maxPerSecond, maxInFlight, ordered),
				eventFound: evFound, eventData: evData,
			}
			if evFound {
				t.eventOwnerID, t.eventType, t.eventSubject = *evOwner, *evType, *evSubject
				t.eventOccurredAt, t.eventCreatedAt = *evOccurred, *evCreated
			}
			res.target = t
		}
		switch at := of[n-1]; {
		case at.ahead < 0:
			res.ahead = out[at.req].ahead
			out[at.req] = res
		case res.status == loadHeld:
			out[at.req].ahead[at.ahead] = res.target
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load delivery targets: %w", err)
	}
	if seen != size {
		return nil, fmt.Errorf("load delivery targets: %d rows for %d reads", seen, size)
	}
	return out, nil
}

func confirmOnly(reqs []loadReq) bool {
	for _, r := range reqs {
		if r.mode != leaseConfirm {
			return false
		}
	}
	return true
}

// health is what an attempt means for its endpoint's health.
type health int32

const (
	healthNone    health = iota // no health change to record
	healthSuccess               // failing → enabled
	healthFailure               // enabled → failing, or failing → disabled
	// healthStillFailing: a failed request to an endpoint already failing.
	// No transition, but the receiver was just tried: the next recovery
	// probe waits a probe gap after it (probe.go).
	healthStillFailing
)

// settleReq records one endpoint's health change and/or releases its lease.
type settleReq struct {
	endpointID uuid.UUID
	token      uuid.UUID
	health     health
	release    bool
	// clearPause forgets the endpoint's pause (paused_until, pause_reason):
	// a failure that is not a pause came after it.
	clearPause bool
	// summary goes into disabled_reason if the endpoint is disabled now.
	summary string
	// ago is how long before the settlement the failed request began
	// (healthStillFailing): the next probe is spaced from that start.
	ago time.Duration
}

// settleRes reports what a settle changed.
type settleRes struct {
	// disabledNow: this settlement disabled the endpoint.
	disabledNow bool
	// recovered: this settlement ended the endpoint's failing state; its
	// held deliveries are due for release (probe.go).
	recovered bool
}

// settleSQL is the endpoint health state machine in one statement for many
// endpoints: success clears failing_since; a failure sets it (the first
// failure's time is kept) and disables the endpoint once it has failed
// continuously for the disable-after period. It applies only to leases the
// caller still holds (lease_token), locks rows in id order so concurrent
// settles cannot deadlock, and notifies every release so a process waiting
// for one of these leases takes it at once.
//
// With an operational owner ($8, ” for none) each transition of an endpoint
// of another owner also becomes an operational event (endpoint.failing,
// endpoint.disabled, endpoint.recovered) in operational_outbox, in this same
// statement: the transition and its announcement commit together, without a
// statement or a commit of their own. Its id is derived from the endpoint,
// the transition and failing_since, so one transition is one event. Inserted
// rows wake the operational relay ($9).
var settleSQL = `
WITH s AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bool[], $5::text[], $10::bool[], $13::float8[])
        AS s(id, token, health, release, summary, clear_pause, ago)
),
old AS (
    SELECT ep.id, s.token, ep.enabled, ep.failing_since
      FROM webhook_endpoints ep JOIN s ON s.id = ep.id AND ep.lease_token = s.token
     ORDER BY ep.id
       FOR NO KEY UPDATE OF ep
),
upd AS (
    UPDATE webhook_endpoints ep
       SET failing_since   = CASE s.health WHEN 1 THEN NULL WHEN 2 THEN coalesce(old.failing_since, now()) ELSE ep.failing_since END,
           enabled         = CASE WHEN s.health = 2 AND old.failing_since < now() - make_interval(secs => $6) THEN false ELSE ep.enabled END,
           disabled_reason = CASE WHEN s.health = 2 AND old.failing_since < now() - make_interval(secs => $6)
                                  THEN 'failing continuously since ' || to_char(old.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ': ' || s.summary
                                  ELSE ep.disabled_reason END,
           -- Recovery probing (probe.go): the first failure schedules the
           -- first probe, and every further failure (3: of an endpoint
           -- already failing) pushes the next one to at least a probe gap
           -- after the request's start (s.ago before now: the receiver was
           -- just tried); a recovery asks for the held deliveries' release
           -- (probe_at due, failing_since NULL); disabling ends both.
           probe_at        = CASE WHEN s.health = 2 AND old.failing_since < now() - make_interval(secs => $6) THEN NULL
                                  WHEN s.health = 2 AND old.failing_since IS NULL THEN now() + make_interval(secs => $11)
                                  WHEN s.health IN (2, 3) AND old.failing_since IS NOT NULL AND ep.probe_at IS NOT NULL
                                  THEN greatest(ep.probe_at, now() - make_interval(secs => s.ago) + ` + probeGapSQL("ep.probes", "$11", "$12") + `)
                                  WHEN s.health = 1 AND old.failing_since IS NOT NULL THEN now()
                                  ELSE ep.probe_at END,
           probes          = CASE WHEN (s.health = 1 AND old.failing_since IS NOT NULL) OR (s.health = 2 AND old.failing_since IS NULL)
                                  THEN 0 ELSE ep.probes END,
           paused_until    = CASE WHEN s.clear_pause AND ep.paused_until <= now() THEN NULL ELSE ep.paused_until END,
           pause_reason    = CASE WHEN s.clear_pause AND ep.paused_until <= now() THEN NULL ELSE ep.pause_reason END,
           busy_until      = CASE WHEN s.release THEN NULL ELSE ep.busy_until END,
           lease_token     = CASE WHEN s.release THEN NULL ELSE ep.lease_token END,
           updated_at      = CASE WHEN (s.health = 1 AND old.failing_since IS NOT NULL) OR (s.health = 2 AND old.failing_since IS NULL)
                                  THEN now() ELSE ep.updated_at END
      FROM s, old
     WHERE ep.id = s.id AND old.id = s.id AND old.token = s.token
 RETURNING ep.id, s.token, ep.enabled, old.enabled AS was_enabled, s.release, s.health, s.summary,
           ep.owner_id, ep.name, ep.disabled_reason, old.failing_since AS failing_before, ep.failing_since AS failing_after
),
transition AS (
    SELECT u.*, CASE WHEN u.health = 1 AND u.failing_before IS NOT NULL THEN 'endpoint.recovered'
                     WHEN u.was_enabled AND NOT u.enabled THEN 'endpoint.disabled'
                     WHEN u.health = 2 AND u.failing_before IS NULL THEN 'endpoint.failing' END AS type,
           coalesce(u.failing_before, u.failing_after) AS since
      FROM upd u
     WHERE $8 <> '' AND u.owner_id <> $8
),
announced AS (
    INSERT INTO operational_outbox (event_id, owner_id, type, subject, data)
    SELECT 'op_' || replace(t.id::text, '-', '') || '_' || split_part(t.type, '.', 2) || '_' || (extract(epoch FROM t.since) * 1000000)::bigint,
           $8, t.type, 'dispatcher://endpoints/' || t.id,
           jsonb_build_object('endpoint_id', t.id, 'owner_id', t.owner_id, 'name', t.name,
                              'failing_since', to_char(t.since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
           || CASE t.type
              WHEN 'endpoint.failing'   THEN jsonb_build_object('error', t.summary)
              WHEN 'endpoint.disabled'  THEN jsonb_build_object('disabled_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                                                                'disabled_reason', t.disabled_reason)
              ELSE jsonb_build_object('recovered_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
              END
      FROM transition t
     WHERE t.type IS NOT NULL
 RETURNING 1
),
released AS (
    SELECT pg_notify($7, 'r:' || id::text) FROM upd WHERE release
),
woken AS (
    SELECT pg_notify($9, '') WHERE EXISTS (SELECT FROM announced)
)
SELECT id, token, enabled, was_enabled, health = 1 AND failing_before IS NOT NULL,
       (SELECT count(*) FROM released), (SELECT count(*) FROM woken)
  FROM upd`

// Operational events: who gets them, and how their relay is woken.
type operational struct {
	// owner is the owner id operational events are emitted to; "" emits none.
	owner string
	// channel is the NOTIFY channel of new operational_outbox rows.
	channel string
}

// settle runs one batch of settlements. A settlement whose lease is no longer
// the caller's (it expired and moved on, or the endpoint is gone) changes
// nothing: the new holder's settlements stand.
//
// Several deliveries to one endpoint may settle in one batch (an endpoint
// with max_in_flight above 1). They are merged into one row per lease first,
// since one statement updates a row once: a release if any of them releases,
// and the health of the last one that has a health change (attempts that
// ended together have no order among themselves; the next attempt's outcome
// corrects the state either way).
func settle(ctx context.Context, pool *pgxpool.Pool, disableAfter time.Duration, channel string, ops operational, reqs []settleReq) ([]settleRes, error) {
	type key struct{ endpoint, token uuid.UUID }
	var (
		merged = make([]settleReq, 0, len(reqs))
		index  = make(map[key]int, len(reqs))
		of     = make([]int, len(reqs)) // reqs[i] is merged[of[i]]
	)
	for i, r := range reqs {
		k := key{r.endpointID, r.token}
		m, ok := index[k]
		if !ok {
			m = len(merged)
			index[k] = m
			merged = append(merged, settleReq{endpointID: r.endpointID, token: r.token})
		}
		of[i] = m
		if r.release {
			merged[m].release = true
		}
		if r.clearPause {
			merged[m].clearPause = true
		}
		// A failure of an endpoint already failing only pushes the next
		// probe: it never takes a transition's place.
		if r.health != healthNone && (r.health != healthStillFailing || merged[m].health == healthNone) {
			merged[m].health, merged[m].summary, merged[m].ago = r.health, r.summary, r.ago
		}
	}
	var (
		ids       = make([]uuid.UUID, len(merged))
		tokens    = make([]uuid.UUID, len(merged))
		healths   = make([]int32, len(merged))
		releases  = make([]bool, len(merged))
		summaries = make([]string, len(merged))
		clears    = make([]bool, len(merged))
		agos      = make([]float64, len(merged))
	)
	for i, r := range merged {
		ids[i], tokens[i], healths[i], releases[i], summaries[i], clears[i] = r.endpointID, r.token, int32(r.health), r.release, r.summary, r.clearPause
		agos[i] = max(r.ago, 0).Seconds()
	}
	rows, err := pool.Query(ctx, settleSQL, ids, tokens, healths, releases, summaries, disableAfter.Seconds(), channel, ops.owner, ops.channel, clears, probeFirst.Seconds(), probeEvery.Seconds(), agos)
	if err != nil {
		return nil, fmt.Errorf("settle endpoints: %w", err)
	}
	disabled := make([]bool, len(merged))
	recovered := make([]bool, len(merged))
	for rows.Next() {
		var (
			k                             key
			enabled, wasEnabled, recovers bool
			released, woken               int64
		)
		if err := rows.Scan(&k.endpoint, &k.token, &enabled, &wasEnabled, &recovers, &released, &woken); err != nil {
			rows.Close()
			return nil, fmt.Errorf("settle endpoints: %w", err)
		}
		if m, ok := index[k]; ok {
			disabled[m] = wasEnabled && !enabled
			recovered[m] = recovers
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("settle endpoints: %w", err)
	}
	out := make([]settleRes, len(reqs))
	for i := range reqs {
		// One merged settlement disabled the endpoint: report it once.
		if m := of[i]; disabled[m] {
			out[i].disabledNow, disabled[m] = true, false
		}
		if m := of[i]; recovered[m] {
			out[i].recovered, recovered[m] = true, false
		}
	}
	return out, nil
}

// errLeaseBusy: another process is delivering to the endpoint.
var errLeaseBusy = errors.New("endpoint lease busy")

// errEndpointGone / errEndpointDisabled end the delivery (cancelled).
var (
	errEndpointGone     = errors.New("endpoint deleted")
	errEndpointDisabled = errors.New("endpoint disabled")
)
