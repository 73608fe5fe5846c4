package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Service defaults and bounds.
const (
	DefaultMaxEndpointsPerOwner = 100
	DefaultGracePeriod          = 24 * time.Hour
	MaxGracePeriod              = 7 * 24 * time.Hour
	DefaultPageSize             = 50
	MaxPageSize                 = 200
)

// Publisher stores an event and schedules its fanout, as ingest does. SendTest
// publishes through it; the composition root adapts the ingest store to it,
// so this package does not depend on ingest.
type Publisher interface {
	Publish(ctx context.Context, e *webhook.Event) error
}

// ServiceConfig configures the endpoint service.
type ServiceConfig struct {
	// AllowCIDRs are ranges a literal-IP endpoint URL may point into although
	// the egress policy refuses them: loopback receivers for tests and local
	// development. It must match the egress client's AllowCIDRs. Empty in
	// production.
	AllowCIDRs []netip.Prefix
	// JobLinkTemplate builds Delivery.link: "{job_id}" is replaced by the
	// River job id, e.g. "http://localhost:9090/riverui/jobs/{job_id}".
	// Empty: no links.
	JobLinkTemplate string
	// MaxEndpointsPerOwner caps an owner's endpoints. 0 means
	// DefaultMaxEndpointsPerOwner; negative means no cap.
	MaxEndpointsPerOwner int
	// RequireHTTPS refuses http:// endpoint URLs.
	RequireHTTPS bool
}

type service struct {
	webhooksv1.UnimplementedEndpointServiceServer

	cfg       ServiceConfig
	logger    *slog.Logger
	publisher Publisher
	river     *river.Client[pgx.Tx]
	store     *Store
	val       *validator
}

// NewService returns the EndpointService implementation. riverClient (an
// insert-only client is enough) is used by Redeliver, pub by SendTest; either
// may be nil, and the op then answers Unimplemented. pool and kr are required.
func NewService(cfg ServiceConfig, pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], kr *seal.Keyring, pub Publisher, logger *slog.Logger) webhooksv1.EndpointServiceServer {
	if pool == nil {
		panic("endpoint.NewService: a database pool is required")
	}
	if kr == nil {
		panic(errNoKeyring.Error())
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxEndpointsPerOwner == 0 {
		cfg.MaxEndpointsPerOwner = DefaultMaxEndpointsPerOwner
	}
	return &service{
		cfg:       cfg,
		logger:    logger,
		publisher: pub,
		river:     riverClient,
		store:     NewStore(pool, kr),
		val: &validator{
			policy:       egress.Policy{AllowCIDRs: slices.Clone(cfg.AllowCIDRs)},
			requireHTTPS: cfg.RequireHTTPS,
		},
	}
}

// notFoundMessage is the one message for a missing, foreign or malformed id,
// so the reply says nothing about whether the id exists for someone else.
const notFoundMessage = "endpoint not found"

// errNotFoundStatus is returned for malformed ids before any query runs.
var errNotFoundStatus = status.Error(codes.NotFound, notFoundMessage)

// parseID validates an endpoint id field. Empty is a missing argument; a
// malformed id reads as not found, like a foreign one.
func parseID(v *violations, field, raw string) (uuid.UUID, bool) {
	if raw == "" {
		v.add(field, "must not be empty")
		return uuid.Nil, true
	}
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		// Only the canonical form: "urn:uuid:…" and braces would otherwise
		// let two spellings name one endpoint.
		return uuid.Nil, false
	}
	return id, true
}

// invalidArgument turns a *ValidationError into InvalidArgument with a
// google.rpc.BadRequest detail naming each field.
func invalidArgument(ve *ValidationError) error {
	st := status.New(codes.InvalidArgument, ve.Error())
	br := &errdetails.BadRequest{}
	for _, v := range ve.Violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field:       v.Field,
			Description: v.Description,
		})
	}
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}

// fail maps an error to a gRPC status. Unexpected errors are logged with the
// op, owner and endpoint id only, and answered with a generic Internal: a
// database message is not the caller's business.
func (s *service) fail(ctx context.Context, op, owner string, id uuid.UUID, err error) error {
	var ve *ValidationError
	switch {
	case errors.As(err, &ve):
		return invalidArgument(ve)
	case errors.Is(err, ErrNotFound):
		return errNotFoundStatus
	case errors.Is(err, ErrDisabled):
		return status.Error(codes.FailedPrecondition, "endpoint is disabled: enable it (update with enabled=true) first")
	case errors.Is(err, ErrTooManyEndpoints):
		return status.Errorf(codes.ResourceExhausted, "owner has reached the limit of %d endpoints", s.cfg.MaxEndpointsPerOwner)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request deadline exceeded")
	}
	attrs := []any{slog.String("op", op), slog.String("owner_id", owner), slog.Any("error", err)}
	if id != uuid.Nil {
		attrs = append(attrs, slog.String("endpoint_id", id.String()))
	}
	s.logger.ErrorContext(ctx, "endpoint operation failed", attrs...)
	return status.Error(codes.Internal, "internal error")
}

func (s *service) logOp(ctx context.Context, msg, owner string, id uuid.UUID, attrs ...any) {
	attrs = append([]any{slog.String("owner_id", owner), slog.String("endpoint_id", id.String())}, attrs...)
	s.logger.InfoContext(ctx, msg, attrs...)
}

func pageSize(v *violations, n int32) int {
	switch {
	case n < 0:
		v.add(FieldPageSize, "must not be negative")
		return 0
	case n == 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	default:
		return int(n)
	}
}

// ListEndpoints implements webhooksv1.EndpointServiceServer.
func (s *service) ListEndpoints(ctx context.Context, req *webhooksv1.ListEndpointsRequest) (*webhooksv1.ListEndpointsResponse, error) {
	var v violations
	s.val.ownerID(&v, req.GetOwnerId())
	limit := pageSize(&v, req.GetPageSize())
	var cursor *ListCursor
	if tok := req.GetPageToken(); tok != "" {
		var ok bool
		if cursor, ok = decodeListToken(tok); !ok {
			v.add(FieldPageToken, "is not a token returned by ListEndpoints")
		}
	}
	if err := v.err(); err != nil {
		return nil, s.fail(ctx, "list", req.GetOwnerId(), uuid.Nil, err)
	}
	// One extra row says whether another page exists without a count query.
	eps, err := s.store.List(ctx, req.GetOwnerId(), cursor, limit+1)
	if err != nil {
		return nil, s.fail(ctx, "list", req.GetOwnerId(), uuid.Nil, err)
	}
	resp := &webhooksv1.ListEndpointsResponse{}
	if len(eps) > limit {
		eps = eps[:limit]
		last := eps[len(eps)-1]
		resp.NextPageToken = encodeListToken(ListCursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	for _, e := range eps {
		resp.Endpoints = append(resp.Endpoints, toProto(e))
	}
	return resp, nil
}

// GetEndpoint implements webhooksv1.EndpointServiceServer.
func (s *service) GetEndpoint(ctx context.Context, req *webhooksv1.GetEndpointRequest) (*webhooksv1.GetEndpointResponse, error) {
	id, err := s.ownerAndID(req.GetOwnerId(), FieldID, req.GetId())
	if err != nil {
		return nil, s.fail(ctx, "get", req.GetOwnerId(), uuid.Nil, err)
	}
	e, err := s.store.Get(ctx, req.GetOwnerId(), id)
	if err != nil {
		return nil, s.fail(ctx, "get", req.GetOwnerId(), id, err)
	}
	return &webhooksv1.GetEndpointResponse{Endpoint: toProto(e)}, nil
}

// ownerAndID validates the owner id and an endpoint id field together.
// A malformed id gives ErrNotFound (after the owner checks out).
func (s *service) ownerAndID(owner, field, rawID string) (uuid.UUID, error) {
	var v violations
	s.val.ownerID(&v, owner)
	id, ok := parseID(&v, field, rawID)
	if err := v.err(); err != nil {
		return uuid.Nil, err
	}
	if !ok {
		return uuid.Nil, ErrNotFound
	}
	return id, nil
}

// CreateEndpoint implements webhooksv1.EndpointServiceServer.
func (s *service) CreateEndpoint(ctx context.Context, req *webhooksv1.CreateEndpointRequest) (*webhooksv1.CreateEndpointResponse, error) {
	var v violations
	s.val.ownerID(&v, req.GetOwnerId())
	s.val.url(&v, req.GetUrl())
	s.val.description(&v, req.GetDescription())
	s.val.eventTypes(&v, req.GetEventTypes())
	s.val.embedID(&v, req.GetEmbedId())
	if err := v.err(); err != nil {
		return nil, s.fail(ctx, "create", req.GetOwnerId(), uuid.Nil, err)
	}
	e, secret, err := s.store.Create(ctx, CreateParams{
		OwnerID:     req.GetOwnerId(),
		URL:         req.GetUrl(),
		Description: req.GetDescription(),
		EventTypes:  req.GetEventTypes(),
		EmbedID:     req.GetEmbedId(),
	}, s.cfg.MaxEndpointsPerOwner)
	if err != nil {
		return nil, s.fail(ctx, "create", req.GetOwnerId(), uuid.Nil, err)
	}
	s.logOp(ctx, "endpoint created", e.OwnerID, e.ID)
	return &webhooksv1.CreateEndpointResponse{Endpoint: toProto(e), Secret: secret}, nil
}

// Update mask paths.
const (
	pathURL         = "url"
	pathDescription = "description"
	pathEventTypes  = "event_types"
	pathEmbedID     = "embed_id"
	pathEnabled     = "enabled"
)

// UpdateEndpoint implements webhooksv1.EndpointServiceServer.
func (s *service) UpdateEndpoint(ctx context.Context, req *webhooksv1.UpdateEndpointRequest) (*webhooksv1.UpdateEndpointResponse, error) {
	var v violations
	s.val.ownerID(&v, req.GetOwnerId())
	id, idOK := parseID(&v, FieldID, req.GetId())

	var p UpdateParams
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		v.add(FieldUpdateMask, "must name at least one of: url, description, event_types, embed_id, enabled")
	}
	for i, path := range paths {
		switch path {
		case pathURL:
			s.val.url(&v, req.GetUrl())
			p.URL = new(req.GetUrl())
		case pathDescription:
			s.val.description(&v, req.GetDescription())
			p.Description = new(req.GetDescription())
		case pathEventTypes:
			s.val.eventTypes(&v, req.GetEventTypes())
			p.EventTypes = slices.Clone(req.GetEventTypes())
			if p.EventTypes == nil {
				p.EventTypes = []string{}
			}
		case pathEmbedID:
			s.val.embedID(&v, req.GetEmbedId())
			p.EmbedID = new(req.GetEmbedId())
		case pathEnabled:
			p.Enabled = new(req.GetEnabled())
		default:
			v.add(FieldUpdateMask+".paths["+strconv.Itoa(i)+"]",
				"unknown path: must be one of url, description, event_types, embed_id, enabled")
		}
	}
	if err := v.err(); err != nil {
		return nil, s.fail(ctx, "update", req.GetOwnerId(), uuid.Nil, err)
	}
	if !idOK {
		return nil, errNotFoundStatus
	}
	e, err := s.store.Update(ctx, req.GetOwnerId(), id, p)
	if err != nil {
		return nil, s.fail(ctx, "update", req.GetOwnerId(), id, err)
	}
	attrs := []any{slog.String("fields", strings.Join(paths, ","))}
	if p.Enabled != nil {
		attrs = append(attrs, slog.Bool("enabled", *p.Enabled))
	}
	s.logOp(ctx, "endpoint updated", e.OwnerID, e.ID, attrs...)
	return &webhooksv1.UpdateEndpointResponse{Endpoint: toProto(e)}, nil
}

// DeleteEndpoint implements webhooksv1.EndpointServiceServer.
func (s *service) DeleteEndpoint(ctx context.Context, req *webhooksv1.DeleteEndpointRequest) (*webhooksv1.DeleteEndpointResponse, error) {
	id, err := s.ownerAndID(req.GetOwnerId(), FieldID, req.GetId())
	if err != nil {
		return nil, s.fail(ctx, "delete", req.GetOwnerId(), uuid.Nil, err)
	}
	if err := s.store.Delete(ctx, req.GetOwnerId(), id); err != nil {
		return nil, s.fail(ctx, "delete", req.GetOwnerId(), id, err)
	}
	s.logOp(ctx, "endpoint deleted", req.GetOwnerId(), id)
	return &webhooksv1.DeleteEndpointResponse{}, nil
}

// RotateSecret implements webhooksv1.EndpointServiceServer.
func (s *service) RotateSecret(ctx context.Context, req *webhooksv1.RotateSecretRequest) (*webhooksv1.RotateSecretResponse, error) {
	var v violations
	s.val.ownerID(&v, req.GetOwnerId())
	id, idOK := parseID(&v, FieldID, req.GetId())
	grace := DefaultGracePeriod
	if gp := req.GetGracePeriod(); gp != nil {
		switch {
		case gp.CheckValid() != nil:
			v.add(FieldGracePeriod, "is not a valid duration")
		case gp.AsDuration() < 0:
			v.add(FieldGracePeriod, "must not be negative")
		case gp.AsDuration() > MaxGracePeriod:
			v.add(FieldGracePeriod, "must be at most 7 days (168h)")
		default:
			grace = gp.AsDuration()
		}
	}
	if err := v.err(); err != nil {
		return nil, s.fail(ctx, "rotate_secret", req.GetOwnerId(), uuid.Nil, err)
	}
	if !idOK {
		return nil, errNotFoundStatus
	}
	secret, expires, err := s.store.RotateSecret(ctx, req.GetOwnerId(), id, grace)
	if err != nil {
		return nil, s.fail(ctx, "rotate_secret", req.GetOwnerId(), id, err)
	}
	s.logOp(ctx, "endpoint secret rotated", req.GetOwnerId(), id, slog.Duration("grace_period", grace))
	resp := &webhooksv1.RotateSecretResponse{Secret: secret}
	if expires != nil {
		resp.PreviousSecretExpiresAt = timestamppb.New(*expires)
	}
	return resp, nil
}

// SendTest implements webhooksv1.EndpointServiceServer.
func (s *service) SendTest(ctx context.Context, req *webhooksv1.SendTestRequest) (*webhooksv1.SendTestResponse, error) {
	id, err := s.ownerAndID(req.GetOwnerId(), FieldID, req.GetId())
	if err != nil {
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), uuid.Nil, err)
	}
	if s.publisher == nil {
		return nil, status.Error(codes.Unimplemented, "send_test is not available on this server")
	}
	e, err := s.store.Get(ctx, req.GetOwnerId(), id)
	if err != nil {
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), id, err)
	}
	if !e.Enabled {
		// Fanout skips disabled endpoints; a test that can never arrive
		// would only confuse.
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), id, ErrDisabled)
	}
	evID, err := uuid.NewV7()
	if err != nil {
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), id, err)
	}
	// Fanout routes webhook.test by data.endpoint_id, to this endpoint only.
	data, err := json.Marshal(map[string]string{"endpoint_id": id.String()})
	if err != nil {
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), id, err)
	}
	ev := &webhook.Event{
		ID:         evID.String(),
		OwnerID:    e.OwnerID,
		Type:       event.TypeWebhookTest,
		Subject:    "webhook://endpoints/" + id.String(),
		OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
		Data:       data,
	}
	if err := s.publisher.Publish(ctx, ev); err != nil {
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), id, fmt.Errorf("publish test event: %w", err))
	}
	s.logOp(ctx, "test event sent", e.OwnerID, id, slog.String("event_id", ev.ID))
	return &webhooksv1.SendTestResponse{EventId: ev.ID}, nil
}

// ListDeliveries implements webhooksv1.EndpointServiceServer.
func (s *service) ListDeliveries(ctx context.Context, req *webhooksv1.ListDeliveriesRequest) (*webhooksv1.ListDeliveriesResponse, error) {
	var v violations
	s.val.ownerID(&v, req.GetOwnerId())
	id, idOK := parseID(&v, FieldEndpointID, req.GetEndpointId())
	limit := pageSize(&v, req.GetPageSize())
	var before int64
	if tok := req.GetPageToken(); tok != "" {
		var ok bool
		if before, ok = decodeDeliveriesToken(tok); !ok {
			v.add(FieldPageToken, "is not a token returned by ListDeliveries")
		}
	}
	if err := v.err(); err != nil {
		return nil, s.fail(ctx, "list_deliveries", req.GetOwnerId(), uuid.Nil, err)
	}
	if !idOK {
		return nil, errNotFoundStatus
	}
	ds, err := s.store.ListDeliveries(ctx, req.GetOwnerId(), id, before, limit+1)
	if err != nil {
		return nil, s.fail(ctx, "list_deliveries", req.GetOwnerId(), id, err)
	}
	resp := &webhooksv1.ListDeliveriesResponse{}
	if len(ds) > limit {
		ds = ds[:limit]
		resp.NextPageToken = encodeDeliveriesToken(ds[len(ds)-1].JobID)
	}
	for _, d := range ds {
		resp.Deliveries = append(resp.Deliveries, s.deliveryProto(d))
	}
	return resp, nil
}

// Redeliver implements webhooksv1.EndpointServiceServer.
func (s *service) Redeliver(ctx context.Context, req *webhooksv1.RedeliverRequest) (*webhooksv1.RedeliverResponse, error) {
	id, err := s.ownerAndID(req.GetOwnerId(), FieldEndpointID, req.GetEndpointId())
	if err != nil {
		return nil, s.fail(ctx, "redeliver", req.GetOwnerId(), uuid.Nil, err)
	}
	if s.river == nil {
		return nil, status.Error(codes.Unimplemented, "redeliver is not available on this server")
	}
	n, err := s.store.Redeliver(ctx, s.river, req.GetOwnerId(), id)
	if err != nil {
		return nil, s.fail(ctx, "redeliver", req.GetOwnerId(), id, err)
	}
	s.logOp(ctx, "deliveries re-queued", req.GetOwnerId(), id, slog.Int("count", n))
	return &webhooksv1.RedeliverResponse{Count: int32(min(n, 1<<31-1))}, nil
}

// ListEventTypes implements webhooksv1.EndpointServiceServer.
func (s *service) ListEventTypes(context.Context, *webhooksv1.ListEventTypesRequest) (*webhooksv1.ListEventTypesResponse, error) {
	resp := &webhooksv1.ListEventTypesResponse{}
	for _, t := range event.WebhookTypes() {
		resp.EventTypes = append(resp.EventTypes, &webhooksv1.EventType{Name: t.Name, Description: t.Description})
	}
	return resp, nil
}

func toProto(e *Endpoint) *webhooksv1.Endpoint {
	out := &webhooksv1.Endpoint{
		Id:             e.ID.String(),
		OwnerId:        e.OwnerID,
		Url:            e.URL,
		Description:    e.Description,
		EventTypes:     e.EventTypes,
		EmbedId:        e.EmbedID,
		Enabled:        e.Enabled,
		DisabledReason: e.DisabledReason,
		CreatedAt:      timestamppb.New(e.CreatedAt),
		UpdatedAt:      timestamppb.New(e.UpdatedAt),
	}
	if e.FailingSince != nil {
		out.FailingSince = timestamppb.New(*e.FailingSince)
	}
	// Only while the grace period lasts: an expired previous secret no
	// longer signs, whatever is still stored.
	if e.PreviousSecretExpiresAt != nil && e.PreviousSecretExpiresAt.After(time.Now()) {
		out.PreviousSecretExpiresAt = timestamppb.New(*e.PreviousSecretExpiresAt)
	}
	return out
}

var deliveryStates = map[string]webhooksv1.DeliveryState{
	"available": webhooksv1.DeliveryState_DELIVERY_STATE_AVAILABLE,
	"scheduled": webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED,
	"running":   webhooksv1.DeliveryState_DELIVERY_STATE_RUNNING,
	"retryable": webhooksv1.DeliveryState_DELIVERY_STATE_RETRYABLE,
	"completed": webhooksv1.DeliveryState_DELIVERY_STATE_COMPLETED,
	"cancelled": webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED,
	"discarded": webhooksv1.DeliveryState_DELIVERY_STATE_DISCARDED,
	"pending":   webhooksv1.DeliveryState_DELIVERY_STATE_PENDING,
}

func (s *service) deliveryProto(d *Delivery) *webhooksv1.Delivery {
	out := &webhooksv1.Delivery{
		JobId:       d.JobID,
		EventId:     d.EventID,
		EventType:   d.EventType,
		State:       deliveryStates[d.State],
		Attempt:     int32(min(d.Attempt, 1<<31-1)),
		MaxAttempts: int32(min(d.MaxAttempts, 1<<31-1)),
		LastError:   d.LastError,
		CreatedAt:   timestamppb.New(d.CreatedAt),
		ScheduledAt: timestamppb.New(d.ScheduledAt),
	}
	if d.AttemptedAt != nil {
		out.AttemptedAt = timestamppb.New(*d.AttemptedAt)
	}
	if d.FinalizedAt != nil {
		out.FinalizedAt = timestamppb.New(*d.FinalizedAt)
	}
	if s.cfg.JobLinkTemplate != "" {
		out.Link = strings.ReplaceAll(s.cfg.JobLinkTemplate, "{job_id}", strconv.FormatInt(d.JobID, 10))
	}
	return out
}
