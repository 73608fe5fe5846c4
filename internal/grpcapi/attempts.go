package grpcapi

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// ListAttempts implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) ListAttempts(ctx context.Context, req *webhooksv1.ListAttemptsRequest) (*webhooksv1.ListAttemptsResponse, error) {
	page, err := s.svc.ListAttempts(ctx, req.GetOwnerId(), req.GetDeliveryId(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, s.fail(ctx, "list_attempts", req.GetOwnerId(), err)
	}
	resp := &webhooksv1.ListAttemptsResponse{NextPageToken: page.NextPageToken}
	for i := range page.Items {
		resp.Attempts = append(resp.Attempts, attemptProto(&page.Items[i]))
	}
	return resp, nil
}

// GetEndpointStats implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) GetEndpointStats(ctx context.Context, req *webhooksv1.GetEndpointStatsRequest) (*webhooksv1.GetEndpointStatsResponse, error) {
	stats, err := s.svc.EndpointStats(ctx, req.GetOwnerId(), req.GetEndpointIds())
	if err != nil {
		return nil, s.fail(ctx, "get_endpoint_stats", req.GetOwnerId(), err)
	}
	resp := &webhooksv1.GetEndpointStatsResponse{Stats: make([]*webhooksv1.EndpointStats, len(stats))}
	for i := range stats {
		st := &stats[i]
		resp.Stats[i] = &webhooksv1.EndpointStats{
			EndpointId: st.EndpointID.String(),
			LastHour:   attemptStatsProto(&st.Windows[attempt.WindowHour]),
			LastDay:    attemptStatsProto(&st.Windows[attempt.WindowDay]),
			LastWeek:   attemptStatsProto(&st.Windows[attempt.WindowWeek]),
		}
	}
	return resp, nil
}

var outcomeProto = map[attempt.Outcome]webhooksv1.AttemptOutcome{
	attempt.OutcomeSuccess:    webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCESS,
	attempt.OutcomeHTTP4xx:    webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_HTTP_4XX,
	attempt.OutcomeHTTP5xx:    webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_HTTP_5XX,
	attempt.OutcomeHTTPOther:  webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_HTTP_OTHER,
	attempt.OutcomeTimeout:    webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_TIMEOUT,
	attempt.OutcomeConnection: webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_CONNECTION,
	attempt.OutcomeBlocked:    webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_BLOCKED,
	attempt.OutcomeRetryAfter: webhooksv1.AttemptOutcome_ATTEMPT_OUTCOME_RETRY_AFTER,
}

func attemptProto(a *attempt.Attempt) *webhooksv1.Attempt {
	p := &webhooksv1.Attempt{
		// River's number counts probes too: the schedule's does not.
		Id: a.ID, DeliveryId: a.DeliveryID, Attempt: int32(max(a.Number-a.Probes, 0)), Probe: a.Probe, Probes: int32(a.Probes),
		StartedAt: timestamppb.New(a.StartedAt), Duration: durationpb.New(a.Duration),
		Outcome: outcomeProto[a.Outcome], HttpStatus: int32(a.Status), ResponseBody: a.Body, Error: a.Error,
	}
	if a.SnoozedUntil != nil {
		p.SnoozedUntil = timestamppb.New(*a.SnoozedUntil)
		p.SnoozeReason = webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_RETRY_AFTER
		if a.SnoozeReason == job.SnoozeThrottled {
			p.SnoozeReason = webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_ENDPOINT_PAUSED
		}
	}
	return p
}

func attemptStatsProto(c *attempt.Counts) *webhooksv1.AttemptStats {
	p := &webhooksv1.AttemptStats{
		Attempts: c.Attempts, Successes: c.Successes, Failures: c.Failures(),
		Http_4Xx: c.HTTP4xx, Http_5Xx: c.HTTP5xx, HttpOther: c.HTTPOther, Timeouts: c.Timeouts,
		ConnectionErrors: c.Connection, Blocked: c.Blocked, RetryAfter: c.RetryAfter, Filtered: c.Filtered,
	}
	if c.Attempts > c.Blocked {
		p.LatencyP50, p.LatencyP95 = durationpb.New(c.Percentile(0.5)), durationpb.New(c.Percentile(0.95))
	}
	return p
}
