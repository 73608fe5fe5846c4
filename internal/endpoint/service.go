package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/suggest"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Service defaults and bounds.
const (
	DefaultMaxEndpointsPerOwner = 100
	DefaultGracePeriod          = 24 * time.Hour
	MaxGracePeriod              = 7 * 24 * time.Hour
	DefaultPageSize             = 50
	MaxPageSize                 = 200
)

// ErrUnavailable: the operation needs a part this Service was built without
// (a publisher for SendTest, a River client for Redeliver).
var ErrUnavailable = errors.New("operation not available on this server")

// Publisher stores an event and schedules its fanout, as ingest does. SendTest
// publishes through it; the composition root adapts the ingest store to it,
// so this package does not depend on ingest.
type Publisher interface {
	Publish(ctx context.Context, e *webhook.Event) error
}

// ServiceConfig configures the endpoint service.
type ServiceConfig struct {
	// AllowCIDRs are ranges a literal-IP endpoint URL may point into although
	// the egress policy refuses them: loopback receivers for tests and local
	// development. It must match the egress client's AllowCIDRs. Empty in
	// production.
	AllowCIDRs []netip.Prefix
	// JobLinkTemplate builds a delivery's link: "{job_id}" is replaced by the
	// River job id, e.g. "http://localhost:9090/riverui/jobs/{job_id}".
	// Empty: no links.
	JobLinkTemplate string
	// MaxEndpointsPerOwner caps an owner's endpoints. 0 means
	// DefaultMaxEndpointsPerOwner; negative means no cap.
	MaxEndpointsPerOwner int
	// RequireHTTPS refuses http:// endpoint URLs.
	RequireHTTPS bool
	// Catalog is the event catalog filters are checked against (the one
	// the fanout delivers with); nil means catalog.Default().
	Catalog *event.Running
}

// Service is the endpoint operations with their rules: every request is
// validated here (a *ValidationError names each bad field, with the API's
// field names), scoped to its owner, and carried out on the Store. It knows
// nothing of the transport; internal/grpcapi serves it as
// webhooks.v1.EndpointService.
type Service struct {
	cfg       ServiceConfig
	logger    *slog.Logger
	publisher Publisher
	river     *river.Client[pgx.Tx]
	store     *Store
	val       *validator
}

// NewService returns the endpoint operations. riverClient (an insert-only
// client is enough) is used by Redeliver, pub by SendTest; either may be nil,
// and the operation then fails with ErrUnavailable. pool and kr are required.
func NewService(cfg ServiceConfig, pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], kr *seal.Keyring, pub Publisher, logger *slog.Logger) *Service {
	if pool == nil {
		panic("endpoint.NewService: a database pool is required")
	}
	if kr == nil {
		panic(errNoKeyring.Error())
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxEndpointsPerOwner == 0 {
		cfg.MaxEndpointsPerOwner = DefaultMaxEndpointsPerOwner
	}
	return &Service{
		cfg:       cfg,
		logger:    logger,
		publisher: pub,
		river:     riverClient,
		store:     NewStore(pool, kr),
		val: &validator{
			policy:       egress.Policy{AllowCIDRs: slices.Clone(cfg.AllowCIDRs)},
			requireHTTPS: cfg.RequireHTTPS,
			catalog:      cfg.Catalog,
		},
	}
}

// MaxEndpointsPerOwner is the cap ErrTooManyEndpoints refers to.
func (s *Service) MaxEndpointsPerOwner() int { return s.cfg.MaxEndpointsPerOwner }

// parseID validates the endpoint_id field: empty or malformed is a bad
// argument, named. Only a well-formed id reaches the store, where another
// owner's endpoint is ErrNotFound exactly like a missing one.
func parseID(v *violations, raw string) uuid.UUID {
	if raw == "" {
		v.add(FieldEndpointID, "must not be empty")
		return uuid.Nil
	}
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		// Only the canonical form: "urn:uuid:…" and braces would otherwise
		// let two spellings name one endpoint.
		v.add(FieldEndpointID, "must be a UUID in canonical form (8-4-4-4-12 hex digits)")
		return uuid.Nil
	}
	return id
}

// ownerAndID validates the owner id and the endpoint_id field together.
func (s *Service) ownerAndID(owner, rawID string) (uuid.UUID, error) {
	var v violations
	s.val.ownerID(&v, owner)
	id := parseID(&v, rawID)
	if err := v.err(); err != nil {
		return uuid.Nil, err
	}
	return id, nil
}

func (s *Service) logOp(ctx context.Context, msg, owner string, id uuid.UUID, attrs ...any) {
	attrs = append([]any{slog.String("owner_id", owner), slog.String("endpoint_id", id.String())}, attrs...)
	s.logger.InfoContext(ctx, msg, attrs...)
}

func pageSize(v *violations, n int32) int {
	switch {
	case n < 0:
		v.add(FieldPageSize, "must not be negative")
		return 0
	case n == 0:
		return DefaultPageSize
	case n > MaxPageSize:
		// Refused rather than shortened: a caller that asked for 500 and
		// got 200 would take the page for all there is.
		v.add(FieldPageSize, "must be at most "+strconv.Itoa(MaxPageSize))
		return 0
	default:
		return int(n)
	}
}

// Page is one page of a listing and the token of the next ("" at the end).
type Page[T any] struct {
	Items         []T
	NextPageToken string
}

// pageOf makes a page of items, read with limit+1 rows: the extra row only
// says that there is a next page, whose token continues after the last item
// kept.
func pageOf[T any](items []T, limit int, token func(last T) string) Page[T] {
	if len(items) <= limit {
		return Page[T]{Items: items}
	}
	items = items[:limit]
	return Page[T]{Items: items, NextPageToken: token(items[len(items)-1])}
}

// List returns a page of owner's endpoints, oldest first. pageSize 0 means
// DefaultPageSize; pageToken is "" or a token a previous page returned.
//
// labels, when not empty, keeps the endpoints carrying every one of them
// with exactly that value (at most MaxLabelFilters).
func (s *Service) List(ctx context.Context, owner string, pageSize32 int32, pageToken string, labels map[string]string) (Page[*Endpoint], error) {
	var v violations
	s.val.ownerID(&v, owner)
	limit := pageSize(&v, pageSize32)
	labels = s.val.labels(&v, labels, MaxLabelFilters)
	var cursor *ListCursor
	if pageToken != "" {
		var ok bool
		if cursor, ok = decodeListToken(pageToken); !ok {
			v.add(FieldPageToken, "is not a token returned by ListEndpoints")
		}
	}
	if err := v.err(); err != nil {
		return Page[*Endpoint]{}, err
	}
	// One extra row says whether another page exists without a count query.
	eps, err := s.store.List(ctx, owner, labels, cursor, limit+1)
	if err != nil {
		return Page[*Endpoint]{}, err
	}
	return pageOf(eps, limit, func(last *Endpoint) string {
		return encodeListToken(ListCursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}), nil
}

// Get returns owner's endpoint id.
func (s *Service) Get(ctx context.Context, owner, id string) (*Endpoint, error) {
	epID, err := s.ownerAndID(owner, id)
	if err != nil {
		return nil, err
	}
	return s.store.Get(ctx, owner, epID)
}

// Create creates an endpoint and returns it with its secret, which is shown
// this once. With p.RequestID set it is idempotent: a retry returns the
// endpoint the first call made (Created.Replayed; see Store.CreateOnce).
func (s *Service) Create(ctx context.Context, p CreateParams) (Created, error) {
	var v violations
	s.val.ownerID(&v, p.OwnerID)
	s.val.url(&v, p.URL)
	s.val.description(&v, p.Description)
	before := len(v)
	s.val.eventTypes(&v, p.EventTypes)
	typesOK := len(v) == before
	s.val.embedID(&v, p.EmbedID)
	s.val.headers(&v, p.Headers)
	switch p.SigningScheme {
	case "", SchemeV1, SchemeV1a:
	default:
		v.add(FieldSignatureScheme, "must be v1 (a shared secret) or v1a (an Ed25519 key pair)")
	}
	s.val.maxPerSecond(&v, p.MaxPerSecond)
	p.MaxInFlight = s.val.maxInFlight(&v, p.MaxInFlight, p.Ordered)
	s.val.requestID(&v, p.RequestID)
	s.val.name(&v, p.Name)
	if p.Labels != nil {
		p.Labels = s.val.labels(&v, p.Labels, MaxLabels)
	}
	f := s.val.parseFilter(&v, p.Filter)
	p.Filter = nil
	if !f.Empty() {
		// Checked against the schemas of the types it subscribes to, when
		// they are valid.
		if typesOK {
			s.val.checkFilter(&v, f, p.EventTypes)
		}
		p.Filter = f.JSON()
	}
	if err := v.err(); err != nil {
		return Created{}, err
	}
	c, err := s.store.CreateOnce(ctx, p, s.cfg.MaxEndpointsPerOwner)
	if err != nil {
		return Created{}, err
	}
	if c.Replayed {
		s.logOp(ctx, "endpoint create replayed", c.Endpoint.OwnerID, c.Endpoint.ID, slog.Bool("secret_shown", c.Secret != ""))
	} else {
		s.logOp(ctx, "endpoint created", c.Endpoint.OwnerID, c.Endpoint.ID)
	}
	return c, nil
}

// Update mask paths.
const (
	PathURL         = "url"
	PathDescription = "description"
	PathEventTypes  = "event_types"
	PathEmbedID     = "embed_id"
	PathEnabled     = "enabled"
	// PathHeaders (headers.go) replaces the custom headers as a whole.

	// PathMaxPerSecond, PathMaxInFlight and PathOrdered are the receiver
	// controls.
	PathMaxPerSecond = FieldMaxPerSecond
	PathMaxInFlight  = FieldMaxInFlight
	PathOrdered      = FieldOrdered
)

// updatePaths lists the paths, for messages.
const updatePaths = "url, description, event_types, embed_id, enabled, headers, max_per_second, max_in_flight, ordered, name, labels, filter"

// UpdateRequest changes the fields its Paths name (PathURL, …) to the values
// given; the others are ignored.
type UpdateRequest struct {
	OwnerID     string
	ID          string
	Paths       []string
	URL         string
	Description string
	EventTypes  []string
	EmbedID     string
	Enabled     bool
	// Headers replace the custom headers with PathHeaders; empty removes
	// them all.
	Headers map[string]string
	// MaxPerSecond (0: no limit), MaxInFlight (0: the default, 1) and
	// Ordered, for PathMaxPerSecond, PathMaxInFlight and PathOrdered.
	MaxPerSecond int32
	MaxInFlight  int32
	Ordered      bool
	// Name and Labels, for PathName and PathLabels (which replaces every
	// label; empty removes them all).
	Name   string
	Labels map[string]string
	// Filter is the filter's JSON text, for PathFilter; nil or {} removes
	// it.
	Filter []byte
}

// Update changes an endpoint. Re-enabling a disabled endpoint clears its
// failure state.
func (s *Service) Update(ctx context.Context, r UpdateRequest) (*Endpoint, error) {
	var v violations
	s.val.ownerID(&v, r.OwnerID)
	id := parseID(&v, r.ID)

	var p UpdateParams
	if len(r.Paths) == 0 {
		v.add(FieldUpdateMask, "must name at least one of: "+updatePaths)
	}
	for i, path := range r.Paths {
		switch path {
		case PathURL:
			s.val.url(&v, r.URL)
			p.URL = new(r.URL)
		case PathDescription:
			s.val.description(&v, r.Description)
			p.Description = new(r.Description)
		case PathEventTypes:
			s.val.eventTypes(&v, r.EventTypes)
			p.EventTypes = slices.Clone(r.EventTypes)
			if p.EventTypes == nil {
				p.EventTypes = []string{}
			}
		case PathEmbedID:
			s.val.embedID(&v, r.EmbedID)
			p.EmbedID = new(r.EmbedID)
		case PathEnabled:
			p.Enabled = new(r.Enabled)
		case PathHeaders:
			p.Headers = s.val.headers(&v, r.Headers)
		case PathMaxPerSecond:
			s.val.maxPerSecond(&v, r.MaxPerSecond)
			p.MaxPerSecond = new(r.MaxPerSecond)
		case PathMaxInFlight:
			// Against ordered only when both change here; the store
			// refuses the combination with the endpoint's other value.
			ordered := slices.Contains(r.Paths, PathOrdered) && r.Ordered
			p.MaxInFlight = new(s.val.maxInFlight(&v, r.MaxInFlight, ordered))
		case PathOrdered:
			p.Ordered = new(r.Ordered)
		case PathName:
			s.val.name(&v, r.Name)
			p.Name = new(r.Name)
		case PathLabels:
			p.Labels = s.val.labels(&v, r.Labels, MaxLabels)
		case PathFilter:
			// Checked below, against the event types it will go with.
			text := ""
			if f := s.val.parseFilter(&v, r.Filter); !f.Empty() {
				text = string(f.JSON())
			}
			p.Filter = &text
		default:
			reason := "unknown path: must be one of " + updatePaths
			if near := suggest.Nearest(path, strings.Split(updatePaths, ", ")); near != "" {
				reason = fmt.Sprintf("unknown path; did you mean %q? (one of %s)", near, updatePaths)
			}
			v.add(FieldUpdateMask+".paths["+strconv.Itoa(i)+"]", reason)
		}
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	// A filter is checked against the schemas of the types the endpoint
	// subscribes to: when only one of the two changes, against the other
	// as stored, read and locked in the update's transaction.
	switch {
	case p.Filter != nil && p.EventTypes != nil:
		s.val.filterAgainst(&v, *p.Filter, p.EventTypes, "")
		if err := v.err(); err != nil {
			return nil, err
		}
	case p.Filter != nil:
		p.check = func(globs []string, _ string) error {
			var v violations
			s.val.filterAgainst(&v, *p.Filter, globs, "")
			return v.err()
		}
	case p.EventTypes != nil:
		p.check = func(_ []string, stored string) error {
			var v violations
			s.val.filterAgainst(&v, stored, p.EventTypes, "does not fit the new event_types: ")
			return v.err()
		}
	}
	e, err := s.store.Update(ctx, r.OwnerID, id, p)
	if err != nil {
		return nil, err
	}
	attrs := []any{slog.String("fields", strings.Join(r.Paths, ","))}
	if p.Enabled != nil {
		attrs = append(attrs, slog.Bool("enabled", *p.Enabled))
	}
	s.logOp(ctx, "endpoint updated", e.OwnerID, e.ID, attrs...)
	return e, nil
}

// Delete deletes an endpoint; its pending deliveries are cancelled when they
// run.
func (s *Service) Delete(ctx context.Context, owner, id string) error {
	epID, err := s.ownerAndID(owner, id)
	if err != nil {
		return err
	}
	if err := s.store.Delete(ctx, owner, epID); err != nil {
		return err
	}
	s.logOp(ctx, "endpoint deleted", owner, epID)
	return nil
}

// GracePeriod is the overlap a secret rotation asks for. Set Malformed when
// the caller's value could not even be read as a duration.
type GracePeriod struct {
	Value     *time.Duration // nil: DefaultGracePeriod
	Malformed bool
}

// RotateSecret gives an endpoint a new secret, returned this once (or a v1a
// endpoint a new key pair, whose public key is returned); the previous one
// keeps signing until the returned time (nil: not at all).
func (s *Service) RotateSecret(ctx context.Context, owner, id string, grace GracePeriod) (*Rotation, error) {
	var v violations
	s.val.ownerID(&v, owner)
	epID := parseID(&v, id)
	d := DefaultGracePeriod
	switch {
	case grace.Malformed:
		v.add(FieldGracePeriod, "is not a valid duration")
	case grace.Value == nil:
	case *grace.Value < 0:
		v.add(FieldGracePeriod, "must not be negative")
	case *grace.Value > MaxGracePeriod:
		v.add(FieldGracePeriod, "must be at most 7 days (168h)")
	default:
		d = *grace.Value
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	r, err := s.store.RotateSecret(ctx, owner, epID, d)
	if err != nil {
		return nil, err
	}
	s.logOp(ctx, "endpoint secret rotated", owner, epID, slog.Duration("grace_period", d))
	return r, nil
}

// SendTest publishes one webhook.test event to this endpoint only and
// returns its id.
func (s *Service) SendTest(ctx context.Context, owner, id string) (string, error) {
	epID, err := s.ownerAndID(owner, id)
	if err != nil {
		return "", err
	}
	if s.publisher == nil {
		return "", fmt.Errorf("send_test: %w", ErrUnavailable)
	}
	e, err := s.store.Get(ctx, owner, epID)
	if err != nil {
		return "", err
	}
	if !e.Enabled {
		// Fanout skips disabled endpoints; a test that can never arrive
		// would only confuse.
		return "", ErrDisabled
	}
	evID, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	// Fanout routes webhook.test by data.endpoint_id, to this endpoint only.
	data, err := json.Marshal(map[string]string{"endpoint_id": epID.String()})
	if err != nil {
		return "", err
	}
	ev := &webhook.Event{
		ID:         evID.String(),
		OwnerID:    e.OwnerID,
		Type:       event.TypeWebhookTest,
		Subject:    "webhook://endpoints/" + epID.String(),
		OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
		Data:       data,
	}
	if err := s.publisher.Publish(ctx, ev); err != nil {
		return "", fmt.Errorf("publish test event: %w", err)
	}
	s.logOp(ctx, "test event sent", e.OwnerID, epID, slog.String("event_id", ev.ID))
	return ev.ID, nil
}

// RetryDelivery runs one waiting delivery of owner's now: a retry's backoff
// (up to 10 h), a Retry-After or a failing endpoint's cool-down is cut
// short. See Store.RetryDelivery for what is refused.
func (s *Service) RetryDelivery(ctx context.Context, owner string, deliveryID int64) (*Delivery, error) {
	return s.retryDelivery(ctx, owner, deliveryID, false)
}

// ResendDelivery is RetryDelivery that also sends a delivered delivery of
// owner's again: the same job, so the same event and webhook-id, which a
// receiver that dedupes recognizes. One already on its way (pending or in
// flight, e.g. a resend a moment ago) is returned as it is rather than
// queued a second time.
func (s *Service) ResendDelivery(ctx context.Context, owner string, deliveryID int64) (*Delivery, error) {
	return s.retryDelivery(ctx, owner, deliveryID, true)
}

func (s *Service) retryDelivery(ctx context.Context, owner string, deliveryID int64, resend bool) (*Delivery, error) {
	var v violations
	s.val.ownerID(&v, owner)
	if deliveryID <= 0 {
		v.add(FieldDeliveryID, "must be a delivery id (a positive number, as ListDeliveries returns)")
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	if s.river == nil {
		return nil, fmt.Errorf("retry_delivery: %w", ErrUnavailable)
	}
	d, err := s.store.RetryDelivery(ctx, s.river, owner, deliveryID, resend)
	if err != nil {
		return nil, err
	}
	msg := "delivery retried now"
	if resend {
		msg = "delivery resent"
	}
	s.logger.InfoContext(ctx, msg, slog.String("owner_id", owner), slog.Int64("delivery_id", deliveryID),
		slog.Bool("resend", resend), slog.String("state", d.State.String()))
	return d, nil
}

// JobLink is the link to a delivery's job (ServiceConfig.JobLinkTemplate),
// or "".
func (s *Service) JobLink(jobID int64) string {
	if s.cfg.JobLinkTemplate == "" {
		return ""
	}
	return strings.ReplaceAll(s.cfg.JobLinkTemplate, "{job_id}", strconv.FormatInt(jobID, 10))
}
