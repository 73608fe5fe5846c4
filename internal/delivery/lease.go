package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// target is what one attempt needs, read in the same round trip that takes
// (or confirms) the endpoint's lease.
type target struct {
	ownerID           string
	url               string
	secret            []byte
	previousSecret    []byte
	previousExpiresAt *time.Time
	failingSince      *time.Time

	eventFound      bool
	eventOwnerID    string
	eventType       string
	eventSubject    string
	eventOccurredAt time.Time
	eventData       json.RawMessage
	eventCreatedAt  time.Time
}

// errLeaseBusy: another delivery to the endpoint is in flight.
var errLeaseBusy = errors.New("endpoint lease busy")

// errEndpointGone / errEndpointDisabled end the delivery (cancelled).
var (
	errEndpointGone     = errors.New("endpoint deleted")
	errEndpointDisabled = errors.New("endpoint disabled")
)

// The lease is one conditional UPDATE: no advisory lock, no row lock held
// across the POST. busy_until makes a dead worker's lease expire by itself;
// lease_token makes sure only the holder releases or extends it.
const takeLeaseSQL = `
WITH lease AS (
    UPDATE webhook_endpoints
       SET busy_until = now() + make_interval(secs => $3), lease_token = $4
     WHERE id = $1 AND enabled AND (busy_until IS NULL OR busy_until < now())
 RETURNING owner_id, url, secret_enc, previous_secret_enc, previous_secret_expires_at, failing_since
)
SELECT lease.*, e.id IS NOT NULL, e.owner_id, e.type, e.subject, e.occurred_at, e.data, e.created_at
  FROM lease LEFT JOIN events e ON e.id = $2`

// A hand-off already holds the lease: read the same things without writing.
const readLeasedSQL = `
SELECT ep.owner_id, ep.url, ep.secret_enc, ep.previous_secret_enc, ep.previous_secret_expires_at, ep.failing_since,
       e.id IS NOT NULL, e.owner_id, e.type, e.subject, e.occurred_at, e.data, e.created_at
  FROM webhook_endpoints ep LEFT JOIN events e ON e.id = $2
 WHERE ep.id = $1 AND ep.enabled AND ep.lease_token = $3`

func scanTarget(row pgx.Row) (*target, error) {
	var (
		t                          target
		evOwner, evType, evSubject *string
		evOccurred, evCreated      *time.Time
	)
	err := row.Scan(&t.ownerID, &t.url, &t.secret, &t.previousSecret, &t.previousExpiresAt, &t.failingSince,
		&t.eventFound, &evOwner, &evType, &evSubject, &evOccurred, &t.eventData, &evCreated)
	if err != nil {
		return nil, err
	}
	if t.eventFound {
		t.eventOwnerID, t.eventType, t.eventSubject = *evOwner, *evType, *evSubject
		t.eventOccurredAt, t.eventCreatedAt = *evOccurred, *evCreated
	}
	return &t, nil
}

// takeLease takes the endpoint's lease for ttl under token. It returns
// errLeaseBusy, errEndpointGone or errEndpointDisabled when it cannot.
func takeLease(ctx context.Context, pool *pgxpool.Pool, endpointID uuid.UUID, eventID string, ttl time.Duration, token uuid.UUID) (*target, error) {
	t, err := scanTarget(pool.QueryRow(ctx, takeLeaseSQL, endpointID, eventID, ttl.Seconds(), token))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, whyNoLease(ctx, pool, endpointID)
	}
	if err != nil {
		return nil, fmt.Errorf("take lease: %w", err)
	}
	return t, nil
}

// readLeased reads the target of a delivery that was handed the lease.
func readLeased(ctx context.Context, pool *pgxpool.Pool, endpointID uuid.UUID, eventID string, token uuid.UUID) (*target, error) {
	t, err := scanTarget(pool.QueryRow(ctx, readLeasedSQL, endpointID, eventID, token))
	if errors.Is(err, pgx.ErrNoRows) {
		// The lease expired and moved on, or the endpoint went away.
		if why := whyNoLease(ctx, pool, endpointID); !errors.Is(why, errLeaseBusy) {
			return nil, why
		}
		return nil, errLeaseBusy
	}
	if err != nil {
		return nil, fmt.Errorf("read leased endpoint: %w", err)
	}
	return t, nil
}

func whyNoLease(ctx context.Context, pool *pgxpool.Pool, endpointID uuid.UUID) error {
	var enabled bool
	err := pool.QueryRow(ctx, `SELECT enabled FROM webhook_endpoints WHERE id = $1`, endpointID).Scan(&enabled)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errEndpointGone
	case err != nil:
		return fmt.Errorf("read endpoint: %w", err)
	case !enabled:
		return errEndpointDisabled
	default:
		return errLeaseBusy
	}
}

// settlement is how an attempt ends for the endpoint's health.
type settlement struct {
	success bool
	// keep extends the lease instead of releasing it, for a local hand-off.
	keep bool
	// summary goes into disabled_reason if the endpoint is disabled now.
	summary string
}

// The endpoint health state machine (SPEC §3) in one statement: success
// clears failing_since; any failure sets it (first failure wins) and
// disables the endpoint once it has failed continuously for disableAfter.
// The lease is released (or extended for a hand-off) in the same write.
const settleSQL = `
WITH old AS (
    SELECT id, enabled, failing_since FROM webhook_endpoints WHERE id = $1 AND lease_token = $2 FOR UPDATE
)
UPDATE webhook_endpoints ep
   SET failing_since   = CASE WHEN $3 THEN NULL ELSE coalesce(old.failing_since, now()) END,
       enabled         = CASE WHEN NOT $3 AND old.failing_since < now() - make_interval(secs => $5) THEN false ELSE old.enabled END,
       disabled_reason = CASE WHEN NOT $3 AND old.failing_since < now() - make_interval(secs => $5)
                              THEN 'failing continuously since ' || to_char(old.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ': ' || $6
                              ELSE ep.disabled_reason END,
       busy_until      = CASE WHEN $4 THEN now() + make_interval(secs => $7) ELSE NULL END,
       lease_token     = CASE WHEN $4 THEN ep.lease_token ELSE NULL END,
       updated_at      = CASE WHEN $3 = (old.failing_since IS NOT NULL) THEN now() ELSE ep.updated_at END
  FROM old
 WHERE ep.id = old.id
RETURNING ep.enabled, old.enabled`

// settle applies s to the endpoint through q (a pool or the transaction that
// completes the job). It reports whether this settlement disabled the endpoint.
func settle(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, endpointID, token uuid.UUID, s settlement, disableAfter, ttl time.Duration,
) (disabledNow bool, err error) {
	var enabledAfter, enabledBefore bool
	err = q.QueryRow(ctx, settleSQL, endpointID, token, s.success, s.keep, disableAfter.Seconds(), s.summary, ttl.Seconds()).
		Scan(&enabledAfter, &enabledBefore)
	if errors.Is(err, pgx.ErrNoRows) {
		// Our lease expired and someone else holds it now (or the endpoint
		// is gone); their settlement stands.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("settle endpoint: %w", err)
	}
	return enabledBefore && !enabledAfter, nil
}

// releaseRetryFor bounds how long releaseLease keeps trying.
const releaseRetryFor = 10 * time.Second

// releaseLease gives the lease up without touching health (shutdown, a
// hand-off that found nobody waiting, or an attempt that failed on the
// database). A release that fails leaves the endpoint blocked until the lease
// expires (LeaseTTL), so it is retried for a little while: a database blip (a
// restart, a failover) then costs the endpoint seconds, not the whole TTL.
func releaseLease(ctx context.Context, pool *pgxpool.Pool, endpointID, token uuid.UUID) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseRetryFor)
	defer cancel()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		_, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET busy_until = NULL, lease_token = NULL WHERE id = $1 AND lease_token = $2`, endpointID, token)
		if err == nil {
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("release lease: %w", err)
		case <-timer.C:
		}
	}
}
