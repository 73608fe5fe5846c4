package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/event"
)

// Delivery operation bounds.
const (
	// MaxStatesFilter bounds ListDeliveries' states filter: there are six
	// states.
	MaxStatesFilter = 6
	// DefaultRedeliverLimit and MaxRedeliverLimit bound one Redeliver
	// call's transaction: River UI's bulk retry stops at 1000 too.
	DefaultRedeliverLimit = 1000
	MaxRedeliverLimit     = 1000
)

// Field names of the delivery operations.
const (
	FieldStates        = "states"
	FieldEventType     = "event_type"
	FieldCreatedAfter  = "created_after"
	FieldCreatedBefore = "created_before"
	FieldSince         = "since"
	FieldLimit         = "limit"
)

// Timestamp is a time a caller sent. Set Malformed when the transport's
// value was present but not a valid time.
type Timestamp struct {
	Value     *time.Time // nil: not given
	Malformed bool
}

func (ts Timestamp) check(v *violations, field string) *time.Time {
	if ts.Malformed {
		v.add(field, "is not a valid timestamp")
		return nil
	}
	return ts.Value
}

// ListDeliveriesRequest asks for a page of one endpoint's deliveries.
type ListDeliveriesRequest struct {
	OwnerID    string
	EndpointID string
	PageSize   int32
	PageToken  string
	// States: only these (none: all). A zero or unknown state is refused.
	States []DeliveryState
	// EventType is a glob as in an endpoint's event_types ("": any).
	EventType     string
	CreatedAfter  Timestamp
	CreatedBefore Timestamp
}

// ListDeliveries returns a page of an endpoint's deliveries, newest first.
// The filters are not part of the page token: send the same ones with it.
func (s *Service) ListDeliveries(ctx context.Context, r ListDeliveriesRequest) (Page[*Delivery], error) {
	var v violations
	s.val.ownerID(&v, r.OwnerID)
	id := parseID(&v, r.EndpointID)
	limit := pageSize(&v, r.PageSize)
	var before int64
	if r.PageToken != "" {
		var ok bool
		if before, ok = decodeDeliveriesToken(r.PageToken); !ok {
			v.add(FieldPageToken, "is not a token returned by ListDeliveries")
		}
	}
	f := DeliveryFilter{
		States:        deliveryStates(&v, r.States),
		CreatedAfter:  r.CreatedAfter.check(&v, FieldCreatedAfter),
		CreatedBefore: r.CreatedBefore.check(&v, FieldCreatedBefore),
	}
	timeRange(&v, f.CreatedAfter, f.CreatedBefore, FieldCreatedBefore, FieldCreatedAfter)
	f.EventTypeLike = s.typeGlob(&v, FieldEventType, r.EventType)
	if err := v.err(); err != nil {
		return Page[*Delivery]{}, err
	}
	ds, err := s.store.ListDeliveries(ctx, r.OwnerID, id, f, before, limit+1)
	if err != nil {
		return Page[*Delivery]{}, err
	}
	return pageOf(ds, limit, func(last *Delivery) string { return encodeDeliveriesToken(last.JobID) }), nil
}

// deliveryStates validates a states filter.
func deliveryStates(v *violations, states []DeliveryState) []DeliveryState {
	if len(states) > MaxStatesFilter {
		v.add(FieldStates, "must list at most "+strconv.Itoa(MaxStatesFilter)+" states")
		return nil
	}
	for i, st := range states {
		if st < DeliveryPending || st > DeliveryCancelled {
			v.add(FieldStates+"["+strconv.Itoa(i)+"]", "must be a delivery state other than UNSPECIFIED")
		}
	}
	return states
}

// timeRange refuses an empty or inverted [after, before).
func timeRange(v *violations, after, before *time.Time, beforeField, afterField string) {
	if after != nil && before != nil && !before.After(*after) {
		v.add(beforeField, "must be after "+afterField)
	}
}

// typeGlob validates an event type filter, a glob as endpoints subscribe
// with, and returns its LIKE pattern ("" for none).
func (s *Service) typeGlob(v *violations, field, glob string) string {
	if glob == "" {
		return ""
	}
	if err := event.ValidateGlobIn(s.val.catalog.Catalog(), glob); err != nil {
		if ge, ok := errors.AsType[*event.GlobError](err); ok {
			v.add(field, ge.Reason)
		} else {
			v.add(field, "is not a valid event type glob")
		}
		return ""
	}
	pattern, _ := event.GlobLikePattern(glob)
	return pattern
}

// GetDelivery returns one of owner's deliveries, to any of its endpoints.
func (s *Service) GetDelivery(ctx context.Context, owner string, deliveryID int64) (*Delivery, error) {
	var v violations
	s.val.ownerID(&v, owner)
	if deliveryID <= 0 {
		v.add(FieldDeliveryID, "must be a delivery id (a positive number)")
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	return s.store.GetDelivery(ctx, owner, deliveryID)
}

// RedeliverRequest asks to re-queue an endpoint's failed and cancelled
// deliveries.
type RedeliverRequest struct {
	OwnerID    string
	EndpointID string
	Since      Timestamp
	Limit      int32
	PageToken  string
	// Weight is the re-queued deliveries' weight (0: none given): below 1
	// they go in the lowest tier of River's fetch order (internal/fair),
	// behind every live delivery.
	Weight float64
}

// Redelivered is what Redeliver did.
type Redelivered struct {
	Count int
	// NextPageToken continues where this call stopped at its limit ("":
	// it did not).
	NextPageToken string
}

// Redeliver re-queues up to a limit of an endpoint's discarded or cancelled
// deliveries whose event still exists (see Store.Redeliver).
func (s *Service) Redeliver(ctx context.Context, r RedeliverRequest) (Redelivered, error) {
	var v violations
	s.val.ownerID(&v, r.OwnerID)
	id := parseID(&v, r.EndpointID)
	since := r.Since.check(&v, FieldSince)
	if since != nil {
		// Postgres keeps microseconds; so does the page token.
		since = new(since.Truncate(time.Microsecond))
	}
	limit := DefaultRedeliverLimit
	switch {
	case r.Limit < 0:
		v.add(FieldLimit, "must not be negative")
	case r.Limit > MaxRedeliverLimit:
		v.add(FieldLimit, "must be at most "+strconv.Itoa(MaxRedeliverLimit))
	case r.Limit > 0:
		limit = int(r.Limit)
	}
	checkWeight(&v, r.Weight, true)
	var after int64
	if r.PageToken != "" {
		tokSince, last, ok := decodeRedeliverToken(r.PageToken)
		switch {
		case !ok:
			v.add(FieldPageToken, "is not a token returned by Redeliver")
		case !sameTime(tokSince, since):
			v.add(FieldPageToken, "was returned for another since: send the same since with it")
		default:
			after = last
		}
	}
	if err := v.err(); err != nil {
		return Redelivered{}, err
	}
	if s.river == nil {
		return Redelivered{}, fmt.Errorf("redeliver: %w", ErrUnavailable)
	}
	res, err := s.store.Redeliver(ctx, s.river, r.OwnerID, id, RedeliverParams{Since: since, AfterJobID: after, Limit: limit, Lowest: r.Weight > 0 && r.Weight < 1})
	if err != nil {
		return Redelivered{}, err
	}
	out := Redelivered{Count: res.Count}
	if res.More {
		out.NextPageToken = encodeRedeliverToken(since, res.LastJobID)
	}
	attrs := []any{slog.Int("count", res.Count), slog.Bool("more", res.More)}
	if since != nil {
		attrs = append(attrs, slog.Time("since", *since))
	}
	s.logOp(ctx, "deliveries re-queued", r.OwnerID, id, attrs...)
	return out, nil
}

// sameTime compares two optional times to the microsecond, Postgres'
// precision and the token's.
func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.UnixMicro() == b.UnixMicro()
}
