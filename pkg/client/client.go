package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Retry says how Publish and PublishBatch retry a call the dispatcher could
// not take (gRPC Unavailable: it is restarting, unreachable, shedding load).
// Nothing else is retried: any other error is an answer. Retrying is safe
// because publishing is idempotent by event id; an event that the first call
// did store before its answer was lost comes back as
// PUBLISH_OUTCOME_DUPLICATE.
//
// The waits grow exponentially from InitialBackoff to MaxBackoff, each drawn
// at random from its upper half so that many publishers do not retry in step.
// The context's deadline bounds everything, waits included.
type Retry struct {
	// MaxAttempts bounds the calls made for one Publish, the first
	// included; 1 turns retrying off. Default 5.
	MaxAttempts int
	// InitialBackoff is the longest wait before the first retry. Default
	// 100 ms.
	InitialBackoff time.Duration
	// MaxBackoff caps each wait. Default 5 s.
	MaxBackoff time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = 5
	}
	if r.InitialBackoff <= 0 {
		r.InitialBackoff = 100 * time.Millisecond
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = 5 * time.Second
	}
	r.MaxBackoff = max(r.MaxBackoff, r.InitialBackoff)
	return r
}

// backoff is the wait before retry n (1 for the first retry).
func (r Retry) backoff(n int) time.Duration {
	d := r.InitialBackoff
	for i := 1; i < n && d < r.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// Option configures Dial or New.
type Option func(*options)

type options struct {
	token       string
	tls         *tls.Config
	insecure    bool
	retry       Retry
	dialOptions []grpc.DialOption
	catalog     *catalog.Catalog
	noCatalog   bool
	// strictTypes: a catalog was given (WithCatalog), so a type in no
	// catalog is a mistake, unless AllowUnknownTypes.
	strictTypes  bool
	allowUnknown bool
}

// WithToken sends token (the dispatcher's publisher token) as
// "authorization: Bearer <token>" on every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS sets the TLS configuration (e.g. RootCAs for a private CA). The
// default is TLS with the system's roots.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithInsecure dials without TLS, for a dispatcher on loopback or behind a
// mesh sidecar that provides the transport security. The token then
// travels in clear to wherever the address leads.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithRetry replaces the default retry policy (see Retry).
func WithRetry(r Retry) Option { return func(o *options) { o.retry = r } }

// WithCatalog checks events against c, the catalog the dispatcher runs with
// (catalog.Load of the same files as its -catalog), instead of the default
// one. Given the dispatcher's catalog, an event whose type is in none of it
// is refused before it is sent (InvalidArgument naming event.type, with the
// nearest type: "did you mean \"booking.created\"?"): the dispatcher would
// drop it, never delivered, so it is most often a misspelling.
// AllowUnknownTypes sends such events all the same. nil sends events checked
// only against the thin-event rules, leaving the schema to the dispatcher.
func WithCatalog(c *catalog.Catalog) Option {
	return func(o *options) { o.catalog = c; o.noCatalog = c == nil; o.strictTypes = c != nil }
}

// AllowUnknownTypes lets events of types in no catalog through the
// WithCatalog check, for an application that publishes types it has not
// declared on purpose to a dispatcher running with -unknown-types=accept,
// which drops them as Internal (by default a dispatcher refuses them, InvalidArgument).
// Declaring them "internal" in the catalog drops them either way and keeps
// the check.
func AllowUnknownTypes() Option { return func(o *options) { o.allowUnknown = true } }

// WithDialOptions adds gRPC dial options, e.g. a stats handler for tracing
// (otelgrpc) or a custom dialer.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// Client publishes events to the dispatcher's EventService. It is safe for
// concurrent use; make one per process and Close it at the end.
type Client struct {
	rpc   webhooksv1.EventServiceClient
	conn  *grpc.ClientConn // nil when New was given the connection
	token string
	retry Retry
	// catalog checks events before they are sent; nil: only the
	// thin-event rules.
	catalog *catalog.Catalog
	// refuseUnknown: a type in no catalog is refused before it is sent.
	refuseUnknown bool
}

// Dial returns a Client for the dispatcher's gRPC address target
// ("dispatcher:7070", "dns:///dispatcher.internal:7070"). It connects
// lazily: an unreachable dispatcher shows up as Unavailable on the first
// Publish, which is retried.
func Dial(target string, opts ...Option) (*Client, error) {
	o := apply(opts)
	conn, err := dial(target, o)
	if err != nil {
		return nil, err
	}
	c := newClient(conn, o)
	c.conn = conn
	return c, nil
}

// dial opens a lazy connection to target with o's transport and dial
// options.
func dial(target string, o *options) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if !o.insecure {
		cfg := o.tls
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, o.dialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", target, err)
	}
	return conn, nil
}

// New returns a Client over an existing connection, which the caller keeps
// and closes. Only WithToken and WithRetry apply.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	return newClient(conn, apply(opts))
}

func apply(opts []Option) *options {
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	o.retry = o.retry.withDefaults()
	if o.catalog == nil && !o.noCatalog {
		o.catalog = catalog.Default()
	}
	return o
}

func newClient(conn grpc.ClientConnInterface, o *options) *Client {
	return &Client{rpc: webhooksv1.NewEventServiceClient(conn), token: o.token, retry: o.retry, catalog: o.catalog,
		refuseUnknown: o.strictTypes && !o.allowUnknown}
}

// Close closes the connection Dial opened; a Client from New has none.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Publish stores one event in the dispatcher and returns once it is durably
// stored (or found already stored: PUBLISH_OUTCOME_DUPLICATE), retrying while
// the dispatcher is Unavailable. An invalid event is InvalidArgument naming
// the field ("event.subject", "event.data.op"); the error keeps the gRPC
// status (status.FromError). The event is checked against the catalog
// (WithCatalog) before it is sent, with the dispatcher's own rules, so most
// mistakes cost no call. A type in no catalog is refused here when
// WithCatalog gave the dispatcher's catalog, and by the dispatcher otherwise
// (InvalidArgument naming event.type, with a did-you-mean), unless the
// dispatcher runs with -unknown-types=accept: then it answers
// PUBLISH_OUTCOME_DROPPED_UNKNOWN (with did_you_mean) and the event goes
// nowhere.
func (c *Client) Publish(ctx context.Context, e *webhook.Event) (*webhooksv1.PublishResponse, error) {
	if err := c.check([]*webhook.Event{e}, func(int) string { return "event" }); err != nil {
		return nil, err
	}
	pe, err := toProto(e)
	if err != nil {
		return nil, err
	}
	req := &webhooksv1.PublishRequest{Event: pe, Weight: e.Weight}
	return call(ctx, c.token, c.retry, "publish "+e.ID, func(ctx context.Context) (*webhooksv1.PublishResponse, error) {
		return c.rpc.Publish(ctx, req)
	})
}

// PublishBatch stores up to 500 events, all or nothing, and returns one
// result per event in order; it retries as Publish does. When any event is
// invalid nothing is stored and the error is InvalidArgument whose
// google.rpc.BadRequest detail names each bad field ("events[3].subject").
// The events' Weight is the batch's: they must all have the same.
func (c *Client) PublishBatch(ctx context.Context, events []*webhook.Event) ([]*webhooksv1.PublishResponse, error) {
	if err := c.check(events, func(i int) string { return "events[" + strconv.Itoa(i) + "]" }); err != nil {
		return nil, err
	}
	req := &webhooksv1.PublishBatchRequest{Events: make([]*webhooksv1.Event, len(events))}
	for i, e := range events {
		if e != nil && events[0] != nil && e.Weight != events[0].Weight {
			return nil, fmt.Errorf("events[%d]: weight %g, not the batch's %g: a batch has one weight", i, e.Weight, events[0].Weight)
		}
		if e != nil {
			req.Weight = e.Weight
		}
		pe, err := toProto(e)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		req.Events[i] = pe
	}
	resp, err := call(ctx, c.token, c.retry, fmt.Sprintf("publish batch of %d", len(events)), func(ctx context.Context) (*webhooksv1.PublishBatchResponse, error) {
		return c.rpc.PublishBatch(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetResults(), nil
}

// call makes one RPC with token, retrying it as retry says while it fails
// with Unavailable.
func call[Resp any](ctx context.Context, token string, retry Retry, what string, rpc func(context.Context) (Resp, error)) (Resp, error) {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var zero Resp
	for attempt := 1; ; attempt++ {
		resp, err := rpc(ctx)
		if err == nil {
			return resp, nil
		}
		if status.Code(err) != codes.Unavailable || attempt >= retry.MaxAttempts {
			if attempt > 1 {
				return zero, fmt.Errorf("client: %s (after %d attempts): %w", what, attempt, err)
			}
			return zero, fmt.Errorf("client: %s: %w", what, err)
		}
		timer := time.NewTimer(retry.backoff(attempt))
		select {
		case <-ctx.Done():
			timer.Stop()
			return zero, fmt.Errorf("client: %s: %w (last error: %w)", what, ctx.Err(), err)
		case <-timer.C:
		}
	}
}

// check applies the dispatcher's rules to events before they are sent and
// answers as the dispatcher would: InvalidArgument whose message names the
// first bad field and whose google.rpc.BadRequest detail names each (field
// names the event at an index, "event" or "events[3]"). A nil event, or data
// that is not JSON at all, is left to toProto's plainer errors.
func (c *Client) check(events []*webhook.Event, field func(int) string) error {
	if c.catalog == nil {
		return nil
	}
	now := time.Now()
	var violations []*errdetails.BadRequest_FieldViolation
	for i, e := range events {
		if e == nil || (len(e.Data) > 0 && !json.Valid(e.Data)) {
			continue
		}
		ev := *e
		if len(ev.Data) == 0 {
			ev.Data = json.RawMessage("{}") // what an unset Struct is
		}
		err := c.catalog.Validate(&ev, now)
		if err == nil && c.refuseUnknown {
			err = c.catalog.RequireKnown(ev.Type)
		}
		for _, fe := range webhook.Fields(err) {
			violations = append(violations, &errdetails.BadRequest_FieldViolation{Field: field(i) + "." + fe.Field, Description: fe.Reason})
		}
	}
	if len(violations) == 0 {
		return nil
	}
	msg := "invalid " + violations[0].GetField() + ": " + violations[0].GetDescription()
	if n := len(violations) - 1; n > 0 {
		msg += " (and " + strconv.Itoa(n) + " more invalid fields)"
	}
	st, err := status.New(codes.InvalidArgument, msg).WithDetails(&errdetails.BadRequest{FieldViolations: violations})
	if err != nil {
		return fmt.Errorf("client: %w", status.Error(codes.InvalidArgument, msg))
	}
	return fmt.Errorf("client: %w", st.Err())
}

// errNilEvent is returned for a nil event.
var errNilEvent = errors.New("client: event is nil")

// toProto converts an event to the wire; data must be a JSON object (or
// empty, meaning {}).
func toProto(e *webhook.Event) (*webhooksv1.Event, error) {
	if e == nil {
		return nil, errNilEvent
	}
	pe := &webhooksv1.Event{Id: e.ID, OwnerId: e.OwnerID, Type: e.Type, Subject: e.Subject}
	if !e.OccurredAt.IsZero() {
		pe.OccurredAt = timestamppb.New(e.OccurredAt)
	}
	if len(e.Data) > 0 {
		if !json.Valid(e.Data) {
			return nil, fmt.Errorf("client: event %s: data is not valid JSON", e.ID)
		}
		s := &structpb.Struct{}
		if err := protojson.Unmarshal(e.Data, s); err != nil {
			return nil, fmt.Errorf("client: event %s: data must be a JSON object: %w", e.ID, err)
		}
		pe.Data = s
	}
	return pe, nil
}
