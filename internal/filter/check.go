package filter

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

// MaxErrors bounds the mistakes Check reports at once.
const MaxErrors = 8

// kinds is a set of JSON Schema types ("type": "string", …).
type kinds uint8

const (
	kString kinds = 1 << iota
	kNumber
	kInteger
	kBoolean
	kNull
	kObject
	kArray
)

var kindNames = []struct {
	k    kinds
	name string
}{{kString, "string"}, {kNumber, "number"}, {kInteger, "integer"}, {kBoolean, "boolean"}, {kNull, "null"}, {kObject, "object"}, {kArray, "array"}}

const scalarKinds = kString | kNumber | kInteger | kBoolean | kNull

// schemaField is what one type's schema says of one property path.
type schemaField struct {
	typeName string
	// kinds is 0 when the schema does not constrain the type.
	kinds    kinds
	dateTime bool
	// enum lists the values allowed (const counts as a one-value enum); nil
	// when any value of kinds is.
	enum []any
}

// Fields are the fields a filter may test for one endpoint: the subject,
// and the data properties that the schemas of the types it subscribes to
// declare. Build them with FieldsFor.
type Fields struct {
	// types are the subscribed types' names, sorted.
	types []string
	// paths maps "data.status" to what each subscribed type says of it.
	paths map[string][]schemaField
	// open holds paths below which a schema allows any property (no
	// "additionalProperties": false): anything under them passes.
	open []string
	// elsewhere maps a path that only types the endpoint does not subscribe
	// to have to their names.
	elsewhere map[string][]string
}

// Subscribed returns the types of cat an endpoint with these event_types
// globs receives and its filter applies to: the exposed types (webhook and
// operational) its globs match, but not test_only types (webhook.test),
// which reach the endpoint they name whatever its filter says.
func Subscribed(cat *catalog.Catalog, globs []string) []*catalog.Type {
	var out []*catalog.Type
	for _, t := range cat.Types() {
		if cat.Exposed(t.Name) && t.Scope != catalog.ScopeTestOnly && event.MatchAny(globs, t.Name) {
			out = append(out, t)
		}
	}
	return out
}

// FieldsFor reads what a filter may test on an endpoint subscribing to
// globs: the schemas of Subscribed(cat, globs).
func FieldsFor(cat *catalog.Catalog, globs []string) *Fields {
	f := &Fields{paths: map[string][]schemaField{}, elsewhere: map[string][]string{}}
	subscribed := Subscribed(cat, globs)
	for _, t := range subscribed {
		f.types = append(f.types, t.Name)
		walkSchema(t, func(path string, sf schemaField) { f.paths[path] = append(f.paths[path], sf) },
			func(path string) { f.open = append(f.open, path+".") })
	}
	for _, t := range cat.Types() {
		if !cat.Exposed(t.Name) || t.Scope == catalog.ScopeTestOnly || slices.Contains(subscribed, t) {
			continue
		}
		walkSchema(t, func(path string, _ schemaField) {
			if _, ok := f.paths[path]; !ok && !slices.Contains(f.elsewhere[path], t.Name) {
				f.elsewhere[path] = append(f.elsewhere[path], t.Name)
			}
		}, func(string) {})
	}
	return f
}

// walkSchema reads t's data schema and reports each property path with what
// the schema says of it, and each path below which any property is allowed.
func walkSchema(t *catalog.Type, field func(string, schemaField), open func(string)) {
	if len(t.Schema) == 0 {
		return
	}
	var root any
	if json.Unmarshal(t.Schema, &root) != nil {
		return
	}
	w := &walker{root: root, typeName: t.Name, field: field, open: open}
	w.walk(root, "data", 0, 0)
}

type walker struct {
	root     any
	typeName string
	field    func(string, schemaField)
	open     func(string)
}

// maxRefHops bounds the $ref chain followed, so a schema referring to
// itself ends.
const maxRefHops = 16

func (w *walker) walk(s any, path string, segs, hops int) {
	if b, ok := s.(bool); ok {
		if b && path != "data" {
			w.field(path, schemaField{typeName: w.typeName})
			w.open(path)
		}
		return
	}
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	if ref, ok := m["$ref"].(string); ok && hops < maxRefHops {
		if target := w.resolve(ref); target != nil {
			w.walk(target, path, segs, hops+1)
		}
	}
	sf := schemaField{typeName: w.typeName, kinds: kindsOf(m["type"])}
	if f, _ := m["format"].(string); f == "date-time" {
		sf.dateTime = true
	}
	if e, ok := m["enum"].([]any); ok {
		sf.enum = e
	}
	if c, ok := m["const"]; ok {
		sf.enum = []any{c}
	}
	_, hasType := m["type"]
	_, hasEnum := m["enum"]
	_, hasConst := m["const"]
	_, hasRef := m["$ref"]
	combined := false
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if subs, ok := m[k].([]any); ok {
			combined = true
			for _, sub := range subs {
				w.walk(sub, path, segs, hops)
			}
		}
	}
	for _, k := range []string{"then", "else"} {
		if sub, ok := m[k]; ok {
			combined = true
			w.walk(sub, path, segs, hops)
		}
	}
	if path != "data" && (hasType || hasEnum || hasConst || (!combined && !hasRef)) {
		w.field(path, sf)
	}
	props, _ := m["properties"].(map[string]any)
	if segs < MaxPathSegments-1 {
		for _, name := range sortedKeys(props) {
			w.walk(props[name], path+"."+name, segs+1, hops)
		}
	}
	// Without "additionalProperties": false, an object may hold properties
	// the schema does not name, and a filter may test them.
	if ap, ok := m["additionalProperties"]; (!ok || ap != false) && path != "data" && (sf.kinds == 0 || sf.kinds&kObject != 0) && !hasRef && !combined {
		w.open(path)
	}
	if _, ok := m["patternProperties"]; ok && path != "data" {
		w.open(path)
	}
}

// resolve follows a local reference ("#/$defs/venue"); nil for any other.
func (w *walker) resolve(ref string) any {
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil
	}
	cur := w.root
	for tok := range strings.SplitSeq(strings.TrimPrefix(ptr, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[tok]; !ok {
			return nil
		}
	}
	return cur
}

func kindsOf(t any) kinds {
	var names []any
	switch x := t.(type) {
	case string:
		names = []any{x}
	case []any:
		names = x
	}
	var k kinds
	for _, n := range names {
		for _, kn := range kindNames {
			if n == kn.name {
				k |= kn.k
			}
		}
	}
	return k
}

func (k kinds) String() string {
	var parts []string
	for _, kn := range kindNames {
		if k&kn.k != 0 {
			parts = append(parts, kn.name)
		}
	}
	if len(parts) == 0 {
		return "any value"
	}
	return strings.Join(parts, " or ")
}

// Types are the names of the types the fields come from.
func (f *Fields) Types() []string { return slices.Clone(f.types) }

// Paths lists the property paths the fields know ("data.status"), sorted,
// for people and forms.
func (f *Fields) Paths() []string { return sortedKeys(f.paths) }

func (f *Fields) isOpen(path string) bool {
	for _, p := range f.open {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Check holds f against fields: every field it tests must be one the
// subscribed types' schemas declare, every operator must apply to the
// field's type and every value must be one the field can hold. The error
// is Errors (at most MaxErrors of them), each naming its spot.
func (f *Filter) Check(fields *Fields) error {
	if f == nil {
		return nil
	}
	var errs Errors
	var walk func(n *node)
	walk = func(n *node) {
		for _, m := range n.and {
			walk(m)
		}
		for _, m := range n.or {
			walk(m)
		}
		if n.op != 0 && len(errs) < MaxErrors {
			if e := fields.check(n); e != nil {
				errs = append(errs, e)
			}
		}
	}
	for _, n := range f.top {
		walk(n)
	}
	// A field tested by several operators is reported once if it is not a
	// field at all.
	errs = slices.CompactFunc(errs, func(a, b *Error) bool { return a.Field == b.Field && a.Reason == b.Reason })
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// subjectField is what a filter knows of the subject: a string, always
// present.
var subjectField = []schemaField{{kinds: kString}}

func (f *Fields) check(n *node) *Error {
	var sfs []schemaField
	if n.subject {
		if n.op == opExist {
			return &Error{Field: n.spot, Reason: "every event has a subject: test its value instead, such as {\"$startsWith\": \"wiki://\"}"}
		}
		sfs = subjectField
	} else {
		sfs = f.paths[n.field]
		if len(sfs) == 0 {
			if f.isOpen(n.field) {
				return nil
			}
			return &Error{Field: n.fieldSpot, Reason: f.unknown(n.field)}
		}
	}
	// The operator must apply to the field in at least one subscribed
	// type, and the operand must be a value the field can hold there.
	var applies []schemaField
	for _, sf := range sfs {
		if sf.kinds == 0 || opApplies(n.op, sf) {
			applies = append(applies, sf)
		}
	}
	if len(applies) == 0 {
		return &Error{Field: n.spot, Reason: "cannot apply to " + n.field + ", " + describeField(sfs[0]) + ": " + opUse(n.op)}
	}
	switch n.op {
	case opEq, opNeq:
		return valueFits(n.field, n.spot, &n.val, applies)
	case opIn, opNin:
		for i := range n.list {
			if e := valueFits(n.field, spotIndex(n.spot, i), &n.list[i], applies); e != nil {
				return e
			}
		}
	case opGt, opGte, opLt, opLte:
		for _, sf := range applies {
			if sf.kinds == 0 || n.val.kind == kindNumber && sf.kinds&(kNumber|kInteger) != 0 || n.val.isTime && sf.dateTime {
				return nil
			}
		}
		if applies[0].dateTime {
			return &Error{Field: n.spot, Reason: "must be a date-time string (RFC 3339, such as \"2026-12-01T00:00:00Z\"): " + n.field + " is one"}
		}
		return &Error{Field: n.spot, Reason: "must be a number: " + n.field + " is " + article(applies[0].kinds)}
	}
	return nil
}

// opApplies reports whether o can apply to a field sf describes (of a known
// type).
func opApplies(o op, sf schemaField) bool {
	switch o {
	case opExist:
		return true
	case opEq, opNeq, opIn, opNin:
		return sf.kinds&scalarKinds != 0
	case opGt, opGte, opLt, opLte:
		return sf.kinds&(kNumber|kInteger) != 0 || sf.kinds&kString != 0 && sf.dateTime
	case opStartsWith, opEndsWith:
		return sf.kinds&kString != 0
	}
	return false
}

// opUse says what an operator applies to.
func opUse(o op) string {
	switch o {
	case opEq, opNeq, opIn, opNin:
		return o.String() + " compares strings, numbers, booleans and null, not objects or arrays"
	case opGt, opGte, opLt, opLte:
		return o.String() + " orders numbers and date-times (strings with \"format\": \"date-time\"), nothing else"
	case opStartsWith, opEndsWith:
		return o.String() + " applies to strings only"
	}
	return o.String() + " does not apply here"
}

func describeField(sf schemaField) string {
	s := article(sf.kinds)
	if sf.dateTime {
		s = "a date-time string"
	}
	if sf.typeName != "" {
		s += " in " + sf.typeName
	}
	return s
}

func article(k kinds) string {
	s := k.String()
	if strings.HasPrefix(s, "a") || strings.HasPrefix(s, "i") || strings.HasPrefix(s, "o") {
		return "an " + s
	}
	return "a " + s
}

// valueFits checks an operand of $eq, $neq, $in or $nin against the fields
// the operator applies to: it must be of one's type, and in its enum when
// it has one.
func valueFits(field, spot string, v *value, sfs []schemaField) *Error {
	var reason string
	for _, sf := range sfs {
		r := fitReason(field, v, sf)
		if r == "" {
			return nil
		}
		if reason == "" {
			reason = r
		}
	}
	return &Error{Field: spot, Reason: reason}
}

// fitReason is why v cannot be a value of the field sf describes, "" when
// it can be.
func fitReason(field string, v *value, sf schemaField) string {
	if sf.kinds != 0 {
		ok := false
		switch v.kind {
		case kindString:
			ok = sf.kinds&kString != 0
		case kindNumber:
			ok = sf.kinds&kNumber != 0 || sf.kinds&kInteger != 0 && v.n == float64(int64(v.n))
		case kindBool:
			ok = sf.kinds&kBoolean != 0
		case kindNull:
			ok = sf.kinds&kNull != 0
		}
		if !ok {
			if v.kind == kindNumber && sf.kinds&kInteger != 0 {
				return "must be a whole number: " + field + " is an integer"
			}
			return "must be " + article(sf.kinds) + ": " + field + " is one" + inType(sf)
		}
	}
	if sf.enum != nil {
		for _, e := range sf.enum {
			if equal(e, v) {
				return ""
			}
		}
		return "is not a value " + field + " takes" + inType(sf) + ": it is one of " + enumList(sf.enum)
	}
	return ""
}

func inType(sf schemaField) string {
	if sf.typeName == "" {
		return ""
	}
	return " (in " + sf.typeName + ")"
}

func enumList(enum []any) string {
	parts := make([]string, 0, len(enum))
	for _, e := range enum {
		b, err := json.Marshal(e)
		if err != nil {
			continue
		}
		parts = append(parts, string(b))
	}
	return strings.Join(parts, ", ")
}

// unknown says that no subscribed type has path, with the path meant when
// one is near, or the types that have it when the endpoint does not
// subscribe to them.
func (f *Fields) unknown(path string) string {
	s := "no event type this endpoint subscribes to has " + path
	if len(f.types) == 0 {
		return s + ": it subscribes to no type a filter applies to"
	}
	s += " (" + listTypes(f.types) + ")"
	candidates := sortedKeys(f.paths)
	if near, ok := closest(path, candidates); ok {
		return s + `; did you mean "` + near + `"?`
	}
	if others := f.elsewhere[path]; len(others) > 0 {
		return s + "; " + listTypes(others) + " " + pick(len(others) == 1, "has", "have") + " it, and the endpoint's event_types do not include " + pick(len(others) == 1, "it", "them")
	}
	if len(candidates) > 0 && len(candidates) <= 12 {
		s += "; the fields are: subject, " + strings.Join(candidates, ", ")
	}
	return s
}

// listTypes names types, the first few of them.
func listTypes(types []string) string {
	const most = 4
	if len(types) <= most {
		return strings.Join(types, ", ")
	}
	return strings.Join(types[:most], ", ") + " and " + strconv.Itoa(len(types)-most) + " more"
}
