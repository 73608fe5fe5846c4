// Package openapidoc types the events of the HTTP/JSON API's OpenAPI
// document by an event catalog. internal/openapigen writes the committed
// document (docs/openapi/openapi.json) with the default catalog; the
// dispatcher serves that document retyped by the catalog it runs (ForCatalog),
// at start-up and on every catalog swap, and `dispatcher openapi --catalog`
// prints the same offline. A client generated from a dispatcher's
// /openapi.json therefore knows that dispatcher's own event types.
package openapidoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// Document is the OpenAPI document; its fields in the order a reader
// expects them (maps below are written sorted).
type Document struct {
	OpenAPI    string         `json:"openapi"`
	Info       map[string]any `json:"info"`
	Servers    []any          `json:"servers"`
	Security   []any          `json:"security"`
	Tags       []any          `json:"tags"`
	Paths      map[string]any `json:"paths"`
	Components map[string]any `json:"components"`
}

// Marshal writes d as the committed file is written: indented by two spaces,
// with a final newline.
func Marshal(d *Document) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	return append(b, '\n'), nil
}

const schemaRef = "#/components/schemas/"

// TypeEvent makes the event schema s typed by its type: one variant per type
// of cat that has a schema (every type an answer can hold; the publishable
// ones for an input), discriminated by type. The variants and their data
// schemas are added to schemas.
func TypeEvent(schemas, s map[string]any, cat *catalog.Catalog, input bool) error {
	var variants []any
	mapping := map[string]any{}
	for _, t := range cat.Types() {
		if t.Schema == nil || (input && t.Exposure == catalog.ExposureOperational) {
			continue
		}
		base := Pascal(t.Name)
		dataName, variantName := base+"Data", base+"Event"
		if _, done := schemas[dataName]; !done {
			var data map[string]any
			if err := decode(t.Schema, &data); err != nil {
				return fmt.Errorf("catalog type %s: schema: %w", t.Name, err)
			}
			delete(data, "$schema")
			delete(data, "$id")
			if _, ok := data["description"]; !ok && t.Description != "" {
				data["description"] = t.Description
			}
			if t.Example != nil {
				var ex any
				if err := decode(t.Example, &ex); err == nil {
					data["examples"] = []any{ex}
				}
			}
			schemas[dataName] = data
			schemas[variantName] = map[string]any{
				"type":        "object",
				"description": "A " + t.Name + " event: " + t.Description,
				"properties": map[string]any{
					"type": map[string]any{"const": t.Name},
					"data": map[string]any{"$ref": schemaRef + dataName},
				},
				"required": []any{"type"},
			}
		}
		ref := schemaRef + variantName
		variants = append(variants, map[string]any{"$ref": ref})
		mapping[t.Name] = ref
	}
	s["oneOf"] = variants
	s["discriminator"] = map[string]any{"propertyName": "type", "mapping": mapping}
	return nil
}

// ForCatalog returns doc, an OpenAPI document internal/openapigen wrote,
// with its events typed by cat instead of the catalog it was written with:
// the variants of every schema discriminated by type are replaced. The
// document of the default catalog comes back byte for byte.
func ForCatalog(doc []byte, cat *catalog.Catalog) ([]byte, error) {
	var d Document
	if err := decode(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	schemas, _ := d.Components["schemas"].(map[string]any)
	if schemas == nil {
		return nil, fmt.Errorf("openapi document: no components.schemas")
	}
	// The typed schemas (Event, EventInput) and the variants they name,
	// which are the old catalog's: removed before the new ones are added.
	typed := map[string]map[string]any{}
	for name, v := range schemas {
		s, _ := v.(map[string]any)
		disc, _ := s["discriminator"].(map[string]any)
		if disc == nil || disc["propertyName"] != "type" {
			continue
		}
		typed[name] = s
		mapping, _ := disc["mapping"].(map[string]any)
		for _, ref := range mapping {
			variant := strings.TrimPrefix(fmt.Sprint(ref), schemaRef)
			if vs, ok := schemas[variant].(map[string]any); ok {
				if props, ok := vs["properties"].(map[string]any); ok {
					if data, ok := props["data"].(map[string]any); ok {
						delete(schemas, strings.TrimPrefix(fmt.Sprint(data["$ref"]), schemaRef))
					}
				}
			}
			delete(schemas, variant)
		}
	}
	if len(typed) == 0 {
		return nil, fmt.Errorf("openapi document: no event schema discriminated by type")
	}
	for _, s := range typed {
		// An input schema refuses other fields (internal/openapigen), and
		// takes only publishable types.
		input := s["additionalProperties"] == false
		if err := TypeEvent(schemas, s, cat, input); err != nil {
			return nil, err
		}
	}
	return Marshal(&d)
}

// decode reads JSON keeping numbers as written, so that a document read and
// written back is unchanged.
func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// Pascal: "corpus.note.changed" → "CorpusNoteChanged".
func Pascal(name string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '.' || r == '_' || r == '-' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}
