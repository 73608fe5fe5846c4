package catalog

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Exposure says whether events of a type may leave the instance.
type Exposure int

const (
	// ExposureInternal is the zero value so that a type nobody classified,
	// or a lookup that went wrong, fails closed: it never leaves.
	ExposureInternal Exposure = iota
	// ExposureWebhook types may be delivered to subscribed endpoints.
	ExposureWebhook
	// ExposureOperational types are the dispatcher's own operational events:
	// delivered like webhook types, but only ever emitted by the dispatcher,
	// so a publisher can never forge one. Only built-in types have it.
	ExposureOperational
)

func (x Exposure) String() string {
	switch x {
	case ExposureInternal:
		return "Internal"
	case ExposureWebhook:
		return "Webhook"
	case ExposureOperational:
		return "Operational"
	default:
		return "Exposure(" + strconv.Itoa(int(x)) + ")"
	}
}

// Scope is the rule that decides which of an owner's subscribed endpoints
// see an event of a type. The rules are the dispatcher's; a catalog only
// picks one per type.
type Scope int

const (
	// ScopeNone: the type never leaves (internal), so no rule applies.
	ScopeNone Scope = iota
	// ScopeAll: every endpoint subscribed to the type.
	ScopeAll
	// ScopePublishedSlice: a standalone endpoint sees the event only when
	// data.published or data.was_published is true (so un-publishing is
	// heard too); an endpoint bound to an embed only when the access service
	// says that embed's code admits it.
	ScopePublishedSlice
	// ScopeTestOnly: only the endpoint named by data.endpoint_id, whatever
	// it subscribes to.
	ScopeTestOnly
)

// scopeNames are the words a catalog file uses.
var scopeNames = map[Scope]string{ScopeAll: "all", ScopePublishedSlice: "published_slice", ScopeTestOnly: "test_only"}

func (s Scope) String() string {
	if n, ok := scopeNames[s]; ok {
		return n
	}
	if s == ScopeNone {
		return "none"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// Built-in type names.
const (
	// TypeWebhookTest is what EndpointService.SendTest sends: scope
	// test_only, so it reaches the endpoint it names and no other.
	TypeWebhookTest = "webhook.test"
	// TypeEndpointFailing, TypeEndpointDisabled and TypeEndpointRecovered are
	// the operational events, one per endpoint health transition.
	TypeEndpointFailing   = "endpoint.failing"
	TypeEndpointDisabled  = "endpoint.disabled"
	TypeEndpointRecovered = "endpoint.recovered"
)

// Type is one event type of a catalog. Its fields are shared by every user
// of the catalog: read them, never modify them.
type Type struct {
	Name        string
	Description string
	Exposure    Exposure
	Scope       Scope
	// Schema is the JSON Schema of the type's data object as written in the
	// catalog, and Example a data object it accepts (compact JSON). Both are
	// nil for an internal type declared without a schema.
	Schema, Example json.RawMessage
	// Builtin: the dispatcher's own type, in every catalog.
	Builtin bool

	compiled *jsonschema.Schema
	// file is where the type was declared, for errors.
	file string
}

// Catalog is a loaded, checked set of event types. It is immutable and safe
// for concurrent use.
type Catalog struct {
	types  []*Type // sorted by name
	byName map[string]*Type
	source string
	digest string
}

//go:embed defaults/*.json
var defaultFiles embed.FS

//go:embed builtin/*.json
var builtinFiles embed.FS

// builtins are the types every catalog holds, parsed once.
var builtins = mustParse(builtinFiles, "builtin", true)

// defaultCatalog is what Default returns.
var defaultCatalog = func() *Catalog {
	c, err := load(defaultFiles, "defaults", "the embedded default catalog", false)
	if err != nil {
		panic("catalog: " + err.Error())
	}
	return c
}()

func mustParse(fsys fs.FS, dir string, builtin bool) []*Type {
	types, err := parseDir(fsys, dir, dir, builtin)
	if err != nil {
		panic("catalog: " + err.Error())
	}
	return types
}

// Default returns the catalog the dispatcher uses when none is configured:
// the 38 types of the original product (corpus.note.changed, booking.created,
// …, docs/events.md) and the built-in types: 39 webhook types with
// webhook.test, and the 3 operational ones.
func Default() *Catalog { return defaultCatalog }

// Source says where the catalog was loaded from: a path, or "the embedded
// default catalog".
func (c *Catalog) Source() string { return c.source }

// Digest identifies the catalog's content (every type's name, exposure,
// scope, description, schema and example, built-in types included): two
// processes with the same digest decide the same way about every event.
// It is a short hexadecimal string.
func (c *Catalog) Digest() string { return c.digest }

// Types returns every type, sorted by name. The slice is a fresh copy; the
// types are shared.
func (c *Catalog) Types() []*Type { return slices.Clone(c.types) }

// TypesOf returns the types of Exposure x, sorted by name.
func (c *Catalog) TypesOf(x Exposure) []*Type {
	var out []*Type
	for _, t := range c.types {
		if t.Exposure == x {
			out = append(out, t)
		}
	}
	return out
}

// Lookup returns the type named name.
func (c *Catalog) Lookup(name string) (*Type, bool) {
	t, ok := c.byName[name]
	return t, ok
}

// Known reports whether typ is in the catalog at all, whatever its
// Exposure. A type that is not is Internal too, but most often a
// misspelling.
func (c *Catalog) Known(typ string) bool {
	_, ok := c.byName[typ]
	return ok
}

// ExposureOf returns the Exposure of typ; a type not in the catalog is
// ExposureInternal.
func (c *Catalog) ExposureOf(typ string) Exposure {
	if t, ok := c.byName[typ]; ok {
		return t.Exposure
	}
	return ExposureInternal
}

// ScopeOf returns the Scope rule of typ; ScopeNone for a type that never
// leaves.
func (c *Catalog) ScopeOf(typ string) Scope {
	if t, ok := c.byName[typ]; ok {
		return t.Scope
	}
	return ScopeNone
}

// Exposed reports whether events of typ may leave the instance at all: its
// Exposure is Webhook or Operational.
func (c *Catalog) Exposed(typ string) bool {
	x := c.ExposureOf(typ)
	return x == ExposureWebhook || x == ExposureOperational
}

// Publishable reports whether a publisher may publish events of typ:
// anything but the operational types, which only the dispatcher emits.
// Types outside the catalog are publishable, and dropped.
func (c *Catalog) Publishable(typ string) bool { return c.ExposureOf(typ) != ExposureOperational }

// Leaves reports whether e may be delivered outside the instance at all:
// its type is exposed and its subject is not raw. Which endpoints see it is
// decided later, per endpoint.
func (c *Catalog) Leaves(e *webhook.Event) bool {
	return e != nil && c.Exposed(e.Type) && !IsRawSubject(e.Subject)
}

// Validate applies to e every rule a publisher's event must pass, in the
// order the dispatcher does: the thin event's (webhook.Event.Validate), not
// an operational type, and, for an event that may leave, its data against
// its type's schema. now is the validator's clock. The error is a
// *webhook.FieldError naming the field ("type", or the JSON path inside
// data: "data.op"). A type in no catalog passes: it is dropped, never
// delivered.
func (c *Catalog) Validate(e *webhook.Event, now time.Time) error {
	if err := e.Validate(now); err != nil {
		return err
	}
	if !c.Publishable(e.Type) {
		return &webhook.FieldError{Field: webhook.FieldType, Reason: "is an operational event type, emitted only by the dispatcher itself"}
	}
	if c.Leaves(e) {
		return c.ValidateData(e.Type, e.Data)
	}
	return nil
}

// IsRawSubject reports whether subject uses the raw scheme, which never
// leaves the instance. webhook.Event.Validate already requires a scheme, but
// this check is the last one before the wire, so it is deliberately more
// paranoid: it compares case-insensitively (schemes are case-insensitive),
// ignores leading whitespace, control and invisible format characters (BOM,
// zero-width space), and treats "raw:" without the slashes as raw too.
func IsRawSubject(subject string) bool {
	s := strings.TrimLeftFunc(subject, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	})
	const prefix = "raw:"
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// newCatalog indexes user types and the built-ins and computes the digest.
func newCatalog(source string, user []*Type) *Catalog {
	types := slices.Concat(user, builtins)
	slices.SortFunc(types, func(a, b *Type) int { return strings.Compare(a.Name, b.Name) })
	c := &Catalog{types: types, byName: make(map[string]*Type, len(types)), source: source}
	h := sha256.New()
	for _, t := range types {
		c.byName[t.Name] = t
		// Length-prefixed fields, so no two catalogs hash alike by moving
		// text from one field to the next.
		for _, f := range []string{t.Name, t.Description, t.Exposure.String(), t.Scope.String(), canonical(t.Schema), canonical(t.Example)} {
			h.Write([]byte(strconv.Itoa(len(f)) + ":" + f))
		}
	}
	c.digest = hex.EncodeToString(h.Sum(nil))[:16]
	return c
}

// canonical is b with its object keys sorted and no spaces, so that the
// digest follows what a schema says, not how it is laid out.
func canonical(b json.RawMessage) string {
	if len(b) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(b)
	}
	return string(out)
}
