package endpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// The admin surface's read of stored events: what was published for an
// owner, and where each event went. Ingest owns writing events; this is
// only the owner-scoped view of them and their deliveries, beside the
// deliveries' one mapping of River states (jobRow.delivery).

// ErrEventNotFound: no event with that id for that owner, which is also what
// another owner's event looks like.
var ErrEventNotFound = errors.New("event not found")

// Field names of the event operations.
const (
	FieldEventID        = "event_id"
	FieldSubjectPrefix  = "subject_prefix"
	FieldOccurredAfter  = "occurred_after"
	FieldOccurredBefore = "occurred_before"
)

// MaxEventDeliveries bounds the deliveries GetEvent returns: one per
// endpoint the event went to, and an owner has at most a few hundred.
const MaxEventDeliveries = 1000

const eventsTokenTag = "v1"

// eventCursor is the position after the last event of a page.
type eventCursor struct {
	OccurredAt time.Time
	ID         string
}

func encodeEventsToken(c eventCursor) string {
	return encodeToken(eventsTokenTag, strconv.FormatInt(c.OccurredAt.UnixMicro(), 10), c.ID)
}

func decodeEventsToken(tok string) (*eventCursor, bool) {
	parts, ok := decodeToken(tok, eventsTokenTag, 2)
	if !ok {
		return nil, false
	}
	micros, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || webhook.ValidateID(parts[1]) != nil {
		return nil, false
	}
	return &eventCursor{OccurredAt: time.UnixMicro(micros), ID: parts[1]}, true
}

// ListEventsRequest asks for a page of an owner's events.
type ListEventsRequest struct {
	OwnerID   string
	PageSize  int32
	PageToken string
	// EventType is a glob as in an endpoint's event_types ("": any).
	EventType      string
	SubjectPrefix  string
	OccurredAfter  Timestamp
	OccurredBefore Timestamp
}

// eventFilter is a validated ListEventsRequest.
type eventFilter struct {
	exactType string // a type name: served by events_owner_type_occurred_idx
	typeLike  string // a LIKE pattern for "*" and "prefix.*"
	subject   string
	after     *time.Time
	before    *time.Time
}

// ListEvents returns a page of owner's events, newest first (occurred_at,
// then id).
func (s *Service) ListEvents(ctx context.Context, r ListEventsRequest) (Page[*webhook.Event], error) {
	var v violations
	s.val.ownerID(&v, r.OwnerID)
	limit := pageSize(&v, r.PageSize)
	var cursor *eventCursor
	if r.PageToken != "" {
		var ok bool
		if cursor, ok = decodeEventsToken(r.PageToken); !ok {
			v.add(FieldPageToken, "is not a token returned by ListEvents")
		}
	}
	f := eventFilter{
		after:  r.OccurredAfter.check(&v, FieldOccurredAfter),
		before: r.OccurredBefore.check(&v, FieldOccurredBefore),
	}
	timeRange(&v, f.after, f.before, FieldOccurredBefore, FieldOccurredAfter)
	if pattern := s.typeGlob(&v, FieldEventType, r.EventType); pattern != "" {
		if webhook.IsTypeName(r.EventType) {
			f.exactType = r.EventType
		} else if pattern != "%" {
			f.typeLike = pattern
		}
	}
	if r.SubjectPrefix != "" {
		if len(r.SubjectPrefix) > webhook.MaxSubjectLen {
			v.add(FieldSubjectPrefix, "must be at most "+strconv.Itoa(webhook.MaxSubjectLen)+" bytes")
		} else if desc := textProblem(r.SubjectPrefix, webhook.MaxSubjectLen); desc != "" {
			v.add(FieldSubjectPrefix, desc)
		}
		f.subject = r.SubjectPrefix
	}
	if err := v.err(); err != nil {
		return Page[*webhook.Event]{}, err
	}
	evs, err := s.store.ListEvents(ctx, r.OwnerID, f, cursor, limit+1)
	if err != nil {
		return Page[*webhook.Event]{}, err
	}
	return pageOf(evs, limit, func(last *webhook.Event) string {
		return encodeEventsToken(eventCursor{OccurredAt: last.OccurredAt, ID: last.ID})
	}), nil
}

// EventWithDeliveries is an event and where it went.
type EventWithDeliveries struct {
	Event      *webhook.Event
	Deliveries []*Delivery
	// Fanout is the fanout's decision for each of the owner's endpoints;
	// nil while it is not recorded (the fanout job waits for the access
	// service, or the event predates the record).
	Fanout *decision.Record
}

// GetEvent returns one of owner's events with its deliveries.
func (s *Service) GetEvent(ctx context.Context, owner, eventID string) (*EventWithDeliveries, error) {
	var v violations
	s.val.ownerID(&v, owner)
	if err := webhook.ValidateID(eventID); err != nil {
		if fe, ok := errors.AsType[*webhook.FieldError](err); ok {
			v.add(FieldEventID, fe.Reason)
		} else {
			v.add(FieldEventID, "is not a valid event id")
		}
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	return s.store.GetEvent(ctx, owner, eventID)
}

const eventColumns = `id, owner_id, type, subject, occurred_at, data`

func scanEvent(r pgx.Row) (*webhook.Event, error) {
	var e webhook.Event
	if err := r.Scan(&e.ID, &e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &e.Data); err != nil {
		return nil, err
	}
	return &e, nil
}

// ListEvents returns up to limit of owner's events passing f, newest first,
// after cursor (nil: from the newest). The SQL holds only the conditions f
// uses, built from fixed fragments, so that each combination gets the plan
// its index allows (a generic plan of "@x = ” OR type = @x" could not use
// the type index).
func (s *Store) ListEvents(ctx context.Context, owner string, f eventFilter, cursor *eventCursor, limit int) ([]*webhook.Event, error) {
	q, args := listEventsQuery(owner, f, cursor, limit)
	rows, err := s.pool.Query(ctx, q, args)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*webhook.Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// listEventsQuery is ListEvents' SQL and arguments.
func listEventsQuery(owner string, f eventFilter, cursor *eventCursor, limit int) (string, pgx.NamedArgs) {
	conds := []string{"owner_id = @owner"}
	args := pgx.NamedArgs{"owner": owner, "limit": limit}
	if f.exactType != "" {
		conds, args["type"] = append(conds, "type = @type"), f.exactType
	}
	if f.typeLike != "" {
		conds, args["type_like"] = append(conds, "type LIKE @type_like"), f.typeLike
	}
	if f.subject != "" {
		conds, args["subject"] = append(conds, "starts_with(subject, @subject)"), f.subject
	}
	if f.after != nil {
		conds, args["after"] = append(conds, "occurred_at >= @after"), *f.after
	}
	if f.before != nil {
		conds, args["before"] = append(conds, "occurred_at < @before"), *f.before
	}
	if cursor != nil {
		conds = append(conds, "(occurred_at, id) < (@cursor_at, @cursor_id)")
		args["cursor_at"], args["cursor_id"] = cursor.OccurredAt, cursor.ID
	}
	return `SELECT ` + eventColumns + ` FROM events WHERE ` + strings.Join(conds, " AND ") + `
 ORDER BY occurred_at DESC, id DESC
 LIMIT @limit`, args
}

// eventDeliveriesSQL reads one event's deliveries, oldest first, through
// river_job_webhook_deliver_event_idx. The filter runs first, in a
// MATERIALIZED CTE, because left to itself the plan Postgres caches for the
// prepared statement (the generic plan it switches to after five executions,
// blind to the event id) walks river_job's primary key in id order to satisfy
// ORDER BY … LIMIT and filters every job on the way: 0.3 s at 500,000 jobs
// (bench S9) instead of a millisecond. An event has a delivery per matching
// endpoint of its owner, so what the CTE holds is small.
//
// Each delivery is joined on its endpoint's owner, as every other read of
// deliveries is: the event's ownership alone would answer for whatever
// river_job holds under that event id, and that is the fanout's promise,
// not something this read should take on trust. A deleted endpoint's
// deliveries are left out with it, as ListDeliveries leaves them out.
var eventDeliveriesSQL = `
WITH j AS MATERIALIZED (
    SELECT * FROM river_job WHERE kind = '` + job.KindDeliver + `' AND args->>'event_id' = @event_id
)
SELECT ` + deliveryColumns + `
  FROM j
  JOIN webhook_endpoints w ON w.id = (j.args->>'endpoint_id')::uuid AND w.owner_id = @owner
  LEFT JOIN events e ON e.id = j.args->>'event_id' AND e.owner_id = @owner
 ORDER BY j.id
 LIMIT @limit`

// GetEvent returns owner's event id and its deliveries (at most
// MaxEventDeliveries, oldest first), or ErrEventNotFound.
func (s *Store) GetEvent(ctx context.Context, owner, id string) (*EventWithDeliveries, error) {
	var (
		ev     webhook.Event
		fanout []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT `+eventColumns+`, fanout FROM events WHERE id = $1 AND owner_id = $2`, id, owner).
		Scan(&ev.ID, &ev.OwnerID, &ev.Type, &ev.Subject, &ev.OccurredAt, &ev.Data, &fanout)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrEventNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event: %w", err)
	}
	out := &EventWithDeliveries{Event: &ev}
	if fanout != nil {
		// The record holds only this owner's endpoints: the fanout reads
		// nothing else (internal/fanout), so the event's ownership, checked
		// above, covers it as it covers the deliveries. One this build
		// cannot read (a newer format, during an upgrade) shows as not
		// recorded rather than fail the event's page.
		if rec, err := decision.Decode(fanout); err == nil {
			out.Fanout = rec
		}
	}
	now := time.Now()
	rows, err := s.pool.Query(ctx, eventDeliveriesSQL, pgx.NamedArgs{"owner": owner, "event_id": id, "limit": MaxEventDeliveries})
	if err != nil {
		return nil, fmt.Errorf("get event deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Delivery, error) {
		jr, err := collectJobRow(r)
		if err != nil {
			return nil, err
		}
		return jr.delivery(now), nil
	})
	if err != nil {
		return nil, fmt.Errorf("get event deliveries: %w", err)
	}
	out.Deliveries = ds
	return out, nil
}
