package grpcapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// MaxBatchSize bounds PublishBatch: one batch is one transaction, and a
// publisher with more events sends more batches.
const MaxBatchSize = 500

type eventServer struct {
	webhooksv1.UnimplementedEventServiceServer

	logger *slog.Logger
	store  *ingest.Store
}

// NewEventServer returns webhooks.v1.EventService over store. Who may call
// it is the interceptors' business (Authorizer).
func NewEventServer(store *ingest.Store, logger *slog.Logger) webhooksv1.EventServiceServer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &eventServer{logger: logger, store: store}
}

// Publish stores one event and enqueues its fanout, returning once committed.
func (s *eventServer) Publish(ctx context.Context, req *webhooksv1.PublishRequest) (*webhooksv1.PublishResponse, error) {
	results, err := s.publish(ctx, []*webhooksv1.Event{req.GetEvent()}, req.GetWeight(), func(int) string { return "event" })
	if err != nil {
		return nil, err
	}
	return toProtoResult(results[0], req.GetEvent().GetType()), nil
}

// PublishBatch stores up to MaxBatchSize events, all or nothing. Every invalid
// field of every event is reported, so a publisher fixes a batch in one round
// trip. An empty batch is a no-op.
func (s *eventServer) PublishBatch(ctx context.Context, req *webhooksv1.PublishBatchRequest) (*webhooksv1.PublishBatchResponse, error) {
	in := req.GetEvents()
	if len(in) > MaxBatchSize {
		return nil, invalidArgument([]*errdetails.BadRequest_FieldViolation{{
			Field:       "events",
			Description: "must hold at most " + strconv.Itoa(MaxBatchSize) + " events, got " + strconv.Itoa(len(in)),
		}})
	}
	if len(in) == 0 {
		return &webhooksv1.PublishBatchResponse{}, nil
	}
	results, err := s.publish(ctx, in, req.GetWeight(), batchField)
	if err != nil {
		return nil, err
	}
	out := &webhooksv1.PublishBatchResponse{Results: make([]*webhooksv1.PublishResponse, len(results))}
	for i, r := range results {
		out.Results[i] = toProtoResult(r, in[i].GetType())
	}
	return out, nil
}

func batchField(i int) string { return "events[" + strconv.Itoa(i) + "]" }

// publish converts the events and ingests them; field names the event at an
// index the way the request does. The rules are the store's: this only
// reports what cannot even be converted (a missing event, a timestamp out of
// range), together with what the store finds wrong in the others. weight is
// the call's (0: none), given to every event.
func (s *eventServer) publish(ctx context.Context, in []*webhooksv1.Event, weight float64, field func(int) string) ([]ingest.Result, error) {
	if err := endpoint.CheckCallWeight(weight); err != nil {
		return nil, invalidArgument([]*errdetails.BadRequest_FieldViolation{{
			Field: endpoint.FieldWeight, Description: "must be from 0.01 to 100, or 0 for none",
		}})
	}
	events := make([]*webhook.Event, len(in))
	var (
		violations []*errdetails.BadRequest_FieldViolation
		converted  []*webhook.Event
		index      []int // converted[j] is in[index[j]]
	)
	now := time.Now()
	var filledTime []bool
	for i, pe := range in {
		e, violation := fromProto(pe, field(i))
		if violation == nil {
			filled, err := fillIn(e, pe, now)
			if err != nil {
				return nil, unexpected(ctx, s.logger, "publish", "", codes.Unavailable, err)
			}
			if filled && filledTime == nil {
				filledTime = make([]bool, len(in))
			}
			if filledTime != nil {
				filledTime[i] = filled
			}
		}
		if violation != nil {
			violations = append(violations, violation)
			continue
		}
		e.Weight = weight
		events[i] = e
		converted = append(converted, e)
		index = append(index, i)
	}
	if len(violations) > 0 {
		s.store.Rejected(ingest.SourceGRPC, len(violations))
		if invalid, ok := errors.AsType[*ingest.InvalidEventsError](s.store.Validate(ingest.SourceGRPC, converted)); ok {
			for _, iv := range invalid.Invalid {
				violations = append(violations, fieldViolations(field(index[iv.Index]), iv.Err)...)
			}
			slices.SortStableFunc(violations, func(a, b *errdetails.BadRequest_FieldViolation) int {
				return cmp.Compare(eventIndex(a.GetField()), eventIndex(b.GetField()))
			})
		}
		return nil, invalidArgument(violations)
	}
	results, err := s.store.IngestFilled(ctx, ingest.SourceGRPC, events, filledTime)
	if err != nil {
		return nil, s.ingestError(ctx, err, field, len(events))
	}
	return results, nil
}

// eventIndex is the index in a field path "events[3].subject" (0 for
// "event…"), to keep violations in request order.
func eventIndex(field string) int {
	open, end := strings.IndexByte(field, '['), strings.IndexByte(field, ']')
	if open < 0 || end < open {
		return 0
	}
	n, _ := strconv.Atoi(field[open+1 : end])
	return n
}

// fieldViolation names the field an event's validation error is about.
func fieldViolations(prefix string, err error) []*errdetails.BadRequest_FieldViolation {
	fields := webhook.Fields(err)
	if len(fields) == 0 {
		return []*errdetails.BadRequest_FieldViolation{{Field: prefix, Description: err.Error()}}
	}
	out := make([]*errdetails.BadRequest_FieldViolation, len(fields))
	for i, fe := range fields {
		out[i] = &errdetails.BadRequest_FieldViolation{Field: prefix + "." + fe.Field, Description: fe.Reason}
	}
	return out
}

// fillIn gives e what the publisher left out: an id (a UUIDv7, so ids the
// server makes sort by time) and the time (now). filledTime says the time
// was filled in, which makes a stored event with the same id a duplicate
// whatever its time (ingest.Store.IngestFilled).
func fillIn(e *webhook.Event, pe *webhooksv1.Event, now time.Time) (filledTime bool, err error) {
	if e.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return false, fmt.Errorf("event id: %w", err)
		}
		e.ID = id.String()
	}
	if pe.GetOccurredAt() == nil {
		e.OccurredAt = now
		return true, nil
	}
	return false, nil
}

// fromProto converts one event. prefix names it in errors ("event",
// "events[3]"). Only what cannot be represented is refused here; the rules
// are applied by the store.
func fromProto(pe *webhooksv1.Event, prefix string) (*webhook.Event, *errdetails.BadRequest_FieldViolation) {
	if pe == nil {
		return nil, &errdetails.BadRequest_FieldViolation{Field: prefix, Description: "must be set"}
	}
	e := &webhook.Event{
		ID:      pe.GetId(),
		OwnerID: pe.GetOwnerId(),
		Type:    pe.GetType(),
		Subject: pe.GetSubject(),
	}
	data, err := dataJSON(pe.GetData())
	if err != nil {
		return nil, &errdetails.BadRequest_FieldViolation{Field: prefix + "." + webhook.FieldData, Description: err.Error()}
	}
	e.Data = data
	if ts := pe.GetOccurredAt(); ts != nil {
		// A nil timestamp stays the zero time, which Validate reports as
		// missing; an out-of-range one must not be silently normalised.
		if err := ts.CheckValid(); err != nil {
			return nil, &errdetails.BadRequest_FieldViolation{
				Field:       prefix + "." + webhook.FieldOccurredAt,
				Description: "must be a valid timestamp",
			}
		}
		e.OccurredAt = ts.AsTime()
	}
	return e, nil
}

// dataJSON is the JSON an event's data is stored, signed and delivered as:
// compact with its keys sorted, so a retried Publish of the same Struct is
// byte for byte the same event. An unset Struct is the empty object. The size
// and content rules are pkg/webhook's, applied to this JSON by the store;
// only what JSON cannot hold (NaN, infinities, invalid UTF-8, which only a
// binary client in process can even send) is refused here.
func dataJSON(s *structpb.Struct) (json.RawMessage, error) {
	if s == nil {
		return json.RawMessage("{}"), nil
	}
	// protojson sorts map keys but adds random spaces (to keep its output
	// from being relied on); Compact takes them out again.
	b, err := protojson.Marshal(s)
	if err != nil {
		return nil, errors.New("must hold only finite numbers and valid UTF-8 text")
	}
	// At most as long as b: one allocation, not the buffer's growth.
	buf := bytes.NewBuffer(make([]byte, 0, len(b)))
	if err := json.Compact(buf, b); err != nil {
		return nil, fmt.Errorf("compact data: %w", err)
	}
	return buf.Bytes(), nil
}

// ingestError maps an Ingest error to a status. field names the event at an
// index the way the request does.
func (s *eventServer) ingestError(ctx context.Context, err error, field func(int) string, n int) error {
	if conflict, ok := errors.AsType[*ingest.ConflictError](err); ok {
		first := conflict.Conflicts[0]
		msg := fmt.Sprintf("%s.id: event id %q already exists with different content", field(first.Index), first.EventID)
		if more := len(conflict.Conflicts) - 1; more > 0 {
			msg += fmt.Sprintf(" (and %d more)", more)
		}
		details := make([]protoadapt.MessageV1, 0, len(conflict.Conflicts))
		for _, c := range conflict.Conflicts {
			details = append(details, &errdetails.ResourceInfo{
				ResourceType: "webhooks.v1.Event",
				ResourceName: c.EventID,
				Description:  field(c.Index) + " already exists with different content; an event id must not be reused",
			})
		}
		return withDetails(status.New(codes.AlreadyExists, msg), details...)
	}
	if invalid, ok := errors.AsType[*ingest.InvalidEventsError](err); ok {
		var violations []*errdetails.BadRequest_FieldViolation
		for _, iv := range invalid.Invalid {
			violations = append(violations, fieldViolations(field(iv.Index), iv.Err)...)
		}
		return invalidArgument(violations)
	}
	// Publishing is idempotent by event id, so telling the publisher to
	// retry is always safe.
	return unexpected(ctx, s.logger.With(slog.Int("events", n)), "publish", "", codes.Unavailable, err)
}

func toProtoResult(r ingest.Result, typ string) *webhooksv1.PublishResponse {
	var (
		o      webhooksv1.PublishOutcome
		reason string
	)
	switch r.Outcome {
	case ingest.OutcomeStored:
		o = webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED
	case ingest.OutcomeDuplicate:
		o = webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE
	case ingest.OutcomeDroppedInternal:
		o = webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_INTERNAL
		reason = fmt.Sprintf("type %q is internal in the event catalog: it never leaves", typ)
	case ingest.OutcomeDroppedRaw:
		o = webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_RAW
		reason = "raw:// subjects never leave"
	case ingest.OutcomeDroppedUnknown:
		o = webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN
		reason = fmt.Sprintf("type %q is in no event catalog, so it is never delivered", typ)
		if r.DidYouMean != "" {
			reason += fmt.Sprintf("; did you mean %q?", r.DidYouMean)
		}
	}
	resp := &webhooksv1.PublishResponse{EventId: r.EventID, Outcome: o, Reason: reason, DidYouMean: r.DidYouMean}
	if !r.OccurredAt.IsZero() {
		resp.OccurredAt = timestamppb.New(r.OccurredAt)
	}
	return resp
}
