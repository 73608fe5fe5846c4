package event

import (
	"errors"
	"strconv"
	"strings"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// MaxGlobLen bounds one subscription glob, in bytes.
const MaxGlobLen = 128

// ErrInvalidGlob is matched (errors.Is) by every *GlobError.
var ErrInvalidGlob = errors.New("invalid event type glob")

// GlobError reports why a subscription glob was rejected. Glob is the
// offending input, truncated to MaxGlobLen bytes so a hostile input cannot
// blow up an error message.
type GlobError struct {
	Glob   string
	Reason string
}

func (e *GlobError) Error() string {
	return "invalid event type glob " + strconv.Quote(e.Glob) + ": " + e.Reason
}

// Unwrap lets errors.Is(err, ErrInvalidGlob) match any glob error.
func (e *GlobError) Unwrap() error { return ErrInvalidGlob }

func globErr(g, reason string) *GlobError {
	if len(g) > MaxGlobLen {
		g = g[:MaxGlobLen] + "…"
	}
	return &GlobError{Glob: g, Reason: reason}
}

type globKind int

const (
	globInvalid globKind = iota
	globAll              // "*"
	globPrefix           // "prefix.*"
	globExact            // "a.b"
)

// classify parses g syntactically (no catalog lookup). For a prefix glob it
// returns the prefix including its trailing dot, ready for HasPrefix.
func classify(g string) (globKind, string) {
	switch {
	case len(g) > MaxGlobLen:
		return globInvalid, ""
	case g == "*":
		return globAll, ""
	case strings.HasSuffix(g, ".*"):
		if p := g[:len(g)-2]; webhook.IsTypePrefix(p) {
			return globPrefix, g[:len(g)-1]
		}
		return globInvalid, ""
	case webhook.IsTypeName(g):
		return globExact, g
	default:
		return globInvalid, ""
	}
}

// ValidateGlob checks a subscription glob when an endpoint is created or
// updated. Beyond the grammar (see the package doc), it rejects globs that
// could never match a catalog type, because those are typos that would
// otherwise make an endpoint silently receive nothing. The returned error is
// a *GlobError.
func ValidateGlob(g string) error { return ValidateGlobIn(Catalog(), g) }

// ValidateGlobIn is ValidateGlob against the catalog c.
func ValidateGlobIn(c *catalog.Catalog, g string) error {
	if g == "" {
		return globErr(g, "must not be empty")
	}
	if len(g) > MaxGlobLen {
		return globErr(g, "must be at most "+strconv.Itoa(MaxGlobLen)+" bytes")
	}
	kind, prefix := classify(g)
	switch kind {
	case globAll:
		return nil
	case globPrefix:
		for _, t := range c.Types() {
			if t.Exposure != ExposureInternal && strings.HasPrefix(t.Name, prefix) {
				return nil
			}
		}
		return globErr(g, "matches no webhook event type")
	case globExact:
		if x := c.ExposureOf(g); x != ExposureWebhook && x != ExposureOperational {
			return globErr(g, "is not a webhook event type")
		}
		return nil
	}
	if strings.Contains(g, "*") {
		return globErr(g, `"*" is allowed only alone or as the whole last segment ("prefix.*")`)
	}
	return globErr(g, `must be "*", "prefix.*" or a type name like "corpus.note.changed"`)
}

// MatchGlob reports whether typ matches g. It is purely syntactic so that a
// stored subscription keeps working if the catalog changes; a syntactically
// invalid glob matches nothing, so a bad row can never widen a subscription.
func MatchGlob(g, typ string) bool {
	kind, arg := classify(g)
	switch kind {
	case globAll:
		return true
	case globPrefix:
		return strings.HasPrefix(typ, arg)
	case globExact:
		return typ == arg
	default:
		return false
	}
}

// MatchAny reports whether typ matches at least one of globs.
func MatchAny(globs []string, typ string) bool {
	for _, g := range globs {
		if MatchGlob(g, typ) {
			return true
		}
	}
	return false
}

// GlobLikePattern is a SQL LIKE pattern (backslash escapes, Postgres'
// default) that matches exactly the type names g matches, for filtering
// stored rows the way MatchGlob filters in memory. ok is false for a
// syntactically invalid glob.
func GlobLikePattern(g string) (pattern string, ok bool) {
	kind, arg := classify(g)
	// Type names and prefixes hold only [a-z0-9_.]: '_' is LIKE's one
	// metacharacter among them.
	escaped := strings.ReplaceAll(arg, "_", `\_`)
	switch kind {
	case globAll:
		return "%", true
	case globPrefix:
		return escaped + "%", true
	case globExact:
		return escaped, true
	default:
		return "", false
	}
}
