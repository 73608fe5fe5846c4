package grpcapi

import (
	"context"
	"fmt"
	"math"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/decision"
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
	resp := &webhooksv1.GetEventResponse{Event: pe, Fanout: fanoutToProto(got.Fanout)}
	for _, d := range got.Deliveries {
		resp.Deliveries = append(resp.Deliveries, s.deliveryProto(d))
	}
	return resp, nil
}

// fanoutToProto is a decision record as the API's FanoutDecision (nil: not
// recorded), the outcomes that delivered first.
func fanoutToProto(rec *decision.Record) *webhooksv1.FanoutDecision {
	out := &webhooksv1.FanoutDecision{}
	if rec == nil {
		return out
	}
	out.Recorded = true
	out.Endpoints = int32(min(rec.Endpoints(), math.MaxInt32))
	for _, o := range rec.Outcomes {
		po := &webhooksv1.FanoutOutcome{
			Reason:      fanoutReasons[o.Reason],
			Delivered:   o.Reason.Delivered(),
			Count:       int32(min(o.Count, math.MaxInt32)),
			EndpointIds: o.EndpointIDs,
			Description: fanoutDescription(o.Reason),
		}
		for i, note := range o.Notes {
			if note != "" && i < len(o.EndpointIDs) {
				if po.Details == nil {
					po.Details = make(map[string]string, len(o.Notes))
				}
				po.Details[o.EndpointIDs[i]] = note
			}
		}
		out.Outcomes = append(out.Outcomes, po)
	}
	slices.SortStableFunc(out.Outcomes, func(a, b *webhooksv1.FanoutOutcome) int {
		switch {
		case a.Delivered == b.Delivered:
			return 0
		case a.Delivered:
			return -1
		default:
			return 1
		}
	})
	return out
}

// fanoutReasons maps every recorded reason to the API's; one this build does
// not know is FANOUT_REASON_UNSPECIFIED.
var fanoutReasons = map[decision.Reason]webhooksv1.FanoutReason{
	decision.NotSubscribed:   webhooksv1.FanoutReason_FANOUT_REASON_NOT_SUBSCRIBED,
	decision.Disabled:        webhooksv1.FanoutReason_FANOUT_REASON_DISABLED,
	decision.NotTestTarget:   webhooksv1.FanoutReason_FANOUT_REASON_NOT_TEST_TARGET,
	decision.NotPublished:    webhooksv1.FanoutReason_FANOUT_REASON_NOT_PUBLISHED,
	decision.EmbedDenied:     webhooksv1.FanoutReason_FANOUT_REASON_EMBED_DENIED,
	decision.NoAccessService: webhooksv1.FanoutReason_FANOUT_REASON_NO_ACCESS_SERVICE,
	decision.AccessError:     webhooksv1.FanoutReason_FANOUT_REASON_ACCESS_ERROR,
	decision.Refused:         webhooksv1.FanoutReason_FANOUT_REASON_REFUSED,
	decision.Queued:          webhooksv1.FanoutReason_FANOUT_REASON_DELIVERY_QUEUED,
	decision.HandedOff:       webhooksv1.FanoutReason_FANOUT_REASON_DELIVERY_HANDED_OFF,
	decision.CoolingDown:     webhooksv1.FanoutReason_FANOUT_REASON_DELIVERY_COOLING_DOWN,
	decision.Paused:          webhooksv1.FanoutReason_FANOUT_REASON_DELIVERY_PAUSED,
	decision.Filtered:        webhooksv1.FanoutReason_FANOUT_REASON_FILTERED,
}

// fanoutDescription is FanoutOutcome.description.
func fanoutDescription(r decision.Reason) string {
	switch r {
	case decision.NotSubscribed:
		return "Not subscribed: none of the endpoint's event types matches."
	case decision.Disabled:
		return "The endpoint is disabled."
	case decision.NotTestTarget:
		return "A test event goes only to the endpoint it names."
	case decision.NotPublished:
		return "Scope: the note is not published and was not, and a standalone endpoint sees only the published slice."
	case decision.EmbedDenied:
		return "Scope: the access service said the embed's access code does not admit the event (revoked or expired code, deleted embed, or out of scope)."
	case decision.NoAccessService:
		return "Scope: the endpoint is bound to an embed and no access service is configured, so it admits nothing."
	case decision.AccessError:
		return "Scope: the access service refused the question, so the endpoint was denied."
	case decision.Refused:
		return "Scope: refused."
	case decision.Queued:
		return "Delivery queued."
	case decision.HandedOff:
		return "Delivery queued and started at once."
	case decision.CoolingDown:
		return "Delivery queued behind the failing endpoint's cool-down."
	case decision.Paused:
		return "Delivery queued for the end of the receiver's pause."
	case decision.Filtered:
		return "The endpoint's filter refused the event: see details for the condition that failed."
	default:
		return "Recorded by a newer dispatcher: " + r.String() + "."
	}
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
