package filter

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Doc is one event as filters read it: its subject and its data, decoded
// once on first use and then shared by every filter evaluated against it
// (one fanout evaluates the filters of all the owner's endpoints against one
// Doc). A Doc is for one goroutine at a time.
type Doc struct {
	// subject is held as an interface value once, rather than converted
	// (an allocation) at every comparison.
	subject any
	raw     json.RawMessage
	decoded bool
	data    map[string]any
}

// NewDoc returns the Doc of an event with subject and data (a JSON object;
// anything else reads as an object without properties).
func NewDoc(subject string, data json.RawMessage) *Doc {
	return &Doc{subject: any(subject), raw: data}
}

// lookup returns n's field in d and whether it is present.
func (d *Doc) lookup(n *node) (any, bool) {
	if n.subject {
		return d.subject, true
	}
	if !d.decoded {
		d.decoded = true
		_ = json.Unmarshal(d.raw, &d.data)
	}
	var cur any = d.data
	for _, seg := range n.path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Matches reports whether the event d satisfies every condition of f. An
// empty filter matches everything.
func (f *Filter) Matches(d *Doc) bool {
	if f == nil {
		return true
	}
	for _, n := range f.top {
		if !n.matches(d) {
			return false
		}
	}
	return true
}

func (n *node) matches(d *Doc) bool {
	switch {
	case n.and != nil:
		for _, m := range n.and {
			if !m.matches(d) {
				return false
			}
		}
		return true
	case n.or != nil:
		for _, m := range n.or {
			if m.matches(d) {
				return true
			}
		}
		return false
	}
	v, present := d.lookup(n)
	return n.compare(v, present)
}

// compare applies a comparison to the field's value v (present: the field
// exists; a null value is present). Like MongoDB's: $neq and $nin hold for
// an absent field, every other operator but $exist does not; a value of
// another type than the operand is simply not equal to it.
func (n *node) compare(v any, present bool) bool {
	switch n.op {
	case opExist:
		return present == n.val.b
	case opEq:
		return present && equal(v, &n.val)
	case opNeq:
		return !present || !equal(v, &n.val)
	case opIn:
		return present && n.in(v)
	case opNin:
		return !present || !n.in(v)
	case opStartsWith:
		s, ok := v.(string)
		return present && ok && strings.HasPrefix(s, n.val.s)
	case opEndsWith:
		s, ok := v.(string)
		return present && ok && strings.HasSuffix(s, n.val.s)
	case opGt, opGte, opLt, opLte:
		if !present {
			return false
		}
		c, ok := order(v, &n.val)
		if !ok {
			return false
		}
		switch n.op {
		case opGt:
			return c > 0
		case opGte:
			return c >= 0
		case opLt:
			return c < 0
		default:
			return c <= 0
		}
	}
	return false
}

func (n *node) in(v any) bool {
	for i := range n.list {
		if equal(v, &n.list[i]) {
			return true
		}
	}
	return false
}

// equal compares a decoded JSON value with a filter's scalar.
func equal(v any, w *value) bool {
	switch x := v.(type) {
	case nil:
		return w.kind == kindNull
	case bool:
		return w.kind == kindBool && x == w.b
	case float64:
		return w.kind == kindNumber && x == w.n
	case string:
		return w.kind == kindString && x == w.s
	default:
		return false // objects and arrays equal no scalar
	}
}

// order compares v with w (numbers, or date-times as instants): -1, 0 or
// 1, and false when they cannot be ordered.
func order(v any, w *value) (int, bool) {
	switch x := v.(type) {
	case float64:
		if w.kind != kindNumber {
			return 0, false
		}
		switch {
		case x < w.n:
			return -1, true
		case x > w.n:
			return 1, true
		default:
			return 0, true
		}
	case string:
		if !w.isTime {
			return 0, false
		}
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return 0, false
		}
		return t.Compare(w.t), true
	default:
		return 0, false
	}
}

// MaxExplanation bounds Explain's text, in bytes.
const MaxExplanation = 400

// maxShown bounds one value as an explanation quotes it, in characters.
const maxShown = 64

// Explain says why the event d does not satisfy f: the first condition
// that failed and the value it met, such as
//
//	filter: data.status was "draft", wanted one of ["published"]
//
// and "" when d satisfies f. It reads the same data as Matches and is
// meant for the few events whose refusal is recorded, not for every one.
func (f *Filter) Explain(d *Doc) string {
	if f == nil {
		return ""
	}
	for _, n := range f.top {
		if !n.matches(d) {
			return truncate("filter: "+n.explain(d), MaxExplanation)
		}
	}
	return ""
}

func (n *node) explain(d *Doc) string {
	switch {
	case n.and != nil:
		for _, m := range n.and {
			if !m.matches(d) {
				return m.explain(d)
			}
		}
		return ""
	case n.or != nil:
		parts := make([]string, len(n.or))
		for i, m := range n.or {
			parts[i] = m.explain(d)
		}
		return "none of $or held (" + strings.Join(parts, "; ") + ")"
	}
	v, present := d.lookup(n)
	return n.field + " " + was(v, present) + ", wanted " + n.wanted()
}

// was describes the value a comparison met.
func was(v any, present bool) string {
	if !present {
		return "was absent"
	}
	switch x := v.(type) {
	case map[string]any:
		return "was an object"
	case []any:
		return "was an array"
	case string:
		return "was " + quote(truncate(x, maxShown))
	case float64:
		return "was " + formatNumber(x)
	case bool:
		if x {
			return "was true"
		}
		return "was false"
	default:
		return "was null"
	}
}

// wanted describes what the comparison asks for.
func (n *node) wanted() string {
	v := shown(&n.val)
	switch n.op {
	case opEq:
		return v
	case opNeq:
		return "anything but " + v
	case opGt:
		return pick(n.val.isTime, "later than ", "more than ") + v
	case opGte:
		return v + pick(n.val.isTime, " or later", " or more")
	case opLt:
		return pick(n.val.isTime, "earlier than ", "less than ") + v
	case opLte:
		return v + pick(n.val.isTime, " or earlier", " or less")
	case opIn:
		return "one of " + shownList(n.list)
	case opNin:
		return "none of " + shownList(n.list)
	case opStartsWith:
		return "a string starting with " + v
	case opEndsWith:
		return "a string ending with " + v
	case opExist:
		return pick(n.val.b, "it present", "it absent")
	}
	return v
}

func shown(v *value) string {
	if v.kind == kindString {
		return quote(truncate(v.s, maxShown))
	}
	return v.raw
}

// shownList is a $in's values as JSON, the first few of them.
func shownList(vs []value) string {
	const most = 5
	parts := make([]string, 0, min(len(vs), most)+1)
	for i := range vs {
		if i == most {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, shown(&vs[i]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func pick(c bool, yes, no string) string {
	if c {
		return yes
	}
	return no
}

// truncate keeps s within n bytes, on a character boundary, marking a cut
// with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
