package grpcapi

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// ListDeliveries implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) ListDeliveries(ctx context.Context, req *webhooksv1.ListDeliveriesRequest) (*webhooksv1.ListDeliveriesResponse, error) {
	states := make([]endpoint.DeliveryState, len(req.GetStates()))
	for i, st := range req.GetStates() {
		// An unknown number maps to 0, which the service refuses naming
		// states[i].
		states[i] = deliveryStatesFromProto[st]
	}
	page, err := s.svc.ListDeliveries(ctx, endpoint.ListDeliveriesRequest{
		OwnerID:       req.GetOwnerId(),
		EndpointID:    req.GetEndpointId(),
		PageSize:      req.GetPageSize(),
		PageToken:     req.GetPageToken(),
		States:        states,
		EventType:     req.GetEventType(),
		CreatedAfter:  timestampFromProto(req.GetCreatedAfter()),
		CreatedBefore: timestampFromProto(req.GetCreatedBefore()),
	})
	if err != nil {
		return nil, s.fail(ctx, "list_deliveries", req.GetOwnerId(), err)
	}
	resp := &webhooksv1.ListDeliveriesResponse{NextPageToken: page.NextPageToken}
	for _, d := range page.Items {
		resp.Deliveries = append(resp.Deliveries, s.deliveryProto(d))
	}
	return resp, nil
}

// GetDelivery implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) GetDelivery(ctx context.Context, req *webhooksv1.GetDeliveryRequest) (*webhooksv1.GetDeliveryResponse, error) {
	d, err := s.svc.GetDelivery(ctx, req.GetOwnerId(), req.GetDeliveryId())
	if err != nil {
		return nil, s.fail(ctx, "get_delivery", req.GetOwnerId(), err)
	}
	return &webhooksv1.GetDeliveryResponse{Delivery: s.deliveryProto(d)}, nil
}

// Redeliver implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) Redeliver(ctx context.Context, req *webhooksv1.RedeliverRequest) (*webhooksv1.RedeliverResponse, error) {
	r, err := s.svc.Redeliver(ctx, endpoint.RedeliverRequest{
		OwnerID:    req.GetOwnerId(),
		EndpointID: req.GetEndpointId(),
		Since:      timestampFromProto(req.GetSince()),
		Limit:      req.GetLimit(),
		PageToken:  req.GetPageToken(),
		Weight:     req.GetWeight(),
	})
	if err != nil {
		return nil, s.fail(ctx, "redeliver", req.GetOwnerId(), err)
	}
	return &webhooksv1.RedeliverResponse{Count: int32(min(r.Count, 1<<31-1)), NextPageToken: r.NextPageToken}, nil
}

// deliveryStatesFromProto inverts deliveryStates.
var deliveryStatesFromProto = func() map[webhooksv1.DeliveryState]endpoint.DeliveryState {
	m := make(map[webhooksv1.DeliveryState]endpoint.DeliveryState, len(deliveryStates))
	for k, v := range deliveryStates {
		m[v] = k
	}
	return m
}()

// timestampFromProto reads an optional timestamp; one out of range is
// Malformed, for the service to refuse naming its field.
func timestampFromProto(ts *timestamppb.Timestamp) endpoint.Timestamp {
	if ts == nil {
		return endpoint.Timestamp{}
	}
	if ts.CheckValid() != nil {
		return endpoint.Timestamp{Malformed: true}
	}
	return endpoint.Timestamp{Value: new(ts.AsTime())}
}

// RetryDelivery implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) RetryDelivery(ctx context.Context, req *webhooksv1.RetryDeliveryRequest) (*webhooksv1.RetryDeliveryResponse, error) {
	retry := s.svc.RetryDelivery
	if req.GetResend() {
		retry = s.svc.ResendDelivery
	}
	d, err := retry(ctx, req.GetOwnerId(), req.GetDeliveryId())
	if err != nil {
		return nil, s.fail(ctx, "retry_delivery", req.GetOwnerId(), err)
	}
	return &webhooksv1.RetryDeliveryResponse{Delivery: s.deliveryProto(d)}, nil
}

func (s *endpointServer) deliveryProto(d *endpoint.Delivery) *webhooksv1.Delivery {
	out := &webhooksv1.Delivery{
		Id:          d.JobID,
		EndpointId:  d.EndpointID,
		EventId:     d.EventID,
		EventType:   d.EventType,
		State:       deliveryStates[d.State],
		WaitReason:  waitReasons[d.Wait],
		StateReason: d.StateReason,
		Attempt:     int32(min(d.Attempt, 1<<31-1)),
		MaxAttempts: int32(min(d.MaxAttempts, 1<<31-1)),
		Probes:      int32(min(d.Probes, 1<<31-1)),
		Probe:       d.Probe,
		LastError:   d.LastError,
		CreatedAt:   timestamppb.New(d.CreatedAt),
		ScheduledAt: timestamppb.New(d.ScheduledAt),
		Link:        s.svc.JobLink(d.JobID),
	}
	if d.AttemptedAt != nil {
		out.AttemptedAt = timestamppb.New(*d.AttemptedAt)
	}
	if d.FinalizedAt != nil {
		out.FinalizedAt = timestamppb.New(*d.FinalizedAt)
	}
	return out
}
