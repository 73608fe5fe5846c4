package endpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// FieldEndpointIDs names the endpoint list of GetEndpointStats; each bad
// entry is named "endpoint_ids[i]".
const FieldEndpointIDs = "endpoint_ids"

// MaxStatsEndpoints bounds one EndpointStats call: a list page.
const MaxStatsEndpoints = 100

// ListAttempts returns a page of one of owner's deliveries' attempts, newest
// first. A delivery of another owner, or none, is ErrDeliveryNotFound; a
// delivery that exists but has no attempt yet has an empty page.
func (s *Service) ListAttempts(ctx context.Context, owner string, deliveryID int64, pageSize32 int32, pageToken string) (Page[attempt.Attempt], error) {
	var v violations
	s.val.ownerID(&v, owner)
	if deliveryID <= 0 {
		v.add(FieldDeliveryID, "must be a delivery id (a positive number, as ListDeliveries returns)")
	}
	limit := pageSize(&v, pageSize32)
	var before int64
	if pageToken != "" {
		var ok bool
		if before, ok = decodeIDToken(pageToken, attemptsTokenTag); !ok {
			v.add(FieldPageToken, "is not a token returned by ListAttempts")
		}
	}
	if err := v.err(); err != nil {
		return Page[attempt.Attempt]{}, err
	}
	if err := s.store.deliveryExists(ctx, owner, deliveryID); err != nil {
		return Page[attempt.Attempt]{}, err
	}
	as, err := attempt.List(ctx, s.store.pool, owner, deliveryID, before, limit+1)
	if err != nil {
		return Page[attempt.Attempt]{}, err
	}
	return pageOf(as, limit, func(last attempt.Attempt) string { return encodeIDToken(attemptsTokenTag, last.ID) }), nil
}

// deliveryExists: owner has a delivery deliveryID, as a job of one of its
// endpoints or, once River has cleaned the job up, as recorded attempts.
func (s *Store) deliveryExists(ctx context.Context, owner string, deliveryID int64) error {
	var found bool
	err := s.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT FROM river_job j JOIN webhook_endpoints w ON w.id::text = j.args->>'endpoint_id' AND w.owner_id = $2
                WHERE j.id = $1 AND j.kind = '`+job.KindDeliver+`')
    OR EXISTS (SELECT FROM delivery_attempts WHERE delivery_id = $1 AND owner_id = $2)`, deliveryID, owner).Scan(&found)
	if err != nil {
		return fmt.Errorf("find delivery: %w", err)
	}
	if !found {
		return ErrDeliveryNotFound
	}
	return nil
}

// EndpointStats returns the attempt statistics (last hour, day, week) of
// owner's endpoints ids, in that order, from the rollup. Any id that is not
// owner's endpoint is ErrNotFound.
func (s *Service) EndpointStats(ctx context.Context, owner string, rawIDs []string) ([]attempt.EndpointStats, error) {
	var v violations
	s.val.ownerID(&v, owner)
	switch {
	case len(rawIDs) == 0:
		v.add(FieldEndpointIDs, "must name at least one endpoint")
	case len(rawIDs) > MaxStatsEndpoints:
		v.add(FieldEndpointIDs, "must name at most "+strconv.Itoa(MaxStatsEndpoints)+" endpoints")
	}
	ids := make([]uuid.UUID, 0, len(rawIDs))
	if len(rawIDs) <= MaxStatsEndpoints {
		for i, raw := range rawIDs {
			var one violations
			id := parseID(&one, raw)
			for _, fv := range one {
				v.add(FieldEndpointIDs+"["+strconv.Itoa(i)+"]", fv.Description)
			}
			ids = append(ids, id)
		}
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	if err := s.store.allExist(ctx, owner, ids); err != nil {
		return nil, err
	}
	return attempt.Stats(ctx, s.store.pool, ids, time.Now())
}

// allExist: every id is one of owner's endpoints.
func (s *Store) allExist(ctx context.Context, owner string, ids []uuid.UUID) error {
	distinct := slices.Clone(ids)
	slices.SortFunc(distinct, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	distinct = slices.Compact(distinct)
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE id = ANY($1::uuid[]) AND owner_id = $2`, distinct, owner).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && n != len(distinct)) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("find endpoints: %w", err)
	}
	return nil
}
