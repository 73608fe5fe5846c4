package event

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Exposure says whether events of a type may leave the instance.
type Exposure int

const (
	// ExposureInternal is the zero value so that a type nobody classified, or
	// a lookup that went wrong, fails closed: it never leaves.
	ExposureInternal Exposure = iota
	// ExposureWebhook types may be delivered to subscribed endpoints.
	ExposureWebhook
	// ExposureOperational types are the dispatcher's own operational events
	// (endpoint.failing, endpoint.disabled, endpoint.recovered): delivered
	// like webhook types, but only ever emitted by the dispatcher itself,
	// under the operator's owner id, so a publisher can never forge one.
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

// Types that other packages treat specially.
const (
	// TypeNoteChanged is the only scoped type (docs/spec.md#scope).
	TypeNoteChanged = "corpus.note.changed"
	// TypeWebhookTest goes only to the endpoint it names.
	TypeWebhookTest = "webhook.test"

	// TypeEndpointFailing, TypeEndpointDisabled and TypeEndpointRecovered
	// are the operational events, one per endpoint health transition.
	TypeEndpointFailing   = "endpoint.failing"
	TypeEndpointDisabled  = "endpoint.disabled"
	TypeEndpointRecovered = "endpoint.recovered"
)

// TypeInfo describes one catalog type for ListEventTypes and the admin UI.
type TypeInfo struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the type's data object (schemas/<type>.json)
	// and Example a data object it accepts. WebhookTypes fills both in; they
	// are shared, so callers must not modify them.
	Schema, Example json.RawMessage
}

// catalog is docs/spec.md's event catalog in its order, which is also the order WebhookTypes
// returns: grouped by domain, so a subscription form reads naturally.
var catalog = []TypeInfo{
	{Name: TypeNoteChanged, Description: "A corpus note was created, updated, published, unpublished or deleted."},
	{Name: TypeWebhookTest, Description: "A test event sent on request to a single endpoint."},
	{Name: "access_request.created", Description: "Someone requested access to the instance."},
	{Name: "access_request.approved", Description: "An access request was approved."},
	{Name: "access_request.status_changed", Description: "An access request changed status."},
	{Name: "code.issued", Description: "An access code was issued."},
	{Name: "code.revoked", Description: "An access code was revoked."},
	{Name: "code.redeemed", Description: "An access code was redeemed."},
	{Name: "conversation.started", Description: "A visitor started a conversation."},
	{Name: "conversation.message", Description: "A message was added to a conversation."},
	{Name: "conversation.pruned", Description: "Old conversations were pruned."},
	{Name: "ghost.accepted", Description: "A ghost-written reply was accepted."},
	{Name: "booking.created", Description: "A booking was made."},
	{Name: "booking.cancelled", Description: "A booking was cancelled."},
	{Name: "booking.rescheduled", Description: "A booking was moved to another time."},
	{Name: "application.committed", Description: "A job application was committed."},
	{Name: "jobs.fetched", Description: "New job listings were fetched."},
	{Name: "writing.published", Description: "A piece of writing was published."},
	{Name: "writing.unpublished", Description: "A piece of writing was unpublished."},
	{Name: "vault.imported", Description: "A vault import finished."},
	{Name: "microsite.build.settled", Description: "A microsite build finished, successfully or not."},
	{Name: "page.promoted_live", Description: "A microsite page was promoted to live."},
	{Name: "page.rolled_back", Description: "A live microsite page was rolled back to an earlier version."},
	{Name: "page.unpublished", Description: "A microsite page was unpublished."},
	{Name: "microsite.store.doc_inserted", Description: "A document was inserted into a microsite store."},
	{Name: "api_key.issued", Description: "An API key was issued."},
	{Name: "api_key.revoked", Description: "An API key was revoked."},
	{Name: "supplier.connected", Description: "A supplier was connected."},
	{Name: "supplier.disconnected", Description: "A supplier was disconnected."},
	{Name: "supplier.activated", Description: "A connected supplier was made active."},
	{Name: "block.installed", Description: "A block was installed."},
	{Name: "block.failed", Description: "A block failed to install or run."},
	{Name: "gas.exhausted", Description: "The instance ran out of gas (usage credit)."},
	{Name: "gas.refilled", Description: "The instance's gas (usage credit) was refilled."},
	{Name: "instance.upgrade_requested", Description: "An upgrade of the instance was requested."},
	{Name: "owner.login", Description: "The owner signed in."},
	{Name: "owner.email_changed", Description: "The owner's email address was changed."},
	{Name: "owner.recovery_requested", Description: "Account recovery was requested for the owner."},
	{Name: "ip_ban.added", Description: "An IP address was banned."},
}

// operational lists the dispatcher's own event types (ExposureOperational):
// one per transition of the endpoint health state machine, emitted in the
// statement that records the transition (internal/delivery) to the operator's
// owner id, so the main application can tell an endpoint's owner.
var operational = []TypeInfo{
	{Name: TypeEndpointFailing, Description: "An endpoint started failing: a delivery to it did not succeed after the last one that did. New deliveries to it now wait out a cool-down."},
	{Name: TypeEndpointDisabled, Description: "An endpoint was disabled after failing continuously for the disable-after period; it gets no deliveries until its owner re-enables it."},
	{Name: TypeEndpointRecovered, Description: "A failing endpoint accepted a delivery again and is healthy."},
}

// known is every type with a schema: the catalog, then the operational types.
var known = slices.Concat(catalog, operational)

// exposures indexes known. Every catalog type is Webhook today; the map
// still stores the Exposure so a future Internal-but-catalogued type needs no
// new code path.
var exposures = func() map[string]Exposure {
	m := make(map[string]Exposure, len(known))
	for _, t := range catalog {
		m[t.Name] = ExposureWebhook
	}
	for _, t := range operational {
		m[t.Name] = ExposureOperational
	}
	return m
}()

// ExposureOf returns the Exposure of typ. Any type not in the catalog is
// ExposureInternal.
func ExposureOf(typ string) Exposure {
	return exposures[typ] // missing → zero value → Internal
}

// Known reports whether typ is in the catalog at all, whatever its
// Exposure. A type that is not is Internal too, but it is most often a
// misspelling, which ingest tells apart from a type declared Internal.
func Known(typ string) bool {
	_, ok := exposures[typ]
	return ok
}

// WebhookTypes returns the types whose Exposure is Webhook, the ones a
// publisher may publish, in a stable order. The slice is a fresh copy the
// caller may modify.
func WebhookTypes() []TypeInfo { return typesOf(ExposureWebhook) }

// OperationalTypes returns the types whose Exposure is Operational, the
// dispatcher's own events, in a stable order. The slice is a fresh copy the
// caller may modify.
func OperationalTypes() []TypeInfo { return typesOf(ExposureOperational) }

func typesOf(x Exposure) []TypeInfo {
	out := make([]TypeInfo, 0, len(known))
	for _, t := range known {
		if exposures[t.Name] == x {
			t.Schema, t.Example = Schema(t.Name), Example(t.Name)
			out = append(out, t)
		}
	}
	return out
}

// Publishable reports whether a publisher (gRPC, the outbox, SendTest) may
// publish events of typ: anything but the operational types, which only the
// dispatcher emits. Types outside the catalog are publishable and dropped
// as Internal.
func Publishable(typ string) bool { return exposures[typ] != ExposureOperational }

// Leaves reports whether e may be delivered outside the instance at all: its
// type is Webhook-exposed and its subject is not raw. Per-endpoint globs and
// scope are decided later; this is the instance-wide gate.
func Leaves(e *webhook.Event) bool {
	return e != nil && Exposed(e.Type) && !IsRawSubject(e.Subject)
}

// Exposed reports whether events of typ may leave the instance at all: its
// Exposure is Webhook or Operational.
func Exposed(typ string) bool {
	x := ExposureOf(typ)
	return x == ExposureWebhook || x == ExposureOperational
}

// IsRawSubject reports whether subject uses the raw scheme, which never leaves
// the instance. Validate already rejects subjects that don't start with a
// scheme, but this check is the last line before the wire, so it is
// deliberately more paranoid than Validate: it compares case-insensitively
// (schemes are case-insensitive), ignores leading whitespace, control and
// invisible format characters (BOM, zero-width space), and treats "raw:"
// without the slashes as raw too.
func IsRawSubject(subject string) bool {
	s := strings.TrimLeftFunc(subject, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	})
	const prefix = "raw:"
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
