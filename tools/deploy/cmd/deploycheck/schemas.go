package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// kubeconform validates against JSON schemas that it normally downloads from
// GitHub. Offline, we build them from sources fetched through the Go module
// proxy: Kubernetes' OpenAPI document (api/openapi-spec/swagger.json in the
// k8s.io/kubernetes module) for built-in kinds, and the Prometheus
// operator's CRDs (example/prometheus-operator-crd in its module) for
// ServiceMonitor and PrometheusRule. The conversion is the one behind
// kubeconform's own "-standalone-strict" schemas (openapi2jsonschema):
//
//   - every object with properties gets additionalProperties: false
//     (unknown fields are errors, as with kubectl --validate=strict);
//   - int-or-string becomes oneOf string/integer, Quantity string/number;
//   - references stay JSON pointers into a "definitions" section of the same
//     file, holding only what the kind reaches (so the file is standalone).
//
// File names follow kubeconform's {{.ResourceKind}}{{.KindSuffix}}.json.

const objectMetaDef = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

type gvk struct{ group, version, kind string }

func (g gvk) String() string {
	if g.group == "" {
		return g.version + "/" + g.kind
	}
	return g.group + "/" + g.version + "/" + g.kind
}

// fileName mirrors kubeconform's registry.schemaPath.
func (g gvk) fileName() string {
	suffix := "-" + strings.ToLower(strings.Split(g.group, ".")[0])
	if g.group == "" {
		return strings.ToLower(g.kind) + "-" + strings.ToLower(g.version) + ".json"
	}
	return strings.ToLower(g.kind) + suffix + "-" + strings.ToLower(g.version) + ".json"
}

func writeSchemas(swaggerPath, crdDir, outDir string, manifests []string, stdout io.Writer) error {
	need := map[gvk]bool{}
	for _, m := range manifests {
		content, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		docs, err := decodeYAMLDocs(m, content)
		if err != nil {
			return err
		}
		for _, d := range docs {
			api, _ := d.obj["apiVersion"].(string)
			if d.kind() == "" || api == "" {
				return fmt.Errorf("%s: an object without apiVersion and kind", m)
			}
			if strings.HasPrefix(api, "kustomize.config.k8s.io/") {
				continue
			}
			g, v, ok := strings.Cut(api, "/")
			if !ok {
				g, v = "", api
			}
			need[gvk{g, v, d.kind()}] = true
		}
	}

	raw, err := os.ReadFile(swaggerPath)
	if err != nil {
		return err
	}
	var swagger struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &swagger); err != nil {
		return fmt.Errorf("%s: %w", swaggerPath, err)
	}
	defs := swagger.Definitions
	builtin := map[gvk]string{}
	for name, def := range defs {
		for _, x := range list(def, "x-kubernetes-group-version-kind") {
			builtin[gvk{str(x, "group"), str(x, "version"), str(x, "kind")}] = name
		}
	}
	crds, err := loadCRDSchemas(crdDir)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	var missing []string
	var written []string
	for g := range need {
		var root map[string]any
		if name, ok := builtin[g]; ok {
			root = deepCopy(defs[name]).(map[string]any)
		} else if s, ok := crds[g]; ok {
			root = deepCopy(s).(map[string]any)
			// CRD schemas leave metadata open; hold it to ObjectMeta like
			// the API server does.
			if props := dict(root, "properties"); props != nil {
				props["metadata"] = map[string]any{"$ref": "#/definitions/" + objectMetaDef}
			}
		} else {
			missing = append(missing, g.String())
			continue
		}
		closure := map[string]any{}
		collectRefs(root, defs, closure)
		schema := strictSchema(root)
		schema["$schema"] = "http://json-schema.org/draft-04/schema#"
		defsOut := map[string]any{}
		for name, d := range closure {
			defsOut[name] = strictSchema(d.(map[string]any))
		}
		if _, ok := closure["io.k8s.apimachinery.pkg.api.resource.Quantity"]; ok {
			defsOut["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{
				"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}},
			}
		}
		if len(defsOut) > 0 {
			schema["definitions"] = defsOut
		}
		b, err := json.Marshal(schema)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, g.fileName()), b, 0o644); err != nil {
			return err
		}
		written = append(written, g.fileName())
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("no schema for %s: not in Kubernetes' OpenAPI document nor in the CRDs of %s", strings.Join(missing, ", "), crdDir)
	}
	sort.Strings(written)
	fmt.Fprintf(stdout, "schemas: %s\n", strings.Join(written, " "))
	return nil
}

// loadCRDSchemas reads every CustomResourceDefinition in dir.
func loadCRDSchemas(dir string) (map[gvk]map[string]any, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRD files in %s", dir)
	}
	out := map[gvk]map[string]any{}
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs, err := decodeYAMLDocs(f, content)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if d.kind() != "CustomResourceDefinition" {
				continue
			}
			group := str(d.obj, "spec", "group")
			kind := str(d.obj, "spec", "names", "kind")
			for _, v := range list(d.obj, "spec", "versions") {
				s := dict(v, "schema", "openAPIV3Schema")
				if s == nil {
					continue
				}
				// YAML gives ints; JSON schema handling wants JSON numbers.
				out[gvk{group, str(v, "name"), kind}] = jsonRoundTrip(s).(map[string]any)
			}
		}
	}
	return out, nil
}

func jsonRoundTrip(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// collectRefs adds every definition reachable from v to closure.
func collectRefs(v any, defs map[string]map[string]any, closure map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			if _, done := closure[name]; !done {
				d, ok := defs[name]
				if !ok {
					panic("dangling $ref " + ref)
				}
				c := deepCopy(d)
				closure[name] = c
				collectRefs(c, defs, closure)
			}
		}
		for _, e := range x {
			collectRefs(e, defs, closure)
		}
	case []any:
		for _, e := range x {
			collectRefs(e, defs, closure)
		}
	}
}

// strictSchema rewrites one schema node (and the schemas nested in it,
// following only schema-bearing keywords, so a property that happens to be
// named "properties" is not mistaken for the keyword).
func strictSchema(s map[string]any) map[string]any {
	if s["format"] == "int-or-string" {
		out := map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		if d, ok := s["description"]; ok {
			out["description"] = d
		}
		return out
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for k, v := range props {
			if m, ok := v.(map[string]any); ok {
				props[k] = strictSchema(m)
			}
		}
		if _, set := s["additionalProperties"]; !set && s["x-kubernetes-preserve-unknown-fields"] != true {
			s["additionalProperties"] = false
		}
	}
	if m, ok := s["additionalProperties"].(map[string]any); ok {
		s["additionalProperties"] = strictSchema(m)
	}
	switch items := s["items"].(type) {
	case map[string]any:
		s["items"] = strictSchema(items)
	case []any:
		for i, it := range items {
			if m, ok := it.(map[string]any); ok {
				items[i] = strictSchema(m)
			}
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := s[k].([]any); ok {
			for i, it := range l {
				if m, ok := it.(map[string]any); ok {
					l[i] = strictSchema(m)
				}
			}
		}
	}
	if m, ok := s["not"].(map[string]any); ok {
		s["not"] = strictSchema(m)
	}
	return s
}
