package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Input limits. They keep rows, log lines and the admin UI bounded.
const (
	MaxOwnerIDLen     = webhook.MaxOwnerIDLen
	MaxURLLen         = 2048
	MaxEventTypes     = 64
	MaxDescriptionLen = 512 // characters (runes)
	MaxEmbedIDLen     = 128
)

// Field names as they appear in field violations: the proto's field names, so
// a caller can map them straight onto its form.
const (
	FieldOwnerID     = "owner_id"
	FieldEndpointID  = "endpoint_id"
	FieldDeliveryID  = "delivery_id"
	FieldRequestID   = "request_id"
	FieldURL         = "url"
	FieldDescription = "description"
	FieldEventTypes  = "event_types"
	FieldEmbedID     = "embed_id"
	FieldUpdateMask  = "update_mask"
	FieldGracePeriod = "grace_period"
	FieldPageSize    = "page_size"
	FieldPageToken   = "page_token"
)

// ErrInvalid is matched (errors.Is) by every *ValidationError.
var ErrInvalid = errors.New("invalid argument")

// FieldViolation names one bad field and says what is wrong with it. The
// description never echoes the offending value.
type FieldViolation struct {
	Field       string
	Description string
}

// ValidationError lists every bad field of a request.
type ValidationError struct {
	Violations []FieldViolation
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return "invalid " + strings.Join(parts, "; ")
}

// Unwrap lets errors.Is(err, ErrInvalid) match.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// violations accumulates FieldViolations; its err is nil when there are none.
type violations []FieldViolation

func (v *violations) add(field, desc string) {
	*v = append(*v, FieldViolation{Field: field, Description: desc})
}

func (v *violations) err() error {
	if len(*v) == 0 {
		return nil
	}
	return &ValidationError{Violations: *v}
}

// validator checks request fields against the service's configuration.
type validator struct {
	policy       egress.Policy
	requireHTTPS bool
	// catalog is what globs and filters are checked against: the running
	// one, loaded per check.
	catalog *event.Running
}

// ownerID applies the event package's rule: one definition of a valid owner.
func (val *validator) ownerID(v *violations, owner string) {
	var fe *webhook.FieldError
	if err := webhook.ValidateOwnerID(owner); errors.As(err, &fe) {
		v.add(FieldOwnerID, fe.Reason)
	}
}

func (val *validator) url(v *violations, raw string) {
	if desc := val.urlProblem(raw); desc != "" {
		v.add(FieldURL, desc)
	}
}

func (val *validator) urlProblem(raw string) string {
	if raw == "" {
		return "must not be empty"
	}
	if len(raw) > MaxURLLen {
		return "must be at most " + strconv.Itoa(MaxURLLen) + " bytes"
	}
	for _, r := range raw {
		if r <= ' ' || r == 0x7f || !utf8.ValidRune(r) || r == utf8.RuneError {
			return "must not contain spaces, control characters or invalid UTF-8"
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's error quotes the input; describe the problem without it.
		return "must be a valid absolute URL"
	}
	switch u.Scheme {
	case "https":
	case "http":
		if val.requireHTTPS {
			return "must use https"
		}
	case "":
		return "must be an absolute URL with an http or https scheme"
	default:
		return "scheme must be http or https"
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return `must include a host, as in "https://example.com/webhooks"`
	}
	if !validHost(u.Hostname()) {
		return "host must be a DNS name or an IP address"
	}
	if numericHost(u.Hostname()) {
		return "host is a numeric address spelling (like 2130706433, 0x7f000001, 017700000001 or 127.1): " +
			"write an IPv4 address as four decimal numbers (a.b.c.d) or use a DNS name"
	}
	if u.User != nil {
		return "must not contain user information (credentials belong in the receiver's verification, not the URL)"
	}
	if strings.Contains(raw, "#") {
		return "must not contain a fragment"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port must be between 1 and 65535"
		}
	}
	if !val.hostAllowed(u.Hostname()) {
		// The same generic words as the egress error: the caller learns the
		// address is refused, not which internal ranges exist.
		return "host is not an allowed destination (internal, loopback, private and special-purpose addresses are refused)"
	}
	return ""
}

// validHost reports whether host (a URL's Hostname) is an IP address or a DNS
// name: dot-separated labels of letters, digits, '-' and '_', where non-ASCII
// letters are allowed (internationalised names; the HTTP client converts them
// to punycode). net/url lets < > " ' ( ) * + , ; = ! $ and & through in a
// host; no resolvable name contains them.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(host, ".")
	if name == "" {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return false
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			case r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)):
			default:
				return false
			}
		}
	}
	return true
}

// numericHost reports whether host is an IPv4 address in one of the legacy
// spellings (a single 32-bit number, octal or hex parts, fewer than four
// parts: "2130706433", "0x7f000001", "017700000001", "127.1", "127.0.0.01")
// rather than the four decimal parts netip accepts. Browsers (the WHATWG URL
// standard: a host whose last label is a number is IPv4) and C resolvers
// (inet_aton) read them as addresses while Go's resolver does not, so such a
// URL means different destinations to different parsers and never delivers
// here: it is refused whatever address it spells, public or not.
func numericHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	name := strings.TrimSuffix(host, ".")
	last := name[strings.LastIndexByte(name, '.')+1:]
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		return strings.Trim(last[2:], "0123456789abcdefABCDEF") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// hostAllowed pre-checks a literal IP (and the localhost names, which always
// resolve to loopback) against the egress policy. It is a courtesy that turns
// an obviously undeliverable endpoint into an immediate error; the control is
// the dial-time check in package egress, which also covers DNS names.
func (val *validator) hostAllowed(host string) bool {
	lower := strings.ToLower(strings.TrimSuffix(host, "."))
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return val.policy.Check(netip.MustParseAddr("127.0.0.1")) == nil ||
			val.policy.Check(netip.IPv6Loopback()) == nil
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return true // a DNS name: judged at dial time
	}
	return val.policy.Check(addr) == nil
}

func (val *validator) eventTypes(v *violations, globs []string) {
	switch {
	case len(globs) == 0:
		v.add(FieldEventTypes, `must list at least one event type glob ("*", "prefix.*" or a type name)`)
		return
	case len(globs) > MaxEventTypes:
		v.add(FieldEventTypes, "must list at most "+strconv.Itoa(MaxEventTypes)+" globs")
		return
	}
	seen := make(map[string]int, len(globs))
	for i, g := range globs {
		field := fmt.Sprintf("%s[%d]", FieldEventTypes, i)
		if err := event.ValidateGlobIn(val.catalog.Catalog(), g); err != nil {
			if ge, ok := errors.AsType[*event.GlobError](err); ok {
				v.add(field, ge.Reason)
			} else {
				v.add(field, "is not a valid event type glob")
			}
			continue
		}
		if j, dup := seen[g]; dup {
			v.add(field, "duplicates "+FieldEventTypes+"["+strconv.Itoa(j)+"]")
			continue
		}
		seen[g] = i
	}
}

func (val *validator) description(v *violations, d string) {
	switch {
	case !utf8.ValidString(d):
		v.add(FieldDescription, "must be valid UTF-8")
	case utf8.RuneCountInString(d) > MaxDescriptionLen:
		v.add(FieldDescription, "must be at most "+strconv.Itoa(MaxDescriptionLen)+" characters")
	default:
		for _, r := range d {
			// Line breaks and tabs are fine in a description; other control
			// characters (NUL above all, which Postgres text rejects) are not.
			if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
				v.add(FieldDescription, "must not contain control characters")
				return
			}
		}
	}
}

// requestID checks CreateEndpoint's optional idempotency key: a UUID or an
// opaque token, like an event id.
func (val *validator) requestID(v *violations, id string) {
	if id == "" {
		return
	}
	if len(id) > MaxRequestIDLen {
		v.add(FieldRequestID, "must be at most "+strconv.Itoa(MaxRequestIDLen)+" characters")
		return
	}
	for i := range len(id) {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			v.add(FieldRequestID, "must be a UUID or an opaque id of characters [A-Za-z0-9_-]")
			return
		}
	}
}

func (val *validator) embedID(v *violations, id string) {
	if id == "" {
		return // optional: a standalone endpoint
	}
	if len(id) > MaxEmbedIDLen {
		v.add(FieldEmbedID, "must be at most "+strconv.Itoa(MaxEmbedIDLen)+" characters")
		return
	}
	for i := range len(id) {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			v.add(FieldEmbedID, "must contain only characters [A-Za-z0-9_-]")
			return
		}
	}
}
