package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on one filter, so that a filter costs the fanout a bounded time
// per event and a stored endpoint row a bounded size.
const (
	// MaxBytes bounds a filter's canonical JSON (compact, keys sorted).
	MaxBytes = 4096
	// MaxDepth bounds the nesting of $and and $or: a group inside a group
	// inside … at most this many levels below the top.
	MaxDepth = 4
	// MaxClauses bounds the comparisons (one per operator on a field) of
	// the whole filter.
	MaxClauses = 32
	// MaxValues bounds the values of one $in or $nin, and the members of
	// one $and or $or.
	MaxValues = 64
	// MaxPathSegments bounds a field path's segments ("data.a.b.c" has 4).
	MaxPathSegments = 8
	// MaxPathLen bounds a field path, in bytes.
	MaxPathLen = 256
)

// Root is the name filters carry in errors: "filter.data.status".
const Root = "filter"

// ErrInvalid is matched (errors.Is) by every *Error.
var ErrInvalid = errors.New("invalid filter")

// Error is a mistake in a filter: Field names the spot, rooted at Root
// ("filter.$or[1].data.count.$gt"), and Reason says what is wrong there.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Unwrap lets errors.Is(err, ErrInvalid) match.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errors is several mistakes (Check finds them all, up to a bound).
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap lets errors.As find each *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// op is a comparison operator.
type op uint8

const (
	opEq op = iota + 1
	opNeq
	opGt
	opGte
	opLt
	opLte
	opIn
	opNin
	opStartsWith
	opEndsWith
	opExist
)

var opNames = [...]string{"", "$eq", "$neq", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$startsWith", "$endsWith", "$exist"}

func (o op) String() string { return opNames[o] }

func opByName(name string) (op, bool) {
	for i, n := range opNames {
		if i > 0 && n == name {
			return op(i), true
		}
	}
	return 0, false
}

// Groups.
const (
	keyAnd = "$and"
	keyOr  = "$or"
)

// kind is a JSON value's kind as a filter compares it.
type kind uint8

const (
	kindNull kind = iota + 1
	kindBool
	kindNumber
	kindString
)

// value is one scalar of a filter.
type value struct {
	kind kind
	b    bool
	n    float64
	s    string
	// t is s read as an RFC 3339 date-time, when it is one (ordering
	// operators compare instants then).
	t      time.Time
	isTime bool
	// raw is the value as written, for explanations.
	raw string
}

// node is one condition: a group (and, or) or a comparison.
type node struct {
	and []*node
	or  []*node

	// A comparison: the field (as written, "data.status"), its path below
	// data (nil for the subject), the operator and its operand.
	field   string
	subject bool
	path    []string
	op      op
	val     value
	list    []value
	// spot names the operator in errors: "filter.data.status.$in".
	spot string
	// fieldSpot names the field: "filter.data.status".
	fieldSpot string
}

// Filter is a parsed filter. The zero value (and a parsed "{}") has no
// condition and matches every event.
type Filter struct {
	// top holds the top-level conditions, all of which must hold.
	top      []*node
	canon    []byte
	clauses  int
	needData bool
}

// Empty reports whether f has no condition (it matches everything).
func (f *Filter) Empty() bool { return f == nil || len(f.top) == 0 }

// JSON is f in canonical form (compact, keys sorted): what is stored and
// shown. "{}" for an empty filter.
func (f *Filter) JSON() []byte {
	if f == nil || len(f.canon) == 0 {
		return []byte("{}")
	}
	return f.canon
}

// Clauses is how many comparisons f makes.
func (f *Filter) Clauses() int {
	if f == nil {
		return 0
	}
	return f.clauses
}

// Parse reads a filter from its JSON text. A mistake is an *Error naming
// the spot.
func Parse(text []byte) (*Filter, error) {
	// The limit is on the canonical form; a text much larger than it is
	// refused before it is parsed at all.
	if len(text) > 4*MaxBytes {
		return nil, &Error{Field: Root, Reason: "must be at most " + strconv.Itoa(MaxBytes) + " bytes of JSON"}
	}
	if !utf8.Valid(text) {
		return nil, &Error{Field: Root, Reason: "is not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &Error{Field: Root, Reason: jsonReason(text, err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{Field: Root, Reason: "holds more than one JSON value"}
	}
	if spot := duplicateKey(text); spot != "" {
		return nil, &Error{Field: spot, Reason: "is given twice"}
	}
	return FromValue(v)
}

// jsonReason says where text stops being JSON: "is not valid JSON at byte
// 17 (line 2, column 5): invalid character '}' …".
func jsonReason(text []byte, err error) string {
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		// The offending character is the Offset-th byte.
		line, col := position(text, syntax.Offset-1)
		return "is not valid JSON at byte " + strconv.FormatInt(syntax.Offset, 10) +
			" (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + "): " + syntax.Error()
	case errors.Is(err, io.EOF):
		return "is empty: want a JSON object such as {\"data.status\": \"published\"}"
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(text, int64(len(text)))
		return "is not valid JSON: it ends at byte " + strconv.Itoa(len(text)) + " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) +
			") with an object, array or string still open"
	default:
		return "is not valid JSON: " + err.Error()
	}
}

// position is the 1-based line and column of the byte at index i of text
// (i = len(text): just after its end).
func position(text []byte, i int64) (line, col int) {
	i = min(max(i, 0), int64(len(text)))
	before := text[:i]
	line = bytes.Count(before, []byte("\n")) + 1
	col = len(before) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// duplicateKey returns the spot of the first object member text (valid
// JSON) names twice, "" when none is: encoding/json would keep the last
// one silently.
func duplicateKey(text []byte) string {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var walk func(spot string) string
	walk = func(spot string) string {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return ""
				}
				key, _ := kt.(string)
				if seen[key] {
					return spotKey(spot, key)
				}
				seen[key] = true
				if dup := walk(spotKey(spot, key)); dup != "" {
					return dup
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if dup := walk(spotIndex(spot, i)); dup != "" {
					return dup
				}
			}
			_, _ = dec.Token()
		}
		return ""
	}
	return walk(Root)
}

// FromValue reads a filter from a decoded JSON value: a map[string]any
// whose numbers are float64 or json.Number (encoding/json, or a
// protobuf Struct's AsMap).
func FromValue(v any) (*Filter, error) {
	canon, err := json.Marshal(v)
	if err != nil {
		return nil, &Error{Field: Root, Reason: "cannot be written as JSON (numbers must be finite)"}
	}
	if len(canon) > MaxBytes {
		return nil, &Error{Field: Root, Reason: "is " + strconv.Itoa(len(canon)) + " bytes of JSON, more than the limit of " + strconv.Itoa(MaxBytes)}
	}
	p := &parser{}
	top, err := p.group(v, Root, 0)
	if err != nil {
		return nil, err
	}
	f := &Filter{top: top, clauses: p.clauses, needData: p.needData}
	if len(top) > 0 {
		f.canon = canon
	}
	return f, nil
}

type parser struct {
	clauses  int
	needData bool
}

// group reads one object of conditions (the filter, or a member of $and or
// $or) at spot, depth groups below the top.
func (p *parser) group(v any, spot string, depth int) ([]*node, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		if depth == 0 {
			return nil, &Error{Field: spot, Reason: `must be a JSON object of conditions, such as {"data.status": {"$in": ["published"]}}`}
		}
		return nil, &Error{Field: spot, Reason: `must be an object of conditions, such as {"data.status": "published"}`}
	}
	if depth > 0 && len(obj) == 0 {
		return nil, &Error{Field: spot, Reason: "must hold at least one condition"}
	}
	keys := sortedKeys(obj)
	out := make([]*node, 0, len(keys))
	for _, key := range keys {
		val := obj[key]
		kspot := spotKey(spot, key)
		switch {
		case key == keyAnd || key == keyOr:
			n, err := p.members(key, val, kspot, depth)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		case strings.HasPrefix(key, "$"):
			if _, ok := opByName(key); ok {
				return nil, &Error{Field: kspot, Reason: key + ` compares a field: write it inside one, as in {"data.count": {"` + key + `": …}}`}
			}
			return nil, &Error{Field: kspot, Reason: "is not a group: only $and and $or combine conditions" + suggestOp(key, []string{keyAnd, keyOr})}
		default:
			ns, err := p.field(key, val, kspot)
			if err != nil {
				return nil, err
			}
			out = append(out, ns...)
		}
	}
	return out, nil
}

// members reads $and or $or.
func (p *parser) members(key string, v any, spot string, depth int) (*node, error) {
	arr, ok := v.([]any)
	switch {
	case !ok:
		return nil, &Error{Field: spot, Reason: `must be an array of condition objects, such as [{"data.a": 1}, {"data.b": 2}]`}
	case len(arr) == 0:
		return nil, &Error{Field: spot, Reason: "must hold at least one condition object"}
	case len(arr) > MaxValues:
		return nil, &Error{Field: spot, Reason: "must hold at most " + strconv.Itoa(MaxValues) + " condition objects"}
	case depth+1 > MaxDepth:
		return nil, &Error{Field: spot, Reason: "nests $and and $or more than " + strconv.Itoa(MaxDepth) + " levels deep"}
	}
	n := &node{}
	for i, m := range arr {
		kids, err := p.group(m, spotIndex(spot, i), depth+1)
		if err != nil {
			return nil, err
		}
		member := &node{and: kids}
		if len(kids) == 1 {
			member = kids[0]
		}
		if key == keyAnd {
			n.and = append(n.and, member)
		} else {
			n.or = append(n.or, member)
		}
	}
	return n, nil
}

// field reads the conditions on one field.
func (p *parser) field(key string, v any, spot string) ([]*node, error) {
	subject, path, err := parsePath(key, spot)
	if err != nil {
		return nil, err
	}
	base := node{field: key, subject: subject, path: path, fieldSpot: spot}
	if !subject {
		p.needData = true
	}
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return nil, &Error{Field: spot, Reason: `must name at least one operator, such as {"$eq": …}`}
		}
		var ops, others []string
		for _, k := range sortedKeys(x) {
			if strings.HasPrefix(k, "$") {
				ops = append(ops, k)
			} else {
				others = append(others, k)
			}
		}
		switch {
		case len(ops) > 0 && len(others) > 0:
			return nil, &Error{Field: spot, Reason: "mixes operators (" + strings.Join(ops, ", ") + ") with other keys (" + strings.Join(others, ", ") +
				`): an object here holds operators only, such as {"$gte": 1, "$lt": 10}; a nested field is written as one path, "` + key + "." + others[0] + `"`}
		case len(ops) == 0:
			return nil, &Error{Field: spot, Reason: `is an object, which a filter does not compare: write the nested field as one path ("` + key + "." + others[0] +
				`") or use an operator, such as {"$eq": …}`}
		}
		out := make([]*node, 0, len(ops))
		for _, k := range ops {
			n, err := p.comparison(base, k, x[k], spotKey(spot, k))
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	case []any:
		return nil, &Error{Field: spot, Reason: `is an array, which a filter does not compare: for one of several values use {"$in": [...]}`}
	default:
		n, err := p.comparison(base, "$eq", v, spot)
		if err != nil {
			return nil, err
		}
		return []*node{n}, nil
	}
}

// comparison reads one operator and its operand.
func (p *parser) comparison(base node, name string, v any, spot string) (*node, error) {
	o, ok := opByName(name)
	if !ok {
		return nil, &Error{Field: spot, Reason: "is not an operator" + suggestOp(name, opNames[1:]) + "; the operators are " + strings.Join(opNames[1:], " ")}
	}
	p.clauses++
	if p.clauses > MaxClauses {
		return nil, &Error{Field: spot, Reason: "is one comparison too many: a filter makes at most " + strconv.Itoa(MaxClauses)}
	}
	n := base
	n.op, n.spot = o, spot
	switch o {
	case opEq, opNeq:
		val, err := scalar(v, spot)
		if err != nil {
			return nil, err
		}
		n.val = val
	case opGt, opGte, opLt, opLte:
		val, err := scalar(v, spot)
		if err != nil {
			return nil, err
		}
		switch {
		case val.kind == kindNumber:
		case val.kind == kindString && val.isTime:
		default:
			return nil, &Error{Field: spot, Reason: "must be a number, or a date-time string (RFC 3339, such as \"2026-12-01T00:00:00Z\")"}
		}
		n.val = val
	case opIn, opNin:
		arr, ok := v.([]any)
		switch {
		case !ok:
			return nil, &Error{Field: spot, Reason: `must be an array of values, such as ["published", "draft"]`}
		case len(arr) == 0:
			return nil, &Error{Field: spot, Reason: "must hold at least one value"}
		case len(arr) > MaxValues:
			return nil, &Error{Field: spot, Reason: "must hold at most " + strconv.Itoa(MaxValues) + " values"}
		}
		n.list = make([]value, len(arr))
		for i, el := range arr {
			val, err := scalar(el, spotIndex(spot, i))
			if err != nil {
				return nil, err
			}
			n.list[i] = val
		}
	case opStartsWith, opEndsWith:
		s, ok := v.(string)
		switch {
		case !ok:
			return nil, &Error{Field: spot, Reason: "must be a string"}
		case s == "":
			return nil, &Error{Field: spot, Reason: "must not be empty: every string " + map[op]string{opStartsWith: "starts", opEndsWith: "ends"}[o] + " with it"}
		}
		n.val = value{kind: kindString, s: s, raw: quote(s)}
	case opExist:
		b, ok := v.(bool)
		if !ok {
			return nil, &Error{Field: spot, Reason: "must be true (the field is present) or false (it is absent)"}
		}
		n.val = value{kind: kindBool, b: b, raw: strconv.FormatBool(b)}
	}
	return &n, nil
}

// scalar reads a string, number, boolean or null.
func scalar(v any, spot string) (value, error) {
	switch x := v.(type) {
	case nil:
		return value{kind: kindNull, raw: "null"}, nil
	case bool:
		return value{kind: kindBool, b: x, raw: strconv.FormatBool(x)}, nil
	case string:
		val := value{kind: kindString, s: x, raw: quote(x)}
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			val.t, val.isTime = t, true
		}
		return val, nil
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return value{}, &Error{Field: spot, Reason: "is a number out of range"}
		}
		return value{kind: kindNumber, n: f, raw: formatNumber(f)}, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return value{}, &Error{Field: spot, Reason: "is a number out of range"}
		}
		return value{kind: kindNumber, n: x, raw: formatNumber(x)}, nil
	default:
		return value{}, &Error{Field: spot, Reason: "must be a string, a number, true, false or null"}
	}
}

// parsePath reads a field path: "subject", or "data." and property names
// separated by dots.
func parsePath(key, spot string) (subject bool, path []string, err error) {
	if key == "subject" {
		return true, nil, nil
	}
	const usage = `is not a field a filter can test: use "subject" or "data.<property>"`
	rest, ok := strings.CutPrefix(key, "data.")
	switch {
	case key == "data":
		return false, nil, &Error{Field: spot, Reason: `names the whole data object: test one of its properties, such as "data.status"`}
	case !ok:
		reason := usage
		if looksLikePath(key) {
			reason += ` (did you mean "data.` + key + `"?)`
		}
		return false, nil, &Error{Field: spot, Reason: reason}
	case len(key) > MaxPathLen:
		return false, nil, &Error{Field: spot, Reason: "is a path longer than " + strconv.Itoa(MaxPathLen) + " bytes"}
	}
	path = strings.Split(rest, ".")
	if len(path) > MaxPathSegments-1 {
		return false, nil, &Error{Field: spot, Reason: "is a path of more than " + strconv.Itoa(MaxPathSegments) + " segments"}
	}
	if slices.Contains(path, "") {
		return false, nil, &Error{Field: spot, Reason: `has an empty segment: a path is property names separated by single dots, such as "data.booking.venue_id"`}
	}
	return false, path, nil
}

// looksLikePath: key could be a property path someone wrote without its
// "data." ("status", "booking.venue_id").
func looksLikePath(key string) bool {
	if key == "" || len(key) > MaxPathLen {
		return false
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// suggestOp is " (did you mean $x?)" when name is near one of names.
func suggestOp(name string, names []string) string {
	if n, ok := closest(name, names); ok {
		return " (did you mean " + n + "?)"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// spotKey names member key of the object at spot: "filter.data.status",
// or filter["odd key"] for a key that would not read as a path.
func spotKey(spot, key string) string {
	if key != "" && !strings.ContainsFunc(key, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == '$')
	}) {
		return spot + "." + key
	}
	return spot + "[" + strconv.Quote(key) + "]"
}

func spotIndex(spot string, i int) string { return spot + "[" + strconv.Itoa(i) + "]" }

// quote writes s as a JSON string (without escaping <, > and &).
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return strconv.Quote(s)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
