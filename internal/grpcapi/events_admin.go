package grpcapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// EventNotFoundMessage is the one message for a missing or foreign event id.
const EventNotFoundMessage = "event not found"

// ListEvents implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) ListEvents(ctx context.Context, req *webhooksv1.ListEventsRequest) (*webhooksv1.ListEventsResponse, error) {
	page, err := s.svc.ListEvents(ctx, endpoint.ListEventsRequest{
		OwnerID:        req.GetOwnerId(),
		PageSize:       req.GetPageSize(),
		PageToken:      req.GetPageToken(),
		EventType:      req.GetEventType(),
		SubjectPrefix:  req.GetSubjectPrefix(),
		OccurredAfter:  timestampFromProto(req.GetOccurredAfter()),
		OccurredBefore: timestampFromProto(req.GetOccurredBefore()),
	})
	if err != nil {
		return nil, s.fail(ctx, "list_events", req.GetOwnerId(), err)
	}
	resp := &webhooksv1.ListEventsResponse{NextPageToken: page.NextPageToken}
	for _, e := range page.Items {
		pe, err := eventToProto(e)
		if err != nil {
			return nil, unexpected(ctx, s.logger, "list_events", req.GetOwnerId(), codes.Internal, err)
		}
		resp.Events = append(resp.Events, pe)
	}
	return resp, nil
}

// GetEvent implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) GetEvent(ctx context.Context, req *webhooksv1.GetEventRequest) (*webhooksv1.GetEventResponse, error) {
	got, err := s.svc.GetEvent(ctx, req.GetOwnerId(), req.GetEventId())
	if err != nil {
		return nil, s.fail(ctx, "get_event", req.GetOwnerId(), err)
	}
	pe, err := eventToProto(got.Event)
	if err != nil {
		return nil, unexpected(ctx, s.logger, "get_event", req.GetOwnerId(), codes.Internal, err)
	}
	resp := &webhooksv1.GetEventResponse{Event: pe}
	for _, d := range got.Deliveries {
		resp.Deliveries = append(resp.Deliveries, s.deliveryProto(d))
	}
	return resp, nil
}

// eventToProto is the stored event as the API's Event, data as a Struct.
func eventToProto(e *webhook.Event) (*webhooksv1.Event, error) {
	data := &structpb.Struct{}
	if len(e.Data) > 0 {
		if err := protojson.Unmarshal(e.Data, data); err != nil {
			return nil, fmt.Errorf("event %s data: %w", e.ID, err)
		}
	}
	return &webhooksv1.Event{
		Id: e.ID, OwnerId: e.OwnerID, Type: e.Type, Subject: e.Subject,
		OccurredAt: timestamppb.New(e.OccurredAt), Data: data,
	}, nil
}
