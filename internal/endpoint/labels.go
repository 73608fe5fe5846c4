package endpoint

import (
	"maps"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Names and labels: a name for people (the admin UI's list), and the
// owner's own key/value labels ({"env": "prod", "team": "billing"}) that
// ListEndpoints filters by. Both are free text the dispatcher never
// interprets; the bounds keep rows and the admin UI small.
const (
	MaxNameLen       = 128 // characters (runes)
	MaxLabels        = 16
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 255 // characters (runes)
	// MaxLabelFilters bounds ListEndpoints' labels filter.
	MaxLabelFilters = 10
)

// Field names and update mask paths of names and labels.
const (
	FieldName   = "name"
	FieldLabels = "labels"
	PathName    = "name"
	PathLabels  = "labels"
)

// labelField names one label in a violation: labels["env"]. The key is
// quoted (a control character shows as an escape) and cut short.
func labelField(key string) string {
	if len(key) > MaxLabelKeyLen {
		key = key[:MaxLabelKeyLen] + "…"
	}
	return FieldLabels + "[" + strconv.Quote(key) + "]"
}

func (val *validator) name(v *violations, name string) {
	if desc := textProblem(name, MaxNameLen); desc != "" {
		v.add(FieldName, desc)
	}
}

// labels validates a label set (at most limit of them) and returns a copy
// ({} for none), so the store never sees nil.
func (val *validator) labels(v *violations, labels map[string]string, limit int) map[string]string {
	if len(labels) > limit {
		v.add(FieldLabels, "must hold at most "+strconv.Itoa(limit)+" labels")
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if desc := labelKeyProblem(k); desc != "" {
			v.add(labelField(k), desc)
			continue
		}
		if desc := textProblem(labels[k], MaxLabelValueLen); desc != "" {
			v.add(labelField(k), "value "+desc)
		}
	}
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	return out
}

// labelKeyProblem: a key is 1–63 characters of [a-z0-9] and '-', '_', '.',
// '/', starting with a letter or digit, so keys read the same in a URL, a
// shell and a log line, and "Env" and "env" are never two labels.
func labelKeyProblem(k string) string {
	if k == "" {
		return "key must not be empty"
	}
	if len(k) > MaxLabelKeyLen {
		return "key must be at most " + strconv.Itoa(MaxLabelKeyLen) + " characters"
	}
	for i := range len(k) {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.' || c == '/'):
		default:
			return "key must be lower-case letters, digits and - _ . /, starting with a letter or digit"
		}
	}
	return ""
}

// textProblem checks free text: valid UTF-8, at most limit characters, no
// control characters.
func textProblem(s string, limit int) string {
	switch {
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case utf8.RuneCountInString(s) > limit:
		return "must be at most " + strconv.Itoa(limit) + " characters"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "must not contain control characters"
		}
	}
	return ""
}
