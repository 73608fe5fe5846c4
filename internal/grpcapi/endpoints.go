package grpcapi

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// NotFoundMessage is the one message for a missing or foreign endpoint id,
// so the reply says nothing about whether the id exists for someone else. (A
// malformed id is InvalidArgument: it cannot exist for anyone.)
const NotFoundMessage = "endpoint not found"

// DeliveryNotFoundMessage is the one message for a missing or foreign
// delivery id.
const DeliveryNotFoundMessage = "delivery not found"

type endpointServer struct {
	webhooksv1.UnimplementedEndpointServiceServer

	logger *slog.Logger
	svc    *endpoint.Service
	portal PortalSessions
	// catalog is the running catalog ListEventTypes lists (nil: the
	// default one), and eventTypes its answer, built once per catalog.
	catalog    *event.Running
	eventTypes atomic.Pointer[eventTypesAnswer]
}

// NewEndpointServer returns webhooks.v1.EndpointService over svc.
func NewEndpointServer(svc *endpoint.Service, logger *slog.Logger, opts ...EndpointServerOption) webhooksv1.EndpointServiceServer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &endpointServer{logger: logger, svc: svc}
	for _, o := range opts {
		o(s)
	}
	return s
}

// fail maps an endpoint error to a status; method and owner only go to the
// log, for errors no rule covers.
func (s *endpointServer) fail(ctx context.Context, method, owner string, err error) error {
	if ve, ok := errors.AsType[*endpoint.ValidationError](err); ok {
		violations := make([]*errdetails.BadRequest_FieldViolation, len(ve.Violations))
		for i, v := range ve.Violations {
			violations[i] = &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description}
		}
		return invalidArgument(violations)
	}
	switch {
	case errors.Is(err, endpoint.ErrNotFound):
		return status.Error(codes.NotFound, NotFoundMessage)
	case errors.Is(err, endpoint.ErrDeliveryNotFound):
		return status.Error(codes.NotFound, DeliveryNotFoundMessage)
	case errors.Is(err, endpoint.ErrEventNotFound):
		return status.Error(codes.NotFound, EventNotFoundMessage)
	case errors.Is(err, endpoint.ErrRequestIDReused):
		return status.Error(codes.AlreadyExists, "request_id was already used with different parameters: "+
			"a retry must repeat the request exactly, a new endpoint needs a new request_id")
	case errors.As(err, new(*endpoint.NotWaitingError)):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, endpoint.ErrDisabled):
		return status.Error(codes.FailedPrecondition, "endpoint is disabled: enable it (update with enabled=true) first")
	case errors.Is(err, endpoint.ErrTooManyEndpoints):
		return status.Errorf(codes.ResourceExhausted, "owner has reached the limit of %d endpoints", s.svc.MaxEndpointsPerOwner())
	case errors.Is(err, endpoint.ErrUnavailable):
		return status.Error(codes.Unimplemented, err.Error())
	}
	return unexpected(ctx, s.logger, method, owner, codes.Internal, err)
}

// ListEndpoints implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) ListEndpoints(ctx context.Context, req *webhooksv1.ListEndpointsRequest) (*webhooksv1.ListEndpointsResponse, error) {
	page, err := s.svc.List(ctx, req.GetOwnerId(), req.GetPageSize(), req.GetPageToken(), req.GetLabels())
	if err != nil {
		return nil, s.fail(ctx, "list", req.GetOwnerId(), err)
	}
	resp := &webhooksv1.ListEndpointsResponse{NextPageToken: page.NextPageToken}
	for _, e := range page.Items {
		resp.Endpoints = append(resp.Endpoints, toProto(e))
	}
	return resp, nil
}

// GetEndpoint implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) GetEndpoint(ctx context.Context, req *webhooksv1.GetEndpointRequest) (*webhooksv1.GetEndpointResponse, error) {
	e, err := s.svc.Get(ctx, req.GetOwnerId(), req.GetEndpointId())
	if err != nil {
		return nil, s.fail(ctx, "get", req.GetOwnerId(), err)
	}
	return &webhooksv1.GetEndpointResponse{Endpoint: toProto(e)}, nil
}

// CreateEndpoint implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) CreateEndpoint(ctx context.Context, req *webhooksv1.CreateEndpointRequest) (*webhooksv1.CreateEndpointResponse, error) {
	filter, err := filterJSON(req.GetFilter())
	if err != nil {
		return nil, err
	}
	c, err := s.svc.Create(ctx, endpoint.CreateParams{
		OwnerID:     req.GetOwnerId(),
		URL:         req.GetUrl(),
		Description: req.GetDescription(),
		EventTypes:  req.GetEventTypes(),
		EmbedID:     req.GetEmbedId(),
		Headers:     req.GetHeaders(),
		// An unknown enum number reaches the service as a scheme it refuses,
		// naming the field.
		SigningScheme: schemeFromProto(req.GetSignatureScheme()),

		MaxPerSecond: req.GetMaxPerSecond(),
		MaxInFlight:  req.GetMaxInFlight(),
		Ordered:      req.GetOrdered(),
		Name:         req.GetName(),
		Labels:       req.GetLabels(),
		RequestID:    req.GetRequestId(),
		Filter:       filter,
	})
	if err != nil {
		return nil, s.fail(ctx, "create", req.GetOwnerId(), err)
	}
	return &webhooksv1.CreateEndpointResponse{Endpoint: toProto(c.Endpoint), Secret: c.Secret, Replayed: c.Replayed}, nil
}

// UpdateEndpoint implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) UpdateEndpoint(ctx context.Context, req *webhooksv1.UpdateEndpointRequest) (*webhooksv1.UpdateEndpointResponse, error) {
	filter, err := filterJSON(req.GetFilter())
	if err != nil {
		return nil, err
	}
	e, err := s.svc.Update(ctx, endpoint.UpdateRequest{
		OwnerID:     req.GetOwnerId(),
		ID:          req.GetEndpointId(),
		Paths:       req.GetUpdateMask().GetPaths(),
		URL:         req.GetUrl(),
		Description: req.GetDescription(),
		EventTypes:  req.GetEventTypes(),
		EmbedID:     req.GetEmbedId(),
		Enabled:     req.GetEnabled(),
		Headers:     req.GetHeaders(),

		MaxPerSecond: req.GetMaxPerSecond(),
		MaxInFlight:  req.GetMaxInFlight(),
		Ordered:      req.GetOrdered(),
		Name:         req.GetName(),
		Labels:       req.GetLabels(),
		Filter:       filter,
	})
	if err != nil {
		return nil, s.fail(ctx, "update", req.GetOwnerId(), err)
	}
	return &webhooksv1.UpdateEndpointResponse{Endpoint: toProto(e)}, nil
}

// DeleteEndpoint implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) DeleteEndpoint(ctx context.Context, req *webhooksv1.DeleteEndpointRequest) (*webhooksv1.DeleteEndpointResponse, error) {
	if err := s.svc.Delete(ctx, req.GetOwnerId(), req.GetEndpointId()); err != nil {
		return nil, s.fail(ctx, "delete", req.GetOwnerId(), err)
	}
	return &webhooksv1.DeleteEndpointResponse{}, nil
}

// RotateSecret implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) RotateSecret(ctx context.Context, req *webhooksv1.RotateSecretRequest) (*webhooksv1.RotateSecretResponse, error) {
	var grace endpoint.GracePeriod
	if gp := req.GetGracePeriod(); gp != nil {
		if gp.CheckValid() != nil {
			grace.Malformed = true
		} else {
			grace.Value = new(gp.AsDuration())
		}
	}
	r, err := s.svc.RotateSecret(ctx, req.GetOwnerId(), req.GetEndpointId(), grace)
	if err != nil {
		return nil, s.fail(ctx, "rotate_secret", req.GetOwnerId(), err)
	}
	resp := &webhooksv1.RotateSecretResponse{Secret: r.Secret, PublicKey: r.PublicKey}
	if r.PreviousExpiresAt != nil {
		resp.PreviousSecretExpiresAt = timestamppb.New(*r.PreviousExpiresAt)
	}
	return resp, nil
}

// SendTest implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) SendTest(ctx context.Context, req *webhooksv1.SendTestRequest) (*webhooksv1.SendTestResponse, error) {
	id, err := s.svc.SendTest(ctx, req.GetOwnerId(), req.GetEndpointId())
	if err != nil {
		return nil, s.fail(ctx, "send_test", req.GetOwnerId(), err)
	}
	return &webhooksv1.SendTestResponse{EventId: id}, nil
}

// schemeFromProto is the endpoint package's name of a scheme; an unknown
// number maps to a name the service refuses.
func schemeFromProto(s webhooksv1.SignatureScheme) string {
	switch s {
	case webhooksv1.SignatureScheme_SIGNATURE_SCHEME_UNSPECIFIED:
		return ""
	case webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1:
		return endpoint.SchemeV1
	case webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A:
		return endpoint.SchemeV1a
	default:
		return "unknown"
	}
}

func toProto(e *endpoint.Endpoint) *webhooksv1.Endpoint {
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
		HeaderNames:    e.HeaderNames,
		PublicKey:      e.PublicKey,

		PauseReason:  e.PauseReason,
		MaxPerSecond: e.MaxPerSecond,
		MaxInFlight:  e.MaxInFlight,
		Ordered:      e.Ordered,
		Name:         e.Name,
		Labels:       e.Labels,
		Filter:       filterProto(e.Filter),
	}
	if e.SigningScheme == endpoint.SchemeV1a {
		out.SignatureScheme = webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A
	} else {
		out.SignatureScheme = webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1
	}
	if e.PausedUntil != nil {
		out.PausedUntil = timestamppb.New(*e.PausedUntil)
	}
	if e.NextProbeAt != nil {
		out.NextProbeAt = timestamppb.New(*e.NextProbeAt)
	}
	if e.FailingSince != nil {
		out.FailingSince = timestamppb.New(*e.FailingSince)
	}
	// Only while the grace period lasts: an expired previous secret no
	// longer signs, whatever is still stored.
	if e.PreviousSecretExpiresAt != nil && e.PreviousSecretExpiresAt.After(time.Now()) {
		out.PreviousSecretExpiresAt = timestamppb.New(*e.PreviousSecretExpiresAt)
		out.PreviousPublicKey = e.PreviousPublicKey
	}
	return out
}

var deliveryStates = map[endpoint.DeliveryState]webhooksv1.DeliveryState{
	endpoint.DeliveryPending:    webhooksv1.DeliveryState_DELIVERY_STATE_PENDING,
	endpoint.DeliveryScheduled:  webhooksv1.DeliveryState_DELIVERY_STATE_SCHEDULED,
	endpoint.DeliveryDelivering: webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERING,
	endpoint.DeliveryDelivered:  webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED,
	endpoint.DeliveryFailed:     webhooksv1.DeliveryState_DELIVERY_STATE_FAILED,
	endpoint.DeliveryCancelled:  webhooksv1.DeliveryState_DELIVERY_STATE_CANCELLED,
}

var waitReasons = map[endpoint.WaitReason]webhooksv1.DeliveryWaitReason{
	endpoint.WaitRetry:           webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY,
	endpoint.WaitRetryAfter:      webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY_AFTER,
	endpoint.WaitLeaseBusy:       webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_LEASE_BUSY,
	endpoint.WaitEndpointFailing: webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_ENDPOINT_FAILING,
	endpoint.WaitEndpointPaused:  webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_ENDPOINT_PAUSED,
	endpoint.WaitRateLimit:       webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RATE_LIMIT,
	endpoint.WaitOrdered:         webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_ORDERED,
}
