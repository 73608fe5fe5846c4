package grpcapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// ListEventTypes implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) ListEventTypes(ctx context.Context, _ *webhooksv1.ListEventTypesRequest) (*webhooksv1.ListEventTypesResponse, error) {
	resp, err := s.listEventTypes()
	if err != nil {
		return nil, unexpected(ctx, s.logger, "ListEventTypes", "", codes.Internal, err)
	}
	return resp, nil
}

// WithCatalog makes ListEventTypes list the running catalog r; without it,
// the default catalog.
func WithCatalog(r *event.Running) EndpointServerOption {
	return func(s *endpointServer) { s.catalog = r }
}

// listEventTypes is ListEventTypes' answer for the running catalog, built
// once per catalog: gRPC only reads the message it is given, so every call
// may share it.
func (s *endpointServer) listEventTypes() (*webhooksv1.ListEventTypesResponse, error) {
	c := s.catalog.Catalog()
	if cached := s.eventTypes.Load(); cached != nil && cached.catalog == c {
		return cached.resp, nil
	}
	resp, err := buildEventTypes(c)
	if err != nil {
		return nil, err
	}
	s.eventTypes.Store(&eventTypesAnswer{catalog: c, resp: resp})
	return resp, nil
}

type eventTypesAnswer struct {
	catalog *catalog.Catalog
	resp    *webhooksv1.ListEventTypesResponse
}

func buildEventTypes(c *catalog.Catalog) (*webhooksv1.ListEventTypesResponse, error) {
	resp := &webhooksv1.ListEventTypesResponse{}
	for _, t := range c.TypesOf(catalog.ExposureWebhook) {
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
