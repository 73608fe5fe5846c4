package endpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/fair"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// DeliveryFilter narrows ListDeliveries; the zero value lists every
// delivery.
type DeliveryFilter struct {
	// States: only deliveries in one of these (none: every state).
	States []DeliveryState
	// EventTypeLike is a LIKE pattern from event.GlobLikePattern ("": any
	// type). A delivery whose event was pruned has no type and never matches.
	EventTypeLike string
	// CreatedAfter (inclusive) and CreatedBefore (exclusive) bound the
	// delivery's creation time; nil leaves that side open.
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
}

// deliverySelect reads a webhook.deliver job j and its event e as a jobRow
// (scanJobRow). The events join is owner-scoped, so an event id that
// collides with another owner's never lends its type.
const deliverySelect = `
SELECT ` + deliveryColumns + `
  FROM river_job j
  LEFT JOIN events e ON e.id = j.args->>'event_id' AND e.owner_id = @owner`

func collectJobRow(r pgx.CollectableRow) (jobRow, error) { return scanJobRow(r) }

// ListDeliveries returns up to limit of owner's endpoint's deliveries that
// pass f, newest first, with job ids below beforeJobID (0 for the first
// page).
func (s *Store) ListDeliveries(ctx context.Context, owner string, endpointID uuid.UUID, f DeliveryFilter, beforeJobID int64, limit int) ([]*Delivery, error) {
	if err := s.exists(ctx, s.pool, owner, endpointID); err != nil {
		return nil, err
	}
	stateCond := "true"
	if len(f.States) > 0 {
		stateCond = stateCondition(f.States)
	}
	now := time.Now()
	// Served by river_job_webhook_deliver_endpoint_idx ((args->>'endpoint_id'), id)
	// WHERE kind = 'webhook.deliver', walked backwards; the filters are
	// checked on the way. The kind is a literal, not a parameter, so that
	// even a generic plan can prove the partial index applies. An endpoint's
	// jobs are bounded by River's retention (internal/retention: completed
	// jobs are kept a day, discarded and cancelled ones a week, never more
	// than -retention).
	rows, err := s.pool.Query(ctx, deliverySelect+`
 WHERE j.kind = '`+job.KindDeliver+`'
   AND j.args->>'endpoint_id' = @endpoint_id::text
   AND (@before::bigint = 0 OR j.id < @before::bigint)
   AND (@created_after::timestamptz IS NULL OR j.created_at >= @created_after::timestamptz)
   AND (@created_before::timestamptz IS NULL OR j.created_at < @created_before::timestamptz)
   AND (@type_like::text = '' OR e.type LIKE @type_like::text)
   AND `+stateCond+`
 ORDER BY j.id DESC
 LIMIT @limit`, pgx.NamedArgs{
		"owner": owner, "endpoint_id": endpointID.String(), "before": beforeJobID,
		"created_after": f.CreatedAfter, "created_before": f.CreatedBefore, "type_like": f.EventTypeLike,
		"now": now, "limit": limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Delivery, error) {
		jr, err := collectJobRow(r)
		if err != nil {
			return nil, err
		}
		return jr.delivery(now), nil
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// GetDelivery returns owner's delivery jobID, or ErrDeliveryNotFound: for a missing
// job, a job of another kind, and a delivery to an endpoint owner does not
// have (another owner's, or one since deleted) alike.
func (s *Store) GetDelivery(ctx context.Context, owner string, jobID int64) (*Delivery, error) {
	now := time.Now()
	rows, err := s.pool.Query(ctx, deliverySelect+`
  JOIN webhook_endpoints w ON w.id::text = j.args->>'endpoint_id' AND w.owner_id = @owner
 WHERE j.id = @id AND j.kind = '`+job.KindDeliver+`'`, pgx.NamedArgs{"owner": owner, "id": jobID})
	if err != nil {
		return nil, fmt.Errorf("get delivery: %w", err)
	}
	jr, err := pgx.CollectExactlyOneRow(rows, collectJobRow)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrDeliveryNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get delivery: %w", err)
	}
	return jr.delivery(now), nil
}

// RedeliverParams bound one Redeliver call.
type RedeliverParams struct {
	// Since: only deliveries that ended at or after it, and not already
	// re-queued by a Redeliver with a since at or before it. nil: whenever
	// they ended.
	Since *time.Time
	// AfterJobID continues after the deliveries a previous call examined.
	AfterJobID int64
	// Limit is how many deliveries to examine at most.
	Limit int
	// Lowest puts the re-queued deliveries in the lowest tier of River's
	// fetch order (fair.Lowest).
	Lowest bool
}

// RedeliverResult is what one Redeliver call did.
type RedeliverResult struct {
	// Count is how many deliveries were re-queued.
	Count int
	// LastJobID is the last delivery examined, and More whether the call
	// stopped at Limit, so that another may continue after LastJobID.
	LastJobID int64
	More      bool
}

// redeliveredAtKey is the job metadata key Redeliver stamps a re-queued
// delivery with, so that a second call with the same since skips it.
const redeliveredAtKey = "redelivered_at"

// resentAtKey is the job metadata key RetryDelivery with resend stamps a
// delivered delivery it queues again with.
const resentAtKey = "resent_at"

// Redeliver re-queues, in one transaction, up to p.Limit deliveries of
// owner's endpoint id that ended discarded or cancelled (since p.Since) and
// whose event still exists, oldest first, and says how many. The endpoint
// must be enabled (ErrDisabled): a disabled endpoint's deliveries would
// only be cancelled again.
//
// River's JobRetryTx keeps the job's attempt count and errors, and gives an
// exhausted job one more attempt. A delivery whose (endpoint, event) twin is
// live again (a later fanout of the same event) is skipped: retrying it would
// hit River's unique index, so each retry runs in a savepoint and a unique
// violation only rolls that one back.
//
// Idempotent: a re-queued delivery is no longer discarded or cancelled, and
// once it has failed again, the stamp redeliveredAtKey keeps a call with the
// same since from queuing it a second time. The rows are locked with SKIP
// LOCKED, so two concurrent calls split the work rather than both retrying a
// delivery.
func (s *Store) Redeliver(ctx context.Context, client *river.Client[pgx.Tx], owner string, id uuid.UUID, p RedeliverParams) (RedeliverResult, error) {
	var res RedeliverResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var enabled bool
		// FOR SHARE keeps the endpoint from being deleted or disabled under
		// the transaction.
		err := tx.QueryRow(ctx, `SELECT enabled FROM webhook_endpoints WHERE id = $1 AND owner_id = $2 FOR SHARE`, id, owner).Scan(&enabled)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if !enabled {
			return ErrDisabled
		}
		rows, err := tx.Query(ctx, `
SELECT j.id
  FROM river_job j
 WHERE j.kind = '`+job.KindDeliver+`'
   AND j.args->>'endpoint_id' = @endpoint_id::text
   AND j.state IN ('discarded', 'cancelled')
   AND j.id > @after
   AND (@since::timestamptz IS NULL
        OR (j.finalized_at >= @since::timestamptz
            AND NOT coalesce((j.metadata->>'`+redeliveredAtKey+`')::timestamptz >= @since::timestamptz, false)))
   AND EXISTS (SELECT 1 FROM events e WHERE e.id = j.args->>'event_id' AND e.owner_id = @owner)
 ORDER BY j.id
 LIMIT @limit
   FOR UPDATE OF j SKIP LOCKED`, pgx.NamedArgs{
			"endpoint_id": id.String(), "after": p.AfterJobID, "since": p.Since, "owner": owner, "limit": p.Limit + 1,
		})
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		// One row more than the limit says whether another call has work,
		// so the last page is never an empty one.
		if len(ids) > p.Limit {
			ids, res.More = ids[:p.Limit], true
		}
		retried := make([]int64, 0, len(ids))
		for _, jobID := range ids {
			ok, err := retryInSavepoint(ctx, client, tx, jobID)
			if err != nil {
				return fmt.Errorf("retry job %d: %w", jobID, err)
			}
			if ok {
				res.Count++
				retried = append(retried, jobID)
			}
		}
		if p.Lowest && len(retried) > 0 {
			// River's fetch takes priority 1 first: a backfill at the
			// lowest goes behind every live delivery.
			if _, err := tx.Exec(ctx, `UPDATE river_job SET priority = $2 WHERE id = ANY($1)`, retried, fair.Lowest); err != nil {
				return fmt.Errorf("lower the re-queued deliveries: %w", err)
			}
		}
		if len(ids) > 0 {
			res.LastJobID = ids[len(ids)-1]
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrDisabled) {
			return RedeliverResult{}, err
		}
		return RedeliverResult{}, fmt.Errorf("redeliver: %w", err)
	}
	return res, nil
}
