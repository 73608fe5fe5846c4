package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// Admin manages an owner's endpoints through the dispatcher's
// EndpointService, as an admin UI's backend does; it needs the admin token
// (WithToken). It is safe for concurrent use; make one per process and Close
// it at the end.
//
// Every call retries while the dispatcher is Unavailable (Retry), and only
// then. CreateEndpoint sends a request_id (a new UUID unless the request has
// one), so a retry after a lost answer returns the endpoint the first call
// made instead of a second one. RotateSecret and SendTest have no such key:
// a retry after a lost answer rotates again (the secret returned is the
// current one, the one before it keeps signing for the grace period) or
// sends a second test event.
//
// Errors are *Error, which errors.Is matches against ErrNotFound,
// ErrInvalidArgument and the other sentinels by their gRPC code, and which
// keeps the gRPC status (status.FromError).
type Admin struct {
	rpc   webhooksv1.EndpointServiceClient
	conn  *grpc.ClientConn // nil when NewAdmin was given the connection
	token string
	retry Retry
}

// DialAdmin returns an Admin for the dispatcher's gRPC address target; the
// options are Dial's.
func DialAdmin(target string, opts ...Option) (*Admin, error) {
	o := apply(opts)
	conn, err := dial(target, o)
	if err != nil {
		return nil, err
	}
	a := newAdmin(conn, o)
	a.conn = conn
	return a, nil
}

// NewAdmin returns an Admin over an existing connection, which the caller
// keeps and closes. Only WithToken and WithRetry apply.
func NewAdmin(conn grpc.ClientConnInterface, opts ...Option) *Admin {
	return newAdmin(conn, apply(opts))
}

func newAdmin(conn grpc.ClientConnInterface, o *options) *Admin {
	return &Admin{rpc: webhooksv1.NewEndpointServiceClient(conn), token: o.token, retry: o.retry}
}

// Close closes the connection DialAdmin opened; an Admin from NewAdmin has
// none.
func (a *Admin) Close() error {
	if a.conn == nil {
		return nil
	}
	return a.conn.Close()
}

// CreateEndpoint creates an endpoint and returns it with its signing secret,
// shown this once. An empty req.RequestId is set to a new UUID (req is not
// modified), which makes retrying safe.
func (a *Admin) CreateEndpoint(ctx context.Context, req *webhooksv1.CreateEndpointRequest) (*webhooksv1.CreateEndpointResponse, error) {
	if req.GetRequestId() == "" {
		req = proto.CloneOf(req)
		req.RequestId = uuid.NewString()
	}
	return adminCall(ctx, a, "create endpoint", func(ctx context.Context) (*webhooksv1.CreateEndpointResponse, error) {
		return a.rpc.CreateEndpoint(ctx, req)
	})
}

// GetEndpoint returns one of the owner's endpoints.
func (a *Admin) GetEndpoint(ctx context.Context, ownerID, endpointID string) (*webhooksv1.Endpoint, error) {
	resp, err := adminCall(ctx, a, "get endpoint", func(ctx context.Context) (*webhooksv1.GetEndpointResponse, error) {
		return a.rpc.GetEndpoint(ctx, &webhooksv1.GetEndpointRequest{OwnerId: ownerID, EndpointId: endpointID})
	})
	return resp.GetEndpoint(), err
}

// UpdateEndpoint changes the fields req.UpdateMask names and returns the
// endpoint as it is now. Repeating it is harmless.
func (a *Admin) UpdateEndpoint(ctx context.Context, req *webhooksv1.UpdateEndpointRequest) (*webhooksv1.Endpoint, error) {
	resp, err := adminCall(ctx, a, "update endpoint", func(ctx context.Context) (*webhooksv1.UpdateEndpointResponse, error) {
		return a.rpc.UpdateEndpoint(ctx, req)
	})
	return resp.GetEndpoint(), err
}

// OwnerSettings returns the owner's settings: its weight in the fairness
// across owners (1 until set).
func (a *Admin) OwnerSettings(ctx context.Context, ownerID string) (*webhooksv1.OwnerSettings, error) {
	resp, err := adminCall(ctx, a, "get owner settings", func(ctx context.Context) (*webhooksv1.GetOwnerSettingsResponse, error) {
		return a.rpc.GetOwnerSettings(ctx, &webhooksv1.GetOwnerSettingsRequest{OwnerId: ownerID})
	})
	return resp.GetSettings(), err
}

// SetOwnerWeight sets the owner's weight, 0.01 to 100 (e.g. for a paying
// tier), and returns its settings as they are now. Repeating it is harmless.
func (a *Admin) SetOwnerWeight(ctx context.Context, ownerID string, weight float64) (*webhooksv1.OwnerSettings, error) {
	resp, err := adminCall(ctx, a, "update owner settings", func(ctx context.Context) (*webhooksv1.UpdateOwnerSettingsResponse, error) {
		return a.rpc.UpdateOwnerSettings(ctx, &webhooksv1.UpdateOwnerSettingsRequest{OwnerId: ownerID, Weight: weight})
	})
	return resp.GetSettings(), err
}

// DeleteEndpoint deletes one of the owner's endpoints. A retry that finds it
// already gone is ErrNotFound.
func (a *Admin) DeleteEndpoint(ctx context.Context, ownerID, endpointID string) error {
	_, err := adminCall(ctx, a, "delete endpoint", func(ctx context.Context) (*webhooksv1.DeleteEndpointResponse, error) {
		return a.rpc.DeleteEndpoint(ctx, &webhooksv1.DeleteEndpointRequest{OwnerId: ownerID, EndpointId: endpointID})
	})
	return err
}

// RotateSecret issues a new secret (or key pair), shown this once; the
// previous one keeps signing for req.GracePeriod (24 h when unset).
func (a *Admin) RotateSecret(ctx context.Context, req *webhooksv1.RotateSecretRequest) (*webhooksv1.RotateSecretResponse, error) {
	return adminCall(ctx, a, "rotate secret", func(ctx context.Context) (*webhooksv1.RotateSecretResponse, error) {
		return a.rpc.RotateSecret(ctx, req)
	})
}

// SendTest publishes one webhook.test event to this endpoint only and
// returns its event id.
func (a *Admin) SendTest(ctx context.Context, ownerID, endpointID string) (string, error) {
	resp, err := adminCall(ctx, a, "send test", func(ctx context.Context) (*webhooksv1.SendTestResponse, error) {
		return a.rpc.SendTest(ctx, &webhooksv1.SendTestRequest{OwnerId: ownerID, EndpointId: endpointID})
	})
	return resp.GetEventId(), err
}

// PortalLink returns a one-time link into the portal for req.OwnerId, the
// web pages where that owner sees (access READ) or also changes (MANAGE) its
// own endpoints and deliveries: the answer's Url, to show the owner's user in
// a new tab or a frame of one of req.AllowedOrigins, and its ExpiresAt (the
// link's and the session's end, req.Ttl from now: 1 h when unset, at most
// 24 h). The link is a credential: hand it to its one user, never log it. A
// dispatcher without a portal answers codes.Unimplemented (status.Code of
// the error); bad input is ErrInvalidArgument naming the field.
func (a *Admin) PortalLink(ctx context.Context, req *webhooksv1.CreatePortalSessionRequest) (*webhooksv1.CreatePortalSessionResponse, error) {
	return adminCall(ctx, a, "portal link", func(ctx context.Context) (*webhooksv1.CreatePortalSessionResponse, error) {
		return a.rpc.CreatePortalSession(ctx, req)
	})
}

// GetEvent returns one of the owner's events with its deliveries to every
// endpoint and the fanout's decision for each of the owner's endpoints
// (Fanout: where the event went, and why not).
func (a *Admin) GetEvent(ctx context.Context, ownerID, eventID string) (*webhooksv1.GetEventResponse, error) {
	return adminCall(ctx, a, "get event", func(ctx context.Context) (*webhooksv1.GetEventResponse, error) {
		return a.rpc.GetEvent(ctx, &webhooksv1.GetEventRequest{OwnerId: ownerID, EventId: eventID})
	})
}

// TestFilter evaluates a filter (req.Filter, or the filter of
// req.EndpointId) against one of the owner's stored events or a sample
// (req.Target), delivering nothing: whether it lets the event through and,
// if not, which condition refused it with what value. A filter that would be
// refused on CreateEndpoint is ErrInvalidArgument here too, its Violations
// naming the spot ("filter.data.statuss").
func (a *Admin) TestFilter(ctx context.Context, req *webhooksv1.TestFilterRequest) (*webhooksv1.TestFilterResponse, error) {
	return adminCall(ctx, a, "test filter", func(ctx context.Context) (*webhooksv1.TestFilterResponse, error) {
		return a.rpc.TestFilter(ctx, req)
	})
}

// Filter reads an endpoint filter from its JSON text, for
// CreateEndpointRequest.Filter, UpdateEndpointRequest.Filter and
// TestFilterRequest.Filter:
//
//	f, err := client.Filter(`{"data.status": {"$in": ["published"]}}`)
//
// It checks only that text is a JSON object; the dispatcher checks the
// rest (operators, shapes, fields against the catalog) and names the spot
// of a mistake.
func Filter(text string) (*structpb.Struct, error) {
	st := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(text), st); err != nil {
		return nil, fmt.Errorf("filter: must be a JSON object: %w", err)
	}
	return st, nil
}

// GetDelivery returns one delivery of any of the owner's endpoints (an id
// of Deliveries, or of GetEvent's deliveries). Its Attempt and MaxAttempts
// count the retry schedule's attempts ("4 of 18"); Probes counts the
// recovery probes it carried besides.
func (a *Admin) GetDelivery(ctx context.Context, ownerID string, deliveryID int64) (*webhooksv1.Delivery, error) {
	resp, err := adminCall(ctx, a, "get delivery", func(ctx context.Context) (*webhooksv1.GetDeliveryResponse, error) {
		return a.rpc.GetDelivery(ctx, &webhooksv1.GetDeliveryRequest{OwnerId: ownerID, DeliveryId: deliveryID})
	})
	return resp.GetDelivery(), err
}

// RetryDelivery runs one waiting (SCHEDULED) delivery now rather than at its
// scheduled time, and returns it as it is then (PENDING). A delivery in
// another state is ErrFailedPrecondition: Redeliver re-queues finished ones.
func (a *Admin) RetryDelivery(ctx context.Context, ownerID string, deliveryID int64) (*webhooksv1.Delivery, error) {
	resp, err := adminCall(ctx, a, "retry delivery", func(ctx context.Context) (*webhooksv1.RetryDeliveryResponse, error) {
		return a.rpc.RetryDelivery(ctx, &webhooksv1.RetryDeliveryRequest{OwnerId: ownerID, DeliveryId: deliveryID})
	})
	return resp.GetDelivery(), err
}

// ResendDelivery sends one DELIVERED delivery to its endpoint again (the
// same event, so the same webhook-id), or runs a SCHEDULED one now as
// RetryDelivery does, and returns it as it is then. One already PENDING or
// DELIVERING (a resend a moment ago) is returned as it is, not queued a
// second time. FAILED and CANCELLED are ErrFailedPrecondition: Redeliver
// re-queues those.
func (a *Admin) ResendDelivery(ctx context.Context, ownerID string, deliveryID int64) (*webhooksv1.Delivery, error) {
	resp, err := adminCall(ctx, a, "resend delivery", func(ctx context.Context) (*webhooksv1.RetryDeliveryResponse, error) {
		return a.rpc.RetryDelivery(ctx, &webhooksv1.RetryDeliveryRequest{OwnerId: ownerID, DeliveryId: deliveryID, Resend: true})
	})
	return resp.GetDelivery(), err
}

// Redeliver re-queues one batch (req.Limit, at most 1000) of an endpoint's
// deliveries that ended FAILED or CANCELLED (since req.Since, when set). Pass
// the response's NextPageToken as req.PageToken to continue, or use Recover,
// which does the whole recovery.
func (a *Admin) Redeliver(ctx context.Context, req *webhooksv1.RedeliverRequest) (*webhooksv1.RedeliverResponse, error) {
	return adminCall(ctx, a, "redeliver", func(ctx context.Context) (*webhooksv1.RedeliverResponse, error) {
		return a.rpc.Redeliver(ctx, req)
	})
}

// Recover is the recovery after a receiver was down or broken, once it is
// fixed: it clears the endpoint's failure state (re-enabling it if the
// dispatcher disabled it, which also releases the deliveries held while it
// failed), then re-queues every delivery that ended FAILED or CANCELLED
// at or after since (the zero time: whenever), batch after batch. It returns how
// many it re-queued. It is idempotent: run again with the same since, it
// re-queues none of those again (see RedeliverRequest.since).
func (a *Admin) Recover(ctx context.Context, ownerID, endpointID string, since time.Time) (int, error) {
	ep, err := a.GetEndpoint(ctx, ownerID, endpointID)
	if err != nil {
		return 0, err
	}
	if !ep.GetEnabled() || ep.GetFailingSince() != nil {
		if _, err := a.UpdateEndpoint(ctx, &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerID, EndpointId: endpointID, Enabled: true,
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enabled"}},
		}); err != nil {
			return 0, err
		}
	}
	req := &webhooksv1.RedeliverRequest{OwnerId: ownerID, EndpointId: endpointID}
	if !since.IsZero() {
		req.Since = timestamppb.New(since)
	}
	total := 0
	for {
		resp, err := a.Redeliver(ctx, req)
		if err != nil {
			return total, err
		}
		total += int(resp.GetCount())
		if resp.GetNextPageToken() == "" {
			return total, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// Attempts iterates over one delivery's attempts, newest first, page by page
// as Endpoints does: every request sent, with its outcome, status, timing and
// the start of the answer's body. Attempt is the attempt's place in the
// retry schedule; Probe marks a recovery probe, which spends none.
func (a *Admin) Attempts(ctx context.Context, req *webhooksv1.ListAttemptsRequest) iter.Seq2[*webhooksv1.Attempt, error] {
	return pages(ctx, a, "list attempts", req, func(r *webhooksv1.ListAttemptsRequest, token string) {
		r.PageToken = token
	}, func(ctx context.Context, r *webhooksv1.ListAttemptsRequest) ([]*webhooksv1.Attempt, string, error) {
		resp, err := a.rpc.ListAttempts(ctx, r)
		return resp.GetAttempts(), resp.GetNextPageToken(), err
	})
}

// maxStatsEndpoints is how many endpoints one GetEndpointStats call takes.
const maxStatsEndpoints = 100

// Stats returns the attempt statistics (last hour, day and week) of the
// owner's endpoints, in the order given, asking for up to 100 per call.
func (a *Admin) Stats(ctx context.Context, ownerID string, endpointIDs ...string) ([]*webhooksv1.EndpointStats, error) {
	out := make([]*webhooksv1.EndpointStats, 0, len(endpointIDs))
	for chunk := range slices.Chunk(endpointIDs, maxStatsEndpoints) {
		resp, err := adminCall(ctx, a, "get endpoint stats", func(ctx context.Context) (*webhooksv1.GetEndpointStatsResponse, error) {
			return a.rpc.GetEndpointStats(ctx, &webhooksv1.GetEndpointStatsRequest{OwnerId: ownerID, EndpointIds: chunk})
		})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetStats()...)
	}
	return out, nil
}

// EventTypes lists the dispatcher's webhook event types with their data
// schemas and examples: the catalog as the dispatcher serves it
// (ListEventTypes).
func (a *Admin) EventTypes(ctx context.Context) ([]*webhooksv1.EventType, error) {
	resp, err := adminCall(ctx, a, "list event types", func(ctx context.Context) (*webhooksv1.ListEventTypesResponse, error) {
		return a.rpc.ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
	})
	return resp.GetEventTypes(), err
}

// Endpoints iterates over the owner's endpoints req selects (its labels),
// fetching pages of req.PageSize (the server's default when 0) as the loop
// goes. An error ends the iteration: it is yielded once, with a nil
// endpoint.
func (a *Admin) Endpoints(ctx context.Context, req *webhooksv1.ListEndpointsRequest) iter.Seq2[*webhooksv1.Endpoint, error] {
	return pages(ctx, a, "list endpoints", req, func(r *webhooksv1.ListEndpointsRequest, token string) {
		r.PageToken = token
	}, func(ctx context.Context, r *webhooksv1.ListEndpointsRequest) ([]*webhooksv1.Endpoint, string, error) {
		resp, err := a.rpc.ListEndpoints(ctx, r)
		return resp.GetEndpoints(), resp.GetNextPageToken(), err
	})
}

// Deliveries iterates over one endpoint's deliveries req selects, newest
// first, page by page as Endpoints does.
func (a *Admin) Deliveries(ctx context.Context, req *webhooksv1.ListDeliveriesRequest) iter.Seq2[*webhooksv1.Delivery, error] {
	return pages(ctx, a, "list deliveries", req, func(r *webhooksv1.ListDeliveriesRequest, token string) {
		r.PageToken = token
	}, func(ctx context.Context, r *webhooksv1.ListDeliveriesRequest) ([]*webhooksv1.Delivery, string, error) {
		resp, err := a.rpc.ListDeliveries(ctx, r)
		return resp.GetDeliveries(), resp.GetNextPageToken(), err
	})
}

// Events iterates over the owner's events req selects, newest first, page by
// page as Endpoints does.
func (a *Admin) Events(ctx context.Context, req *webhooksv1.ListEventsRequest) iter.Seq2[*webhooksv1.Event, error] {
	return pages(ctx, a, "list events", req, func(r *webhooksv1.ListEventsRequest, token string) {
		r.PageToken = token
	}, func(ctx context.Context, r *webhooksv1.ListEventsRequest) ([]*webhooksv1.Event, string, error) {
		resp, err := a.rpc.ListEvents(ctx, r)
		return resp.GetEvents(), resp.GetNextPageToken(), err
	})
}

// pages runs a paged list: list fetches one page of the request (a copy of
// req with setToken applied), and the items are yielded until the last page
// or an error.
func pages[Req proto.Message, Item any](ctx context.Context, a *Admin, what string, req Req,
	setToken func(Req, string), list func(context.Context, Req) ([]Item, string, error),
) iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		var zero Item
		r := proto.CloneOf(req)
		token := ""
		for {
			setToken(r, token)
			type page struct {
				items []Item
				next  string
			}
			p, err := adminCall(ctx, a, what, func(ctx context.Context) (page, error) {
				items, next, err := list(ctx, r)
				return page{items, next}, err
			})
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range p.items {
				if !yield(it, nil) {
					return
				}
			}
			if p.next == "" {
				return
			}
			token = p.next
		}
	}
}

// adminCall is call, with the error typed.
func adminCall[Resp any](ctx context.Context, a *Admin, what string, rpc func(context.Context) (Resp, error)) (Resp, error) {
	resp, err := call(ctx, a.token, a.retry, what, rpc)
	if err != nil {
		var zero Resp
		return zero, typed(err)
	}
	return resp, nil
}

// Sentinels that errors.Is matches an *Error against, by its gRPC code.
var (
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrUnavailable        = errors.New("unavailable")
)

var sentinels = map[codes.Code]error{
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.NotFound:           ErrNotFound,
	codes.AlreadyExists:      ErrAlreadyExists,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.Unauthenticated:    ErrUnauthenticated,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.Unavailable:        ErrUnavailable,
}

// FieldViolation is one bad field of a request ("url", "event_types[2]",
// "labels[\"env\"]") and what is wrong with it.
type FieldViolation struct {
	Field       string
	Description string
}

// Error is the dispatcher's answer to a call that failed: its gRPC code, its
// message and, for InvalidArgument, every bad field.
type Error struct {
	Code       codes.Code
	Message    string
	Violations []FieldViolation
	err        error
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the error the call returned, which keeps the gRPC status.
func (e *Error) Unwrap() error { return e.err }

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Code]
	return ok && s == target
}

// typed wraps err in an *Error when it carries a gRPC status.
func typed(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	out := &Error{Code: st.Code(), Message: st.Message(), err: err}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out.Violations = append(out.Violations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return out
}
