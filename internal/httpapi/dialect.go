package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/standmeet/webhook-dispatcher/internal/suggest"
)

// The dialect: what this package accepts beyond what grpc-gateway's
// transcoder does, and what it refuses that the transcoder would let
// through. A request is checked whole, before anything reaches the gRPC
// server, so a refused request has written nothing:
//
//   - JSON field names and query parameters in snake_case (the proto
//     names, as every answer writes them) or lowerCamelCase;
//   - update_mask in snake_case ("event_types,max_in_flight"), which the
//     protobuf JSON mapping would refuse, camelCase still accepted, as a
//     string or a JSON array of paths;
//   - durations as Go writes them ("1h", "90s", "1h30m") besides the
//     protobuf form ("3600s");
//   - an unknown JSON field or query parameter is a 400 naming it, never
//     ignored; so is a path parameter repeated in the body, a query
//     parameter on a route that takes a body (but owner_id and
//     update_mask, which are accepted in either place), and a value of
//     the wrong type;
//   - an Idempotency-Key header on a POST that creates something fills its
//     idempotency field (IdempotencyFields).

// requestCheck gathers the violations of one request.
type requestCheck struct {
	violations []FieldViolation
}

func (c *requestCheck) add(field, desc string) {
	c.violations = append(c.violations, FieldViolation{Field: field, Description: desc})
}

var idempotencyKeyRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// prepare checks r against rt and rewrites its query and body into what the
// transcoder accepts. It returns the violations, nothing when r may go on.
func prepare(r *http.Request, rt *route, pathParams map[string]string) []FieldViolation {
	c := &requestCheck{}
	query := r.URL.Query()
	for _, name := range rt.pathParams {
		if _, err := scalarFromString(rt.input.Fields().ByName(protoreflect.Name(name)), pathParams[name]); err != nil {
			c.add(name, err.Error())
		}
	}
	if rt.Body == "" {
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			c.add("Idempotency-Key", "only a POST that creates something takes an Idempotency-Key")
		}
		if n, _ := io.ReadFull(r.Body, make([]byte, 1)); n > 0 {
			c.add("body", r.Method+" "+rt.Pattern+" takes no body: its parameters go in the query")
		}
		r.URL.RawQuery = c.query(rt, query)
		return c.violations
	}

	// A route with a body: the body holds the request; owner_id and
	// update_mask may come in the query instead.
	obj := map[string]any{}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		c.add("body", "could not be read")
		return c.violations
	}
	if !utf8.Valid(raw) {
		// encoding/json would replace the bad bytes silently.
		c.add("body", "is not valid UTF-8")
		return c.violations
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			c.add("body", "is not valid JSON"+jsonSpot(raw, err)+": "+err.Error())
			return c.violations
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			c.add("body", "holds more than one JSON value")
			return c.violations
		}
		if dup := duplicateKey(raw); dup != "" {
			// encoding/json would keep the last silently.
			c.add(dup, "is given twice")
			return c.violations
		}
		o, ok := v.(map[string]any)
		if !ok {
			c.add("body", "must be a JSON object")
			return c.violations
		}
		obj = o
	}
	for _, key := range sortedKeys(query) {
		values := query[key]
		fd := fieldByName(rt.input, key)
		switch {
		case fd != nil && queryOnBodyRoute(fd) && !slices.Contains(rt.pathParams, string(fd.Name())):
			name := string(fd.Name())
			if len(values) != 1 {
				c.add(key, "must be given once")
				continue
			}
			if prev, ok := lookupAny(obj, rt.input, name); ok && prev != values[0] {
				c.add(name, "the query and the body say different things")
				continue
			}
			deleteField(obj, rt.input, name)
			obj[name] = values[0]
		case fd != nil:
			c.add(key, "belongs in the JSON body, not the query")
		default:
			c.add(key, "unknown query parameter")
		}
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		c.idempotencyKey(rt, obj, key)
	}
	c.object("", rt.input, obj, pathParams)
	if len(c.violations) > 0 {
		return c.violations
	}
	body, err := json.Marshal(obj)
	if err != nil {
		c.add("body", "could not be re-encoded: "+err.Error())
		return c.violations
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Type", "application/json")
	r.URL.RawQuery = ""
	return nil
}

// queryOnBodyRoute: the fields a route with a body also takes in the query,
// where REST users put them: owner_id (as on every other route) and
// update_mask (PATCH …?update_mask=event_types,max_in_flight).
func queryOnBodyRoute(fd protoreflect.FieldDescriptor) bool {
	if fd.Name() == "owner_id" && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
		return true
	}
	return fd.Kind() == protoreflect.MessageKind && !fd.IsList() && fd.Message().FullName() == "google.protobuf.FieldMask"
}

// idempotencyKey puts the Idempotency-Key header's value in the field of
// obj it stands for.
func (c *requestCheck) idempotencyKey(rt *route, obj map[string]any, key string) {
	path, ok := IdempotencyFields[rt.RPC]
	if !ok {
		c.add("Idempotency-Key", "only a POST that creates something takes an Idempotency-Key")
		return
	}
	if !idempotencyKeyRE.MatchString(key) {
		c.add("Idempotency-Key", "must be a UUID or 1 to 128 of [A-Za-z0-9_-]")
		return
	}
	parent, md, name := obj, rt.input, path
	if before, after, nested := strings.Cut(path, "."); nested {
		fd := md.Fields().ByName(protoreflect.Name(before))
		child, _ := lookupAny(obj, md, before)
		m, isObj := child.(map[string]any)
		if child == nil {
			m, isObj = map[string]any{}, true
			obj[before] = m
		}
		if !isObj {
			return // the body's own check names the field
		}
		parent, md, name = m, fd.Message(), after
	}
	if prev, ok := lookup(parent, md, name); ok && prev != "" && prev != key {
		c.add("Idempotency-Key", "differs from "+path+" in the body")
		return
	}
	deleteField(parent, md, name)
	parent[name] = key
}

// duplicateKey returns the path of the first object member raw (valid JSON)
// names twice, "" when none is.
func duplicateKey(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var walk func(path string) string
	walk = func(path string) string {
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
					return joinPath(path, key)
				}
				seen[key] = true
				if dup := walk(joinPath(path, key)); dup != "" {
					return dup
				}
			}
			_, _ = dec.Token() // }
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if dup := walk(path + "[" + strconv.Itoa(i) + "]"); dup != "" {
					return dup
				}
			}
			_, _ = dec.Token() // ]
		}
		return ""
	}
	return walk("")
}

// fieldByName finds a field by its proto name or its JSON name.
func fieldByName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByName(protoreflect.Name(name)); fd != nil {
		return fd
	}
	return md.Fields().ByJSONName(name)
}

// lookupAny returns obj's value of the field named name (proto name), under
// either of its JSON spellings.
func lookupAny(obj map[string]any, md protoreflect.MessageDescriptor, name string) (any, bool) {
	fd := md.Fields().ByName(protoreflect.Name(name))
	if v, ok := obj[name]; ok {
		return v, true
	}
	if fd != nil {
		v, ok := obj[fd.JSONName()]
		return v, ok
	}
	return nil, false
}

func lookup(obj map[string]any, md protoreflect.MessageDescriptor, name string) (string, bool) {
	v, ok := lookupAny(obj, md, name)
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	return s, true
}

func deleteField(obj map[string]any, md protoreflect.MessageDescriptor, name string) {
	delete(obj, name)
	if fd := md.Fields().ByName(protoreflect.Name(name)); fd != nil {
		delete(obj, fd.JSONName())
	}
}

// query checks the query parameters of a route without a body and returns
// the query the transcoder gets: proto names, normalised values.
func (c *requestCheck) query(rt *route, query url.Values) string {
	out := url.Values{}
	for _, key := range sortedKeys(query) {
		values := query[key]
		name, mapKey, isMap := strings.Cut(key, "[")
		fd := fieldByName(rt.input, name)
		switch {
		case fd == nil:
			c.add(key, "unknown query parameter")
			continue
		case slices.Contains(rt.pathParams, string(fd.Name())):
			c.add(key, "is in the path, not the query")
			continue
		case isMap != fd.IsMap():
			if fd.IsMap() {
				c.add(key, "is a map: give each entry as "+name+"[key]=value")
			} else {
				c.add(key, "unknown query parameter")
			}
			continue
		case isMap && (!strings.HasSuffix(mapKey, "]") || len(mapKey) < 2):
			c.add(key, "must be "+name+"[key]=value")
			continue
		case !fd.IsList() && len(values) > 1:
			c.add(key, "must be given once")
			continue
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && !isScalarMessage(fd.Message()):
			c.add(key, "unknown query parameter")
			continue
		}
		outKey := string(fd.Name())
		target := fd
		if isMap {
			outKey += "[" + mapKey
			target = fd.MapValue()
		}
		for _, v := range values {
			norm, err := scalarFromString(target, v)
			if err != nil {
				c.add(key, err.Error())
				continue
			}
			out.Add(outKey, norm)
		}
	}
	return out.Encode()
}

// sortedKeys: the query's parameters in order, so that errors name them
// the same way every time.
func sortedKeys(query url.Values) []string {
	return slices.Sorted(maps.Keys(query))
}

// isScalarMessage: a well-known message type written as one JSON string.
func isScalarMessage(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask":
		return true
	}
	return false
}

// object checks obj as a message md, field path prefix, rewriting its
// values in place. pathParams (top level only) are refused in the body
// unless equal to the path's.
func (c *requestCheck) object(prefix string, md protoreflect.MessageDescriptor, obj map[string]any, pathParams map[string]string) {
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		v := obj[key]
		field := joinPath(prefix, key)
		fd := fieldByName(md, key)
		if fd == nil {
			c.add(field, unknownField(md, key, prefix == ""))
			continue
		}
		if other := fd.JSONName(); key != other && key == string(fd.Name()) {
			if _, both := obj[other]; both {
				c.add(field, "is given twice, as "+key+" and "+other)
				continue
			}
		}
		if pv, ok := pathParams[string(fd.Name())]; ok {
			if s, _ := v.(string); s != pv {
				c.add(field, "is in the path; leave it out of the body")
			}
			continue
		}
		if v == nil {
			continue // null: the field is unset
		}
		if norm, ok := c.value(joinPath(prefix, string(fd.Name())), fd, v); ok {
			obj[key] = norm
		}
	}
}

// unknownField describes an unknown field key of md: with a hint when it is
// a field of one of md's message fields (a flat publish body whose event
// lacks its "event" wrapper), checked at the top level only, or else the
// name of md's nearest field (a typo).
func unknownField(md protoreflect.MessageDescriptor, key string, top bool) string {
	if top {
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.Kind() != protoreflect.MessageKind || fd.IsMap() || isScalarMessage(fd.Message()) || fieldByName(fd.Message(), key) == nil {
				continue
			}
			wrap := `{"` + string(fd.Name()) + `": {…}}`
			if fd.IsList() {
				wrap = `{"` + string(fd.Name()) + `": [{…}, …]}`
			}
			return "unknown field: " + key + " is a field of " + string(fd.Name()) + "; wrap it in " + wrap
		}
	}
	if near := nearestField(md, key); near != "" {
		return `unknown field; did you mean "` + near + `"?`
	}
	return "unknown field"
}

// nearestField is md's field name a few edits from key, "" when none is.
func nearestField(md protoreflect.MessageDescriptor, key string) string {
	fields := md.Fields()
	names := make([]string, fields.Len())
	for i := range fields.Len() {
		names[i] = string(fields.Get(i).Name())
	}
	return suggest.Nearest(key, names)
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// value checks one field's JSON value, returning it normalised.
func (c *requestCheck) value(field string, fd protoreflect.FieldDescriptor, v any) (any, bool) {
	switch {
	case fd.IsMap():
		m, ok := v.(map[string]any)
		if !ok {
			c.add(field, "must be a JSON object")
			return nil, false
		}
		for k, ev := range m {
			if ev == nil {
				continue
			}
			if norm, ok := c.single(field+"["+strconv.Quote(k)+"]", fd.MapValue(), ev); ok {
				m[k] = norm
			}
		}
		return m, true
	case fd.IsList():
		a, ok := v.([]any)
		if !ok {
			c.add(field, "must be a JSON array")
			return nil, false
		}
		for i, ev := range a {
			if norm, ok := c.single(field+"["+strconv.Itoa(i)+"]", fd, ev); ok {
				a[i] = norm
			}
		}
		return a, true
	}
	return c.single(field, fd, v)
}

// single checks one value of fd's kind (an element, for a list or a map).
func (c *requestCheck) single(field string, fd protoreflect.FieldDescriptor, v any) (any, bool) {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		md := fd.Message()
		switch md.FullName() {
		case "google.protobuf.Struct":
			if _, ok := v.(map[string]any); !ok {
				c.add(field, "must be a JSON object")
				return nil, false
			}
			return v, true
		case "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any":
			return v, true
		case "google.protobuf.FieldMask":
			return c.fieldMask(field, v)
		}
		if isScalarMessage(md) {
			s, ok := v.(string)
			if !ok {
				c.add(field, "must be a string: "+describe(fd))
				return nil, false
			}
			norm, err := scalarFromString(fd, s)
			if err != nil {
				c.add(field, err.Error())
				return nil, false
			}
			return norm, true
		}
		m, ok := v.(map[string]any)
		if !ok {
			c.add(field, "must be a JSON object")
			return nil, false
		}
		c.object(field, md, m, nil)
		return m, true
	}
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			c.add(field, "must be a string")
			return nil, false
		}
		return v, true
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			c.add(field, "must be true or false")
			return nil, false
		}
		return v, true
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case string:
			if fd.Enum().Values().ByName(protoreflect.Name(x)) == nil {
				c.add(field, describe(fd))
				return nil, false
			}
		case json.Number:
			if _, err := x.Int64(); err != nil {
				c.add(field, describe(fd))
				return nil, false
			}
		default:
			c.add(field, describe(fd))
			return nil, false
		}
		return v, true
	}
	// Numbers: a JSON number, or a string holding one (how int64 is written).
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		c.add(field, describe(fd))
		return nil, false
	}
	if _, err := scalarFromString(fd, s); err != nil {
		c.add(field, err.Error())
		return nil, false
	}
	return v, true
}

// fieldMask turns update_mask's paths, snake_case or camelCase, in a string
// or an array, into the camelCase string the protobuf JSON mapping reads.
func (c *requestCheck) fieldMask(field string, v any) (any, bool) {
	var paths []string
	switch x := v.(type) {
	case string:
		if strings.TrimSpace(x) != "" {
			paths = strings.Split(x, ",")
		}
	case []any:
		for _, p := range x {
			s, ok := p.(string)
			if !ok {
				c.add(field, "must be a comma-separated string of field names, or an array of them")
				return nil, false
			}
			paths = append(paths, s)
		}
	default:
		c.add(field, "must be a comma-separated string of field names, or an array of them")
		return nil, false
	}
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		p = strings.TrimSpace(p)
		if p == "" || !fieldMaskPathRE.MatchString(p) {
			c.add(field, fmt.Sprintf("%q is not a field name", p))
			return nil, false
		}
		out = append(out, lowerCamel(p))
	}
	return strings.Join(out, ","), true
}

var fieldMaskPathRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$`)

// lowerCamel: "max_in_flight" → "maxInFlight"; camelCase stays.
func lowerCamel(s string) string {
	var b strings.Builder
	up := false
	for _, r := range s {
		switch {
		case r == '_':
			up = true
		case up && r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

// scalarFromString checks a query parameter's (or a JSON string's) value
// for fd and returns it in the form the transcoder reads.
func scalarFromString(fd protoreflect.FieldDescriptor, s string) (string, error) {
	bad := func() (string, error) { return "", errors.New(describe(fd)) }
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return s, nil
	case protoreflect.BoolKind:
		if _, err := strconv.ParseBool(s); err != nil {
			return bad()
		}
		return s, nil
	case protoreflect.EnumKind:
		if fd.Enum().Values().ByName(protoreflect.Name(s)) != nil {
			return s, nil
		}
		if n, err := strconv.ParseInt(s, 10, 32); err == nil && fd.Enum().Values().ByNumber(protoreflect.EnumNumber(n)) != nil {
			return s, nil
		}
		return bad()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if _, err := strconv.ParseInt(s, 10, 32); err != nil {
			return bad()
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return bad()
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if _, err := strconv.ParseUint(s, 10, 32); err != nil {
			return bad()
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return bad()
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if f, err := strconv.ParseFloat(s, 64); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return bad()
		}
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return bad()
			}
			return s, nil
		case "google.protobuf.Duration":
			d, err := time.ParseDuration(s)
			if err != nil {
				return bad()
			}
			return protoDuration(d), nil
		}
		return bad()
	default:
		return bad()
	}
	return s, nil
}

// protoDuration writes d as the protobuf JSON mapping does: seconds with up
// to nine fractional digits and an "s".
func protoDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	secs, nanos := int64(d/time.Second), int64(d%time.Second)
	if nanos == 0 {
		return sign + strconv.FormatInt(secs, 10) + "s"
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", nanos), "0")
	return sign + strconv.FormatInt(secs, 10) + "." + frac + "s"
}

// describe says what a field takes.
func describe(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return "must be true or false"
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		names := make([]string, 0, vals.Len())
		for i := range vals.Len() {
			if vals.Get(i).Number() != 0 {
				names = append(names, string(vals.Get(i).Name()))
			}
		}
		return "must be one of " + strings.Join(names, ", ")
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "must be a 32-bit integer"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "must be an integer (a JSON number or a string of digits)"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "must be a finite number"
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return `must be an RFC 3339 time, e.g. "2026-01-02T15:04:05Z"`
		case "google.protobuf.Duration":
			return `must be a duration, e.g. "1h", "90s", "1h30m" or "3600s"`
		}
	}
	return "has the wrong type"
}

// jsonSpot says where raw stops being JSON, for a syntax error: " at byte
// 17 (line 2, column 5)", the offending byte; for a body that ends too soon,
// the byte after its end; "" for other errors.
func jsonSpot(raw []byte, err error) string {
	var (
		syntax *json.SyntaxError
		off    int64 // the offending byte, 1-based
	)
	switch {
	case errors.As(err, &syntax):
		off = syntax.Offset
	case errors.Is(err, io.ErrUnexpectedEOF):
		off = int64(len(raw)) + 1
	default:
		return ""
	}
	off = min(max(off, 1), int64(len(raw))+1)
	before := raw[:off-1]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return " at byte " + strconv.FormatInt(off, 10) + " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ")"
}
