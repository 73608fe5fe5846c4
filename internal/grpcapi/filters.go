package grpcapi

import (
	"context"
	"encoding/json"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// filterJSON is a request's filter as the endpoint service reads it: JSON
// text, nil when unset.
func filterJSON(st *structpb.Struct) ([]byte, error) {
	if st == nil {
		return nil, nil
	}
	b, err := json.Marshal(st.AsMap())
	if err != nil {
		// A Struct holds only what JSON can, but for numbers that are not
		// finite.
		return nil, invalidArgument([]*errdetails.BadRequest_FieldViolation{{
			Field: endpoint.FieldFilter, Description: "holds a number that JSON cannot write (NaN or infinite)",
		}})
	}
	return b, nil
}

// filterProto is a stored filter (canonical JSON; nil for none) as a
// Struct, nil for none.
func filterProto(text []byte) *structpb.Struct {
	if len(text) == 0 {
		return nil
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(text, st); err != nil {
		// Stored filters are checked JSON objects; one that is not shows
		// as none rather than fail the endpoint's reading.
		return nil
	}
	return st
}

// TestFilter implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) TestFilter(ctx context.Context, req *webhooksv1.TestFilterRequest) (*webhooksv1.TestFilterResponse, error) {
	text, err := filterJSON(req.GetFilter())
	if err != nil {
		return nil, err
	}
	r := endpoint.TestFilterRequest{
		OwnerID: req.GetOwnerId(), Filter: text, EndpointID: req.GetEndpointId(),
		EventTypes: req.GetEventTypes(), EventID: req.GetEventId(),
	}
	if sample := req.GetSample(); sample != nil {
		r.Sample = &webhook.Event{Type: sample.GetType(), Subject: sample.GetSubject()}
		if d := sample.GetData(); d != nil {
			if r.Sample.Data, err = protojson.Marshal(d); err != nil {
				return nil, invalidArgument([]*errdetails.BadRequest_FieldViolation{{
					Field: endpoint.FieldSample + ".data", Description: "cannot be written as JSON",
				}})
			}
		}
	}
	got, err := s.svc.TestFilter(ctx, r)
	if err != nil {
		return nil, s.fail(ctx, "test_filter", req.GetOwnerId(), err)
	}
	pe, err := eventToProto(got.Event)
	if err != nil {
		return nil, unexpected(ctx, s.logger, "test_filter", req.GetOwnerId(), codes.Internal, err)
	}
	out := &webhooksv1.TestFilterResponse{
		Matched: got.Matched, Explanation: got.Explanation, Event: pe, Applies: got.Applies,
		Filter: filterProto(got.Filter),
	}
	if out.Filter == nil {
		out.Filter = &structpb.Struct{}
	}
	return out, nil
}
