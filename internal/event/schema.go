package event

import (
	"bytes"
	"cmp"
	"embed"
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

// schemaFiles holds one JSON Schema (draft 2020-12) per catalog type,
// schemas/<type>.json, describing that type's data object. Each carries one
// example under "examples", which is what ListEventTypes and docs/events.md
// show.
//
//go:embed schemas/*.json
var schemaFiles embed.FS

// typeSchema is one catalog type's compiled schema and the texts shown to
// owners.
type typeSchema struct {
	compiled *jsonschema.Schema
	// text is the schema file as committed; example its first example,
	// compacted.
	text, example json.RawMessage
}

// schemas indexes every catalog type's schema. They are compiled once, when
// the package is initialised: a schema that does not compile or a catalog
// type without one is a programming error that every test of this package
// (and the binary's first start) reports at once.
var schemas = mustCompileSchemas()

func mustCompileSchemas() map[string]*typeSchema {
	m, err := compileSchemas()
	if err != nil {
		panic("event: " + err.Error())
	}
	return m
}

func compileSchemas() (map[string]*typeSchema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Formats are annotations unless asserted; a date-time that is not one is
	// exactly the kind of main-app bug validation is for.
	c.AssertFormat()
	out := make(map[string]*typeSchema, len(known))
	for _, t := range known {
		text, err := schemaFiles.ReadFile("schemas/" + t.Name + ".json")
		if err != nil {
			return nil, fmt.Errorf("type %s has no schema: %w", t.Name, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
		if err != nil {
			return nil, fmt.Errorf("schema of %s: %w", t.Name, err)
		}
		// An absolute URL of our own, so the compiler never looks at the
		// file system or the network.
		loc := "urn:dispatcher:event-data:" + t.Name
		if err := c.AddResource(loc, doc); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", t.Name, err)
		}
		compiled, err := c.Compile(loc)
		if err != nil {
			return nil, fmt.Errorf("schema of %s: %w", t.Name, err)
		}
		var withExamples struct {
			Examples []json.RawMessage `json:"examples"`
		}
		if err := json.Unmarshal(text, &withExamples); err != nil || len(withExamples.Examples) == 0 {
			return nil, fmt.Errorf("schema of %s: no example under \"examples\"", t.Name)
		}
		var example bytes.Buffer
		if err := json.Compact(&example, withExamples.Examples[0]); err != nil {
			return nil, fmt.Errorf("schema of %s: example: %w", t.Name, err)
		}
		out[t.Name] = &typeSchema{compiled: compiled, text: text, example: example.Bytes()}
	}
	return out, nil
}

// ValidateData checks data (already a valid JSON object, see
// webhook.Event.Validate) against typ's schema. A type outside the catalog
// has no schema and is never delivered, so its data is not checked.
//
// The error is a *webhook.FieldError whose Field is the JSON path of the
// first offending value ("data.plan", "data.items[2]") and whose Reason says
// what is wrong with it ("expected string") without repeating the value.
func ValidateData(typ string, data json.RawMessage) error {
	s := schemas[typ]
	if s == nil {
		return nil
	}
	// Numbers as json.Number, as the validator wants them. Unlike
	// jsonschema.UnmarshalJSON this does not look for a second value:
	// webhook.Event.Validate has already checked that data is exactly one
	// object, and the look costs a fifth of the whole check.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return &webhook.FieldError{Field: webhook.FieldData, Reason: "must be a JSON object"}
	}
	err := s.compiled.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &webhook.FieldError{Field: webhook.FieldData, Reason: "does not match the schema of " + typ}
	}
	return firstViolation(typ, ve, doc)
}

// violation is one leaf of a validation error tree.
type violation struct {
	path, reason string
}

// firstViolation reduces the library's error tree to one field error. The
// leaves are sorted so the answer does not depend on the order the
// validator happened to visit keywords in.
func firstViolation(typ string, ve *jsonschema.ValidationError, doc any) error {
	var leaves []violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, describe(typ, e, doc))
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
	return &webhook.FieldError{Field: leaves[0].path, Reason: leaves[0].reason}
}

// describe names the value an error is about and says what is wrong in
// words meant for the publisher. Values are never quoted: they may be large
// or hostile; the schema's own words (types, enum members) are.
func describe(typ string, e *jsonschema.ValidationError, doc any) violation {
	path := jsonPath(e.InstanceLocation, doc)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return violation{path, "expected " + strings.Join(k.Want, " or ")}
	case *kind.Required:
		// Named at the missing property, which is where the publisher
		// must add something.
		missing := slices.Sorted(slices.Values(k.Missing))
		return violation{path + "." + missing[0], "is required"}
	case *kind.AdditionalProperties:
		props := slices.Sorted(slices.Values(k.Properties))
		return violation{path + "." + props[0], "is not a property of " + typ + " data"}
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		return violation{path, "must be one of " + strings.Join(want, ", ")}
	case *kind.Const:
		return violation{path, "must be " + fmt.Sprint(k.Want)}
	case *kind.Format:
		if k.Want == "date-time" {
			return violation{path, "must be an RFC 3339 date-time"}
		}
		return violation{path, "must be a valid " + k.Want}
	case *kind.MinLength:
		return violation{path, "must be at least " + strconv.Itoa(k.Want) + " characters"}
	case *kind.MaxLength:
		return violation{path, "must be at most " + strconv.Itoa(k.Want) + " characters"}
	case *kind.Minimum:
		return violation{path, "must be at least " + k.Want.RatString()}
	case *kind.Maximum:
		return violation{path, "must be at most " + k.Want.RatString()}
	case *kind.FalseSchema:
		return violation{path, "is not allowed"}
	default:
		return violation{path, "does not match the schema of " + typ + " data"}
	}
}

// jsonPath renders a JSON Pointer's tokens as "data.a.b[2]", looking at
// the document to tell an array index from an object key that happens to be
// a number.
func jsonPath(tokens []string, doc any) string {
	var b strings.Builder
	b.WriteString(webhook.FieldData)
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

// Schema returns typ's data schema as committed (JSON text), or nil for a
// type outside the catalog. The caller must not modify it.
func Schema(typ string) json.RawMessage {
	if s := schemas[typ]; s != nil {
		return s.text
	}
	return nil
}

// Example returns an example data object of typ (compact JSON text) that
// its schema accepts, or nil for a type outside the catalog. The caller
// must not modify it.
func Example(typ string) json.RawMessage {
	if s := schemas[typ]; s != nil {
		return s.example
	}
	return nil
}
