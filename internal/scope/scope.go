// Package scope makes the one decision of who may see an event: given a stored
// event and one endpoint of its owner, admit or deny (docs/spec.md#scope).
//
// The rules, in the order they are applied:
//
//   - raw: a raw:// subject never leaves, whatever the type or endpoint.
//   - internal: a type whose Exposure is not Webhook never leaves.
//   - owner: an endpoint of another owner never sees the event.
//
// Then the rule the catalog names for the type (pkg/catalog's Scope):
//
//   - test_target (scope test_only, webhook.test): only the endpoint named by
//     data.endpoint_id.
//   - published_slice (scope published_slice, corpus.note.changed in the
//     default catalog): a standalone endpoint (no embed) only when
//     data.published or data.was_published is JSON true, so un-publishing is
//     heard too.
//   - embed (scope published_slice): an embed-bound endpoint only when the
//     access service says that embed's code admits it, asked for every event
//     and never cached.
//   - unscoped (scope all): every subscribed endpoint.
//
// The first three are invariants the fanout already upholds; checking them
// here again means a bug elsewhere fails closed instead of leaking.
//
// The package knows the access service only through the small EmbedAdmitter
// interface, and the fanout knows scope only through Func, so the composition
// root wires a gRPC client in without the fanout importing it.
package scope

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// ErrNeedsAccess is returned, instead of a decision, when ctx came from
// WithoutAccess and the decision needs the access service. It is how the
// ingest path asks "can this be decided right here?" with the same function
// that decides.
var ErrNeedsAccess = errors.New("scope: decision needs the access service")

type withoutAccessKey struct{}

// WithoutAccess returns a context under which a Func never calls the access
// service: a decision that would need it returns ErrNeedsAccess instead.
func WithoutAccess(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutAccessKey{}, true)
}

type eventDataKey struct{}

// eventData is one event's decoded top-level data, shared by every decision
// about that event made under the context ForEvent returned. It is decoded
// on first need and never again; after once, fields is only read, so
// concurrent decisions share it safely.
type eventData struct {
	e      *webhook.Event
	once   sync.Once
	fields map[string]json.RawMessage
}

// ForEvent returns a context under which a Func decodes e's data at most once,
// however many endpoints it is asked about, instead of once per decision: the
// fanout asks about every endpoint of the owner, and decoding the same data
// for each was most of its allocations. Decisions are the same with it or
// without. A decision about another event under the returned context decodes
// that event's data itself, as without it.
func ForEvent(ctx context.Context, e *webhook.Event) context.Context {
	return context.WithValue(ctx, eventDataKey{}, &eventData{e: e})
}

// dataFields is e's top-level data members (nil when e's data is not a JSON
// object), decoded once per ForEvent context or, without one, now.
func dataFields(ctx context.Context, e *webhook.Event) map[string]json.RawMessage {
	m, ok := ctx.Value(eventDataKey{}).(*eventData)
	if !ok || m.e != e {
		return topLevel(e.Data)
	}
	m.once.Do(func() { m.fields = topLevel(e.Data) })
	return m.fields
}

// ErrUnavailable marks a decision that could not be made for now: the access
// service did not answer. It is never turned into a yes or a no; the fanout
// fails and River retries it. Implementations of EmbedAdmitter wrap it.
var ErrUnavailable = errors.New("scope: access service unavailable")

// Rule names, the "rule" label of the scope decisions metric.
const (
	RuleRaw            = "raw"
	RuleInternal       = "internal"
	RuleOwner          = "owner"
	RuleTestTarget     = "test_target"
	RulePublishedSlice = "published_slice"
	RuleEmbed          = "embed"
	RuleUnscoped       = "unscoped"
)

// Rules returns every rule name: the "rule" label's values.
func Rules() []string {
	return []string{RuleRaw, RuleInternal, RuleOwner, RuleTestTarget, RulePublishedSlice, RuleEmbed, RuleUnscoped}
}

// Decision results, the "result" label of the scope decisions metric.
const (
	ResultAdmit = "admit"
	ResultDeny  = "deny"
	ResultError = "error" // the access service could not decide
)

// Results returns every decision result: the "result" label's values.
func Results() []string { return []string{ResultAdmit, ResultDeny, ResultError} }

// Reasons carried by a Decision (logged, never used as a metric label except
// through the bounded rule).
const (
	ReasonRawSubject      = "raw_subject"
	ReasonInternalType    = "internal_type"
	ReasonOtherOwner      = "other_owner"
	ReasonTargeted        = "targeted"
	ReasonNotTargeted     = "not_targeted"
	ReasonPublished       = "published"
	ReasonWasPublished    = "was_published"
	ReasonUnpublished     = "unpublished"
	ReasonNoAccessService = "no_access_service"
	ReasonAccessError     = "access_error"
	ReasonUnscoped        = "unscoped"
)

// Endpoint is scope's own view of an endpoint: just what the decision needs,
// so this package imports no endpoint storage.
type Endpoint struct {
	ID      string
	OwnerID string
	// EmbedID is empty for a standalone endpoint.
	EmbedID string
}

// EmbedAdmitter answers whether an embed's access code admits an event.
//
// A definite answer is (admits, reason, nil); a deleted embed or a revoked or
// expired code is a definite false. When no answer could be had and asking
// again later might give one, the error wraps ErrUnavailable. Any other error
// means the question itself cannot be answered (a malformed request) and is
// treated as a deny.
type EmbedAdmitter interface {
	EmbedAdmits(ctx context.Context, ownerID, embedID string, e *webhook.Event) (bool, string, error)
}

// Decision is the outcome for one (event, endpoint) pair.
type Decision struct {
	Admit bool
	// Rule is the rule that decided (one of the Rule constants).
	Rule string
	// Reason is a short machine-readable why, for logs.
	Reason string
}

// Func is the scope decision as a plain function: what the composition root
// hands to the fanout. An error means no decision was made; it wraps
// ErrUnavailable when retrying later may succeed.
type Func func(ctx context.Context, e *webhook.Event, ep Endpoint) (Decision, error)

// Decider applies the rules, counts and logs every decision.
type Decider struct {
	admitter EmbedAdmitter
	logger   *slog.Logger
	metrics  *metrics.Metrics
	// catalog names each type's scope rule; nil: the default catalog.
	catalog *event.Running
}

// NewDecider returns a Decider asking admitter about embed-bound endpoints.
// admitter may be nil when no access service is configured; embed-bound
// endpoints then admit nothing (the caller, which knows the setting's name,
// says so at start-up: that silence would otherwise be invisible).
func NewDecider(admitter EmbedAdmitter, m *metrics.Metrics, logger *slog.Logger) *Decider {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Decider{admitter: admitter, logger: logger, metrics: m}
}

// WithCatalog makes d decide with the running catalog r (the default catalog
// without it), and returns d.
func (d *Decider) WithCatalog(r *event.Running) *Decider {
	d.catalog = r
	return d
}

// Func returns d.Decide as a Func.
func (d *Decider) Func() Func { return d.Decide }

// Decide decides whether e may be delivered to ep. An error (always wrapping
// ErrUnavailable) means the access service could not be asked; the caller must
// retry later rather than deliver or drop.
func (d *Decider) Decide(ctx context.Context, e *webhook.Event, ep Endpoint) (Decision, error) {
	dec, err := d.decide(ctx, e, ep)
	if errors.Is(err, ErrNeedsAccess) {
		return dec, err // not decided: neither counted nor logged
	}

	result := ResultDeny
	switch {
	case err != nil || dec.Reason == ReasonAccessError:
		result = ResultError
	case dec.Admit:
		result = ResultAdmit
	}
	if d.metrics != nil {
		d.metrics.ScopeDecisionsTotal.WithLabelValues(dec.Rule, result).Inc()
	}

	attrs := []slog.Attr{
		slog.String("event_id", e.ID),
		slog.String("endpoint_id", ep.ID),
		slog.String("rule", dec.Rule),
		slog.String("result", result),
		slog.String("reason", dec.Reason),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	d.logger.LogAttrs(ctx, slog.LevelDebug, "scope decision", attrs...)
	return dec, err
}

func (d *Decider) decide(ctx context.Context, e *webhook.Event, ep Endpoint) (Decision, error) {
	cat := d.catalog.Catalog()
	switch {
	case event.IsRawSubject(e.Subject):
		return Decision{Rule: RuleRaw, Reason: ReasonRawSubject}, nil
	case !cat.Exposed(e.Type):
		return Decision{Rule: RuleInternal, Reason: ReasonInternalType}, nil
	case ep.OwnerID != e.OwnerID:
		return Decision{Rule: RuleOwner, Reason: ReasonOtherOwner}, nil
	}
	// The catalog names each type's rule; a rule this switch does not know
	// admits nothing.
	switch cat.ScopeOf(e.Type) {
	case catalog.ScopeTestOnly:
		// UUIDs compare case-insensitively; the endpoint id is one.
		if target, ok := stringField(dataFields(ctx, e), "endpoint_id"); ok && target != "" && strings.EqualFold(target, ep.ID) {
			return Decision{Admit: true, Rule: RuleTestTarget, Reason: ReasonTargeted}, nil
		}
		return Decision{Rule: RuleTestTarget, Reason: ReasonNotTargeted}, nil
	case catalog.ScopeAll:
		return Decision{Admit: true, Rule: RuleUnscoped, Reason: ReasonUnscoped}, nil
	case catalog.ScopePublishedSlice:
		if ep.EmbedID == "" {
			return publishedSlice(dataFields(ctx, e)), nil
		}
		return d.embed(ctx, e, ep)
	default:
		return Decision{Rule: RuleInternal, Reason: ReasonInternalType}, nil
	}
}

// publishedSlice admits a note event to a standalone endpoint when the note is,
// or was until this change, published. fields is the event's top-level data.
func publishedSlice(fields map[string]json.RawMessage) Decision {
	switch {
	case isTrue(fields["published"]):
		return Decision{Admit: true, Rule: RulePublishedSlice, Reason: ReasonPublished}
	case isTrue(fields["was_published"]):
		return Decision{Admit: true, Rule: RulePublishedSlice, Reason: ReasonWasPublished}
	default:
		return Decision{Rule: RulePublishedSlice, Reason: ReasonUnpublished}
	}
}

func (d *Decider) embed(ctx context.Context, e *webhook.Event, ep Endpoint) (Decision, error) {
	if d.admitter == nil {
		return Decision{Rule: RuleEmbed, Reason: ReasonNoAccessService}, nil
	}
	if ctx.Value(withoutAccessKey{}) != nil {
		return Decision{Rule: RuleEmbed}, ErrNeedsAccess
	}
	admits, reason, err := d.admitter.EmbedAdmits(ctx, ep.OwnerID, ep.EmbedID, e)
	switch {
	case errors.Is(err, ErrUnavailable):
		return Decision{Rule: RuleEmbed, Reason: ReasonAccessError}, fmt.Errorf("embed %q of endpoint %s: %w", ep.EmbedID, ep.ID, err)
	case err != nil:
		// The question cannot be answered as asked, and asking again will not
		// change that: deny, loudly.
		d.logger.LogAttrs(ctx, slog.LevelError, "access service rejected the question; denying",
			slog.String("event_id", e.ID),
			slog.String("endpoint_id", ep.ID),
			slog.String("embed_id", ep.EmbedID),
			slog.String("error", err.Error()),
		)
		return Decision{Rule: RuleEmbed, Reason: ReasonAccessError}, nil
	case admits:
		return Decision{Admit: true, Rule: RuleEmbed, Reason: cmp.Or(reason, "admitted")}, nil
	default:
		return Decision{Rule: RuleEmbed, Reason: cmp.Or(reason, "denied")}, nil
	}
}

// topLevel decodes data's top-level members. Keys are compared exactly, not
// with encoding/json's case-insensitive struct matching, so "Published" can
// never stand in for "published".
func topLevel(data json.RawMessage) map[string]json.RawMessage {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil
	}
	return fields
}

// isTrue reports whether a JSON value is the literal true; a string "true", a
// 1 or anything else is not.
func isTrue(v json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(v), []byte("true"))
}

// stringField is the string member key of fields, the event's top-level data.
func stringField(fields map[string]json.RawMessage, key string) (string, bool) {
	raw, ok := fields[key]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}
