package grpcapi

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// ListEventTypes implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) ListEventTypes(ctx context.Context, _ *webhooksv1.ListEventTypesRequest) (*webhooksv1.ListEventTypesResponse, error) {
	resp, err := eventTypes()
	if err != nil {
		return nil, unexpected(ctx, s.logger, "ListEventTypes", "", codes.Internal, err)
	}
	return resp, nil
}

// eventTypes is ListEventTypes' answer for the process's catalog, built
// once per catalog: gRPC only reads the message it is given, so every call
// may share it.
func eventTypes() (*webhooksv1.ListEventTypesResponse, error) {
	c := event.Catalog()
	if cached := eventTypesCache.Load(); cached != nil && cached.catalog == c {
		return cached.resp, nil
	}
	resp, err := buildEventTypes()
	if err != nil {
		return nil, err
	}
	eventTypesCache.Store(&eventTypesAnswer{catalog: c, resp: resp})
	return resp, nil
}

type eventTypesAnswer struct {
	catalog *catalog.Catalog
	resp    *webhooksv1.ListEventTypesResponse
}

var eventTypesCache atomic.Pointer[eventTypesAnswer]

func buildEventTypes() (*webhooksv1.ListEventTypesResponse, error) {
	resp := &webhooksv1.ListEventTypesResponse{}
	for _, t := range event.WebhookTypes() {
		schema, example := &structpb.Struct{}, &structpb.Struct{}
		if err := protojson.Unmarshal(t.Schema, schema); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", t.Name, err)
		}
		if err := protojson.Unmarshal(t.Example, example); err != nil {
			return nil, fmt.Errorf("example of %s: %w", t.Name, err)
		}
		resp.EventTypes = append(resp.EventTypes, &webhooksv1.EventType{
			Name: t.Name, Description: t.Description, DataSchema: schema, DataExample: example,
		})
	}
	return resp, nil
}
