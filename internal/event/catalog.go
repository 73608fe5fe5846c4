package event

import (
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
)

func (x Exposure) String() string {
	switch x {
	case ExposureInternal:
		return "Internal"
	case ExposureWebhook:
		return "Webhook"
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
)

// TypeInfo describes one catalog type for ListEventTypes and the admin UI.
type TypeInfo struct {
	Name        string
	Description string
}

// catalog is docs/spec.md's event catalog in its order, which is also the order WebhookTypes
// returns: grouped by domain, so a subscription form reads naturally.
var catalog = []TypeInfo{
	{TypeNoteChanged, "A corpus note was created, updated, published, unpublished or deleted."},
	{TypeWebhookTest, "A test event sent on request to a single endpoint."},
	{"access_request.created", "Someone requested access to the instance."},
	{"access_request.approved", "An access request was approved."},
	{"access_request.status_changed", "An access request changed status."},
	{"code.issued", "An access code was issued."},
	{"code.revoked", "An access code was revoked."},
	{"code.redeemed", "An access code was redeemed."},
	{"conversation.started", "A visitor started a conversation."},
	{"conversation.message", "A message was added to a conversation."},
	{"conversation.pruned", "Old conversations were pruned."},
	{"ghost.accepted", "A ghost-written reply was accepted."},
	{"booking.created", "A booking was made."},
	{"booking.cancelled", "A booking was cancelled."},
	{"booking.rescheduled", "A booking was moved to another time."},
	{"application.committed", "A job application was committed."},
	{"jobs.fetched", "New job listings were fetched."},
	{"writing.published", "A piece of writing was published."},
	{"writing.unpublished", "A piece of writing was unpublished."},
	{"vault.imported", "A vault import finished."},
	{"microsite.build.settled", "A microsite build finished, successfully or not."},
	{"page.promoted_live", "A microsite page was promoted to live."},
	{"page.rolled_back", "A live microsite page was rolled back to an earlier version."},
	{"page.unpublished", "A microsite page was unpublished."},
	{"microsite.store.doc_inserted", "A document was inserted into a microsite store."},
	{"api_key.issued", "An API key was issued."},
	{"api_key.revoked", "An API key was revoked."},
	{"supplier.connected", "A supplier was connected."},
	{"supplier.disconnected", "A supplier was disconnected."},
	{"supplier.activated", "A connected supplier was made active."},
	{"block.installed", "A block was installed."},
	{"block.failed", "A block failed to install or run."},
	{"gas.exhausted", "The instance ran out of gas (usage credit)."},
	{"gas.refilled", "The instance's gas (usage credit) was refilled."},
	{"instance.upgrade_requested", "An upgrade of the instance was requested."},
	{"owner.login", "The owner signed in."},
	{"owner.email_changed", "The owner's email address was changed."},
	{"owner.recovery_requested", "Account recovery was requested for the owner."},
	{"ip_ban.added", "An IP address was banned."},
}

// exposures indexes catalog. Every catalog type is Webhook today; the map
// still stores the Exposure so a future Internal-but-catalogued type needs no
// new code path.
var exposures = func() map[string]Exposure {
	m := make(map[string]Exposure, len(catalog))
	for _, t := range catalog {
		m[t.Name] = ExposureWebhook
	}
	return m
}()

// ExposureOf returns the Exposure of typ. Any type not in the catalog is
// ExposureInternal.
func ExposureOf(typ string) Exposure {
	return exposures[typ] // missing → zero value → Internal
}

// WebhookTypes returns the types whose Exposure is Webhook, in a stable order.
// The slice is a fresh copy the caller may modify.
func WebhookTypes() []TypeInfo {
	out := make([]TypeInfo, 0, len(catalog))
	for _, t := range catalog {
		if exposures[t.Name] == ExposureWebhook {
			out = append(out, t)
		}
	}
	return out
}

// Leaves reports whether e may be delivered outside the instance at all: its
// type is Webhook-exposed and its subject is not raw. Per-endpoint globs and
// scope are decided later; this is the instance-wide gate.
func Leaves(e *webhook.Event) bool {
	return e != nil && ExposureOf(e.Type) == ExposureWebhook && !IsRawSubject(e.Subject)
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
