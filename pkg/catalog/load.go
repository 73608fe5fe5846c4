package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Bounds on what a catalog may hold, so a wrong path (a home directory, a
// log file) fails fast instead of being read whole.
const (
	// MaxTypes bounds the types of one catalog.
	MaxTypes = 10000
	// MaxFileBytes bounds one catalog file.
	MaxFileBytes = 4 << 20
	// MaxDescriptionLen bounds a type's description, in bytes.
	MaxDescriptionLen = 1000
)

// Error is a mistake in a catalog: File names the file (as given, or its
// path inside the directory given) and Field the offending field ("scope",
// "types[3].schema.properties.op.type", "example.op"), or is empty when the
// file as a whole is wrong.
type Error struct {
	File   string
	Field  string
	Reason string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.File + ": " + e.Reason
	}
	return e.File + ": " + e.Field + ": " + e.Reason
}

// Load reads the catalog at path: a directory holding one <type>.json file
// per type, or a single JSON file {"types": [ … ]}. The built-in types are
// added. A mistake is an *Error naming the file and the field.
func Load(path string) (*Catalog, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if info.IsDir() {
		return load(os.DirFS(path), ".", path, false)
	}
	user, err := parseFile(os.DirFS(filepath.Dir(path)), filepath.Base(path), path)
	if err != nil {
		return nil, err
	}
	return newCatalog(path, user), nil
}

// load reads a directory of type files (dir inside fsys); source names it in
// errors and in Catalog.Source.
func load(fsys fs.FS, dir, source string, builtin bool) (*Catalog, error) {
	user, err := parseDir(fsys, dir, source, builtin)
	if err != nil {
		return nil, err
	}
	return newCatalog(source, user), nil
}

// parseDir reads every *.json file directly in dir, one type each.
func parseDir(fsys fs.FS, dir, source string, builtin bool) ([]*Type, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("catalog: %s: %w", source, err)
	}
	if len(files) == 0 {
		return nil, &Error{File: source, Reason: "holds no event type: want one <type>.json file per type"}
	}
	if len(files) > MaxTypes {
		return nil, &Error{File: source, Reason: "holds more than " + strconv.Itoa(MaxTypes) + " files"}
	}
	slices.Sort(files)
	types := make([]*Type, 0, len(files))
	for _, f := range files {
		name := filepath.Join(source, path.Base(f))
		text, err := readFile(fsys, f, name)
		if err != nil {
			return nil, err
		}
		t, err := parseType(text, name, "", builtin)
		if err != nil {
			return nil, err
		}
		if want := t.Name + ".json"; path.Base(f) != want {
			return nil, &Error{File: name, Field: "name", Reason: "must match the file name: the file of " + t.Name + " is " + want}
		}
		types = append(types, t)
	}
	return types, checkUnique(types, func(int) string { return "" })
}

// parseFile reads one file holding {"types": [ … ]}.
func parseFile(fsys fs.FS, name, source string) ([]*Type, error) {
	text, err := readFile(fsys, name, source)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Types []json.RawMessage `json:"types"`
	}
	if err := strictUnmarshal(text, &doc); err != nil {
		return nil, jsonError(source, "", "a catalog file (types)", err)
	}
	if len(doc.Types) == 0 {
		return nil, &Error{File: source, Field: "types", Reason: "must list at least one event type"}
	}
	if len(doc.Types) > MaxTypes {
		return nil, &Error{File: source, Field: "types", Reason: "must list at most " + strconv.Itoa(MaxTypes) + " event types"}
	}
	field := func(i int) string { return "types[" + strconv.Itoa(i) + "]" }
	types := make([]*Type, len(doc.Types))
	for i, raw := range doc.Types {
		t, err := parseType(raw, source, field(i)+".", false)
		if err != nil {
			return nil, err
		}
		types[i] = t
	}
	return types, checkUnique(types, func(i int) string { return field(i) + "." })
}

func readFile(fsys fs.FS, name, source string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	defer f.Close()
	text, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("catalog: %s: %w", source, err)
	}
	if len(text) > MaxFileBytes {
		return nil, &Error{File: source, Reason: "is larger than " + strconv.Itoa(MaxFileBytes>>20) + " MiB"}
	}
	return text, nil
}

// checkUnique refuses two types of one name, and a user type taking a
// built-in name. prefix(i) is how the i-th type's fields are named.
func checkUnique(types []*Type, prefix func(int) string) error {
	seen := make(map[string]bool, len(types))
	for i, t := range types {
		if seen[t.Name] {
			return &Error{File: t.file, Field: prefix(i) + "name", Reason: strconv.Quote(t.Name) + " is declared twice"}
		}
		seen[t.Name] = true
	}
	return nil
}

// typeFile is a type as written.
type typeFile struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Exposure    *string         `json:"exposure"`
	Scope       *string         `json:"scope,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Example     json.RawMessage `json:"example,omitempty"`
}

// parseType reads and checks one type; file and prefix name it in errors.
func parseType(text []byte, file, prefix string, builtin bool) (*Type, error) {
	fail := func(field, reason string) error { return &Error{File: file, Field: prefix + field, Reason: reason} }
	var tf typeFile
	if err := strictUnmarshal(text, &tf); err != nil {
		return nil, jsonError(file, prefix, "an event type (name, description, exposure, scope, schema, example)", err)
	}
	t := &Type{Builtin: builtin, file: file}
	switch {
	case tf.Name == nil:
		return nil, fail("name", "is required")
	case !webhook.IsTypeName(*tf.Name) || len(*tf.Name) > webhook.MaxTypeLen:
		return nil, fail("name", `must be dotted lower-case segments of [a-z0-9_] such as "invoice.paid", at most `+strconv.Itoa(webhook.MaxTypeLen)+" bytes")
	case !builtin && isBuiltin(*tf.Name):
		return nil, fail("name", strconv.Quote(*tf.Name)+" is built into the dispatcher and cannot be redefined")
	}
	t.Name = *tf.Name

	switch d := deref(tf.Description); {
	case tf.Description == nil || strings.TrimSpace(d) == "":
		return nil, fail("description", "is required: one sentence for the people subscribing")
	case len(d) > MaxDescriptionLen:
		return nil, fail("description", "must be at most "+strconv.Itoa(MaxDescriptionLen)+" bytes")
	case !utf8.ValidString(d) || strings.ContainsFunc(d, unicode.IsControl):
		return nil, fail("description", "must be text without control characters")
	default:
		t.Description = d
	}

	switch x := deref(tf.Exposure); {
	case tf.Exposure == nil:
		return nil, fail("exposure", `is required: "webhook" or "internal"`)
	case x == "webhook":
		t.Exposure = ExposureWebhook
	case x == "internal":
		t.Exposure = ExposureInternal
	case x == "operational" && builtin:
		t.Exposure = ExposureOperational
	default:
		return nil, fail("exposure", `must be "webhook" or "internal"`)
	}

	leaves := t.Exposure != ExposureInternal
	switch s := deref(tf.Scope); {
	case !leaves && tf.Scope != nil:
		return nil, fail("scope", "only a webhook type has a scope: an internal one never leaves")
	case t.Exposure == ExposureOperational:
		t.Scope = ScopeAll
	case !leaves:
		t.Scope = ScopeNone
	case tf.Scope == nil:
		return nil, fail("scope", "is required for a webhook type: all, published_slice or test_only")
	default:
		var ok bool
		if t.Scope, ok = scopeByName(s); !ok {
			return nil, fail("scope", "must be one of all, published_slice, test_only")
		}
	}

	if len(tf.Schema) == 0 || isNull(tf.Schema) {
		if leaves {
			return nil, fail("schema", "is required for a webhook type: the JSON Schema of its data object")
		}
		if len(tf.Example) > 0 && !isNull(tf.Example) {
			return nil, fail("example", "needs a schema to be checked against")
		}
		return t, nil
	}
	if err := t.compile(tf.Schema, fail); err != nil {
		return nil, err
	}
	if len(tf.Example) == 0 || isNull(tf.Example) {
		return nil, fail("example", "is required with a schema: a data object it accepts, shown to owners")
	}
	var example bytes.Buffer
	if err := json.Compact(&example, tf.Example); err != nil {
		return nil, fail("example", "must be JSON")
	}
	t.Example = example.Bytes()
	if err := t.validateData(t.Example, "example"); err != nil {
		if fe, ok := errors.AsType[*webhook.FieldError](err); ok {
			return nil, fail(fe.Field, "the example does not match the schema: "+fe.Reason)
		}
		return nil, fail("example", err.Error())
	}
	return t, nil
}

// compile checks the schema (its shape, what its scope needs) and compiles it.
func (t *Type) compile(schema json.RawMessage, fail func(field, reason string) error) error {
	var top struct {
		Type                 any             `json:"type"`
		AdditionalProperties json.RawMessage `json:"additionalProperties"` //nolint:tagliatelle // a JSON Schema keyword
		Properties           map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &top); err != nil {
		return fail("schema", "must be a JSON Schema object")
	}
	if top.Type != "object" {
		return fail("schema.type", `must be "object": data is a JSON object`)
	}
	if !bytes.Equal(bytes.TrimSpace(top.AdditionalProperties), []byte("false")) {
		return fail("schema.additionalProperties", "must be false: a catalog schema is closed, so nothing undeclared can leave")
	}
	switch t.Scope {
	case ScopePublishedSlice:
		for _, p := range []string{"published", "was_published"} {
			if top.Properties[p].Type != "boolean" {
				return fail("schema.properties."+p, "must be declared with \"type\": \"boolean\": the published_slice scope reads it")
			}
		}
	case ScopeTestOnly:
		if top.Properties["endpoint_id"].Type != "string" || !slices.Contains(top.Required, "endpoint_id") {
			return fail("schema.properties.endpoint_id", "must be a required string property: the test_only scope delivers to the endpoint it names")
		}
	}

	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fail("schema", "must be JSON: "+err.Error())
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Formats are annotations unless asserted; a date-time that is not one
	// is exactly the kind of main-app bug validation is for.
	c.AssertFormat()
	// No loader: a schema referring to another document (a file, a URL)
	// fails to compile instead of reaching out of the process.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	// An absolute URL of our own, so the compiler never looks at the file
	// system or the network.
	loc := "urn:dispatcher:event-data:" + t.Name
	if err := c.AddResource(loc, doc); err != nil {
		return fail("schema", err.Error())
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return schemaError(err, fail)
	}
	t.Schema, t.compiled = schema, compiled
	return nil
}

// schemaError names where in the schema the metaschema found a mistake.
func schemaError(err error, fail func(field, reason string) error) error {
	if sve, ok := errors.AsType[*jsonschema.SchemaValidationError](err); ok {
		if ve, ok := errors.AsType[*jsonschema.ValidationError](sve.Err); ok {
			leaf := ve
			for len(leaf.Causes) > 0 {
				leaf = leaf.Causes[0]
			}
			field := strings.Join(append([]string{"schema"}, leaf.InstanceLocation...), ".")
			return fail(field, "is not valid JSON Schema: "+leaf.ErrorKind.LocalizedString(message.NewPrinter(language.English)))
		}
	}
	return fail("schema", "does not compile: "+err.Error())
}

func scopeByName(s string) (Scope, bool) {
	for sc, n := range scopeNames {
		if n == s {
			return sc, true
		}
	}
	return ScopeNone, false
}

// isBuiltin reports whether name is one of the built-in types, which a
// catalog may not redefine.
func isBuiltin(name string) bool {
	switch name {
	case TypeWebhookTest, TypeEndpointFailing, TypeEndpointDisabled, TypeEndpointRecovered:
		return true
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func isNull(b json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// strictUnmarshal decodes exactly one JSON value, refusing fields v does not
// have: a misspelt "exposre" must not pass for a missing one.
func strictUnmarshal(text []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// jsonError names what encoding/json found wrong.
func jsonError(file, prefix, what string, err error) error {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return &Error{File: file, Field: strings.TrimSuffix(prefix, "."), Reason: "is not valid JSON: it ends too soon"}
	case errors.As(err, &syntax):
		return &Error{File: file, Field: strings.TrimSuffix(prefix, "."), Reason: "is not valid JSON (at byte " + strconv.FormatInt(syntax.Offset, 10) + "): " + syntax.Error()}
	case errors.As(err, &typ):
		return &Error{File: file, Field: prefix + typ.Field, Reason: "must be a JSON " + jsonKind(typ.Type.Kind().String())}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return &Error{File: file, Field: prefix + name, Reason: "is not a field of " + what}
	default:
		return &Error{File: file, Field: strings.TrimSuffix(prefix, "."), Reason: err.Error()}
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "ptr", "string":
		return "string"
	case "slice":
		return "array"
	case "struct", "map":
		return "object"
	default:
		return goKind
	}
}
