package event

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Exposure says whether events of a type may leave the instance
// (pkg/catalog).
type Exposure = catalog.Exposure

// The Exposures, as pkg/catalog defines them.
const (
	ExposureInternal    = catalog.ExposureInternal
	ExposureWebhook     = catalog.ExposureWebhook
	ExposureOperational = catalog.ExposureOperational
)

// Types that other packages treat specially.
const (
	// TypeNoteChanged is the scoped type of the default catalog
	// (docs/spec.md#scope).
	TypeNoteChanged = "corpus.note.changed"
	// TypeWebhookTest goes only to the endpoint it names (built in).
	TypeWebhookTest = catalog.TypeWebhookTest

	// TypeEndpointFailing, TypeEndpointDisabled and TypeEndpointRecovered
	// are the operational events, one per endpoint health transition.
	TypeEndpointFailing   = catalog.TypeEndpointFailing
	TypeEndpointDisabled  = catalog.TypeEndpointDisabled
	TypeEndpointRecovered = catalog.TypeEndpointRecovered
)

// TypeInfo describes one catalog type for ListEventTypes, docs/events.md
// and pkg/client's generated builders.
type TypeInfo struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the type's data object and Example a data
	// object it accepts. They are shared, so callers must not modify them.
	Schema, Example json.RawMessage
}

// Running is the catalog a dispatcher runs. The composition root makes one
// from -catalog and hands the same Running to ingest, fanout, scope,
// delivery, the API and the portal, which load it where they decide; Swap
// replaces it for all of them at once, and tells whoever asked (OnSwap), such
// as the API's OpenAPI document, generated from it.
//
// A nil *Running is the default catalog (catalog.Default()), so a component
// built without one (in a test) decides as a dispatcher without -catalog.
type Running struct {
	current atomic.Pointer[catalog.Catalog]

	mu     sync.Mutex
	onSwap []func(*catalog.Catalog)
}

// NewRunning returns a Running of c.
func NewRunning(c *catalog.Catalog) *Running {
	r := &Running{}
	r.current.Store(c)
	return r
}

// Catalog returns the running catalog. Decide one event with one loaded
// catalog: a Swap meanwhile must not decide it two ways.
func (r *Running) Catalog() *catalog.Catalog {
	if r == nil {
		return catalog.Default()
	}
	return r.current.Load()
}

// Swap makes c the running catalog, then calls every OnSwap function with it
// (in the order they were added, one Swap at a time).
func (r *Running) Swap(c *catalog.Catalog) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current.Store(c)
	for _, f := range r.onSwap {
		f(c)
	}
}

// OnSwap calls f with each catalog Swap makes the running one.
func (r *Running) OnSwap(f func(*catalog.Catalog)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onSwap = append(r.onSwap, f)
}

// Catalog returns the default catalog, which the package-level functions
// below consult: the embedded one, for tools and tests. The dispatcher decides
// with its Running catalog instead.
func Catalog() *catalog.Catalog { return catalog.Default() }

// ExposureOf returns the Exposure of typ. Any type not in the catalog is
// ExposureInternal.
func ExposureOf(typ string) Exposure { return Catalog().ExposureOf(typ) }

// Known reports whether typ is in the catalog at all, whatever its
// Exposure. A type that is not is Internal too, but it is most often a
// misspelling, which ingest tells apart from a type declared Internal.
func Known(typ string) bool { return Catalog().Known(typ) }

// ScopeOf returns the scope rule of typ (catalog.ScopeNone for a type that
// never leaves).
func ScopeOf(typ string) catalog.Scope { return Catalog().ScopeOf(typ) }

// WebhookTypes returns the types whose Exposure is Webhook, the ones a
// publisher may publish and an endpoint subscribe to, sorted by name. The
// slice is a fresh copy the caller may modify.
func WebhookTypes() []TypeInfo { return typesOf(ExposureWebhook) }

// OperationalTypes returns the types whose Exposure is Operational, the
// dispatcher's own events, sorted by name. The slice is a fresh copy the
// caller may modify.
func OperationalTypes() []TypeInfo { return typesOf(ExposureOperational) }

func typesOf(x Exposure) []TypeInfo { return TypesIn(Catalog(), x) }

// TypesIn returns c's types of Exposure x, sorted by name. The slice is a
// fresh copy the caller may modify.
func TypesIn(c *catalog.Catalog, x Exposure) []TypeInfo {
	var out []TypeInfo
	for _, t := range c.TypesOf(x) {
		out = append(out, TypeInfo{Name: t.Name, Description: t.Description, Schema: t.Schema, Example: t.Example})
	}
	return out
}

// Publishable reports whether a publisher (gRPC, the outbox, SendTest) may
// publish events of typ: anything but the operational types, which only the
// dispatcher emits. Types outside the catalog are publishable and dropped.
func Publishable(typ string) bool { return Catalog().Publishable(typ) }

// Leaves reports whether e may be delivered outside the instance at all: its
// type is exposed and its subject is not raw. Per-endpoint globs and scope
// are decided later; this is the instance-wide gate.
func Leaves(e *webhook.Event) bool { return Catalog().Leaves(e) }

// Exposed reports whether events of typ may leave the instance at all: its
// Exposure is Webhook or Operational.
func Exposed(typ string) bool { return Catalog().Exposed(typ) }

// IsRawSubject reports whether subject uses the raw scheme, which never
// leaves the instance (catalog.IsRawSubject).
func IsRawSubject(subject string) bool { return catalog.IsRawSubject(subject) }

// ValidateData checks data against typ's schema (catalog.ValidateData); the
// error is a *webhook.FieldError naming the JSON path ("data.op").
func ValidateData(typ string, data json.RawMessage) error {
	return Catalog().ValidateData(typ, data)
}

// Schema returns typ's data schema as written in the catalog, or nil for a
// type without one. The caller must not modify it.
func Schema(typ string) json.RawMessage {
	if t, ok := Catalog().Lookup(typ); ok {
		return t.Schema
	}
	return nil
}

// Example returns an example data object of typ (compact JSON) that its
// schema accepts, or nil for a type without one. The caller must not modify
// it.
func Example(typ string) json.RawMessage {
	if t, ok := Catalog().Lookup(typ); ok {
		return t.Example
	}
	return nil
}
