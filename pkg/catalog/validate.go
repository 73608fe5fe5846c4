package catalog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// ValidateData checks data (already a valid JSON object, see
// webhook.Event.Validate) against typ's schema. A type without a schema (in
// no catalog, or declared internal without one) is never delivered, so its
// data is not checked.
//
// The error is a *webhook.FieldError whose Field is the JSON path of the
// first offending value ("data.plan", "data.items[2]") and whose Reason says
// what is wrong with it ("expected string") without repeating the value.
func (c *Catalog) ValidateData(typ string, data json.RawMessage) error {
	t, ok := c.byName[typ]
	if !ok || t.compiled == nil {
		return nil
	}
	return t.validateData(data, webhook.FieldData)
}

// validateData checks data against t's schema; root names data in errors.
func (t *Type) validateData(data json.RawMessage, root string) error {
	// Numbers as json.Number, as the validator wants them. Unlike
	// jsonschema.UnmarshalJSON this does not look for a second value:
	// webhook.Event.Validate has already checked that data is exactly one
	// object, and the look costs a fifth of the whole check.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return &webhook.FieldError{Field: root, Reason: "must be a JSON object"}
	}
	err := t.compiled.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &webhook.FieldError{Field: root, Reason: "does not match the schema of " + t.Name}
	}
	return violations(t.Name, root, ve, doc)
}

// violation is one leaf of a validation error tree.
type violation struct {
	path, reason string
}

// maxViolations bounds the field errors of one data object: enough for any
// real mistake, and a hostile object cannot make the answer large.
const maxViolations = 20

// violations reduces the library's error tree to its field errors: a
// *webhook.FieldError when there is one, webhook.FieldErrors when there are
// more, so that a publisher learns every mistake at once. The leaves are
// sorted (one per field) so the answer does not depend on the order
// the validator happened to visit keywords in.
func violations(typ, root string, ve *jsonschema.ValidationError, doc any) error {
	var leaves []violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, describe(typ, root, e, doc)...)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.SortFunc(leaves, func(a, b violation) int {
		return cmp.Or(strings.Compare(a.path, b.path), strings.Compare(a.reason, b.reason))
	})
	// One violation per field: alternatives (anyOf, a oneOf's branches)
	// can fail the same field several ways, and the first says enough.
	leaves = slices.CompactFunc(leaves, func(a, b violation) bool { return a.path == b.path })
	if len(leaves) == 1 {
		return &webhook.FieldError{Field: leaves[0].path, Reason: leaves[0].reason}
	}
	out := make(webhook.FieldErrors, 0, min(len(leaves), maxViolations))
	for _, l := range leaves[:min(len(leaves), maxViolations)] {
		out = append(out, &webhook.FieldError{Field: l.path, Reason: l.reason})
	}
	return out
}

// describe names the value an error is about and says what is wrong in
// words meant for the publisher. Values are never quoted: they may be large
// or hostile; the schema's own words (types, enum members) are.
func describe(typ, root string, e *jsonschema.ValidationError, doc any) []violation {
	path := jsonPath(root, e.InstanceLocation, doc)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return []violation{{path, "expected " + strings.Join(k.Want, " or ")}}
	case *kind.Required:
		// Named at the missing property, which is where the publisher
		// must add something.
		var out []violation
		for _, m := range slices.Sorted(slices.Values(k.Missing)) {
			out = append(out, violation{path + "." + m, "is required"})
		}
		return out
	case *kind.AdditionalProperties:
		var out []violation
		for _, p := range slices.Sorted(slices.Values(k.Properties)) {
			out = append(out, violation{path + "." + p, "is not a property of " + typ + " data"})
		}
		return out
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		return []violation{{path, "must be one of " + strings.Join(want, ", ")}}
	case *kind.Const:
		return []violation{{path, "must be " + fmt.Sprint(k.Want)}}
	case *kind.Format:
		if k.Want == "date-time" {
			return []violation{{path, "must be an RFC 3339 date-time"}}
		}
		return []violation{{path, "must be a valid " + k.Want}}
	case *kind.MinLength:
		return []violation{{path, "must be at least " + strconv.Itoa(k.Want) + " characters"}}
	case *kind.MaxLength:
		return []violation{{path, "must be at most " + strconv.Itoa(k.Want) + " characters"}}
	case *kind.Minimum:
		return []violation{{path, "must be at least " + k.Want.RatString()}}
	case *kind.Maximum:
		return []violation{{path, "must be at most " + k.Want.RatString()}}
	case *kind.FalseSchema:
		return []violation{{path, "is not allowed"}}
	default:
		return []violation{{path, "does not match the schema of " + typ + " data"}}
	}
}

// jsonPath renders a JSON Pointer's tokens as "data.a.b[2]", looking at
// the document to tell an array index from an object key that happens to be
// a number.
func jsonPath(root string, tokens []string, doc any) string {
	var b strings.Builder
	b.WriteString(root)
	cur := doc
	for _, tok := range tokens {
		switch v := cur.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v) {
				cur = v[i]
			} else {
				cur = nil
			}
		case map[string]any:
			b.WriteString("." + tok)
			cur = v[tok]
		default:
			b.WriteString("." + tok)
			cur = nil
		}
	}
	return b.String()
}
