package portal

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/filter"
)

// The endpoint form: one type for create and edit, read from the endpoint
// (edit), from the request (after a submit), and turned into the service's
// create parameters or into an update of exactly the fields that changed.
//
// A field of the form is four small pieces, kept together here: its value
// in formData, its reading in readForm, its part of fromEndpoint, and its
// part of changes (the update mask path and value). A new field adds one
// of each, and a block in templates/form.html.

// formData is the create and edit form.
type formData struct {
	Edit        bool
	ID          string
	RequestID   string // create: the one-time id that makes a resubmit a replay
	Name        string
	URL         string
	Description string
	// EventTypes are the chosen globs in the order the endpoint has them
	// (edit) or the form sent them; Groups lay the catalog out for the
	// picker; Other is what no checkbox stands for (patterns), as typed.
	EventTypes  []string
	Groups      []typeGroup
	Other       string
	MaxInFlight string
	MaxPerSec   string
	Ordered     bool
	Scheme      string
	// HeaderNames are the names set now (values are never shown);
	// Headers is the box of new lines as typed, ClearHeaders the box that
	// removes them all.
	HeaderNames  []string
	Headers      string
	ClearHeaders bool
	// Labels is "key=value" lines.
	Labels string
	// Filter is the filter's JSON as typed (edit: the endpoint's, indented);
	// TestEvent and TestSample are what the Test filter button tests it
	// against (a stored event's id, or a sample event's JSON), and Test
	// what it found.
	Filter     string
	TestEvent  string
	TestSample string
	Test       *filterResult
	// Errors are the fields' messages by the API's field name; Problems
	// the same, in the form's order, for the summary on top.
	Errors   map[string]string
	Problems []problem
}

// problem is one line of the error summary: a link to the field.
type problem struct{ Field, Text string }

func (f *formData) pageTitle() string {
	if f.Edit {
		return "Edit endpoint"
	}
	return "New endpoint"
}

// typeGroup is the event types of one prefix ("booking"): the picker shows
// one group at a time, with a box for all of it ("booking.*").
type typeGroup struct {
	Prefix  string
	Pattern string // prefix + ".*"
	All     bool   // the pattern is chosen
	Types   []groupType
	Chosen  int
}

type groupType struct {
	event.TypeInfo
	Checked bool
}

// Open: a group with something chosen is shown open.
func (g typeGroup) Open() bool { return g.All || g.Chosen > 0 }

// groups lays out the catalog by prefix, with chosen's checked.
func groups(types []event.TypeInfo, chosen []string) []typeGroup {
	var out []typeGroup
	index := map[string]int{}
	for _, t := range types {
		prefix, _, _ := strings.Cut(t.Name, ".")
		i, ok := index[prefix]
		if !ok {
			i = len(out)
			index[prefix] = i
			out = append(out, typeGroup{Prefix: prefix, Pattern: prefix + ".*", All: slices.Contains(chosen, prefix+".*")})
		}
		gt := groupType{TypeInfo: t, Checked: slices.Contains(chosen, t.Name)}
		if gt.Checked {
			out[i].Chosen++
		}
		out[i].Types = append(out[i].Types, gt)
	}
	return out
}

// otherPatterns are the chosen globs that no checkbox of the picker
// stands for: they go in the Other patterns box, so that a save keeps them.
func otherPatterns(chosen []string, gs []typeGroup) []string {
	boxes := map[string]bool{"*": true}
	for _, g := range gs {
		boxes[g.Pattern] = true
		for _, t := range g.Types {
			boxes[t.Name] = true
		}
	}
	var out []string
	for _, c := range chosen {
		if !boxes[c] {
			out = append(out, c)
		}
	}
	return out
}

// fromEndpoint fills the form with an endpoint as it is.
func fromEndpoint(types []event.TypeInfo, e *endpoint.Endpoint) *formData {
	f := &formData{
		Edit: true, ID: e.ID.String(), Name: e.Name, URL: e.URL, Description: e.Description,
		EventTypes: slices.Clone(e.EventTypes), MaxInFlight: strconv.Itoa(int(e.MaxInFlight)),
		MaxPerSec: strconv.Itoa(int(e.MaxPerSecond)), Ordered: e.Ordered, Scheme: e.SigningScheme,
		HeaderNames: e.HeaderNames, Labels: formatLabels(e.Labels), Filter: indentFilter(e.Filter),
	}
	f.Groups = groups(types, f.EventTypes)
	f.Other = strings.Join(otherPatterns(f.EventTypes, f.Groups), ", ")
	return f
}

// readForm reads a submitted form. The checkboxes and the Other box
// together are the event types, without repeats, in the order sent.
func readForm(types []event.TypeInfo, r *http.Request, f *formData) {
	form := r.PostForm
	f.Name = strings.TrimSpace(form.Get("name"))
	f.URL = strings.TrimSpace(form.Get("url"))
	f.Description = lf(form.Get("description"))
	f.Other = form.Get("event_types_other")
	f.EventTypes = nil
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(f.EventTypes, s) {
			f.EventTypes = append(f.EventTypes, s)
		}
	}
	for _, t := range form["event_types"] {
		add(t)
	}
	for _, t := range strings.FieldsFunc(f.Other, func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' }) {
		add(t)
	}
	f.Groups = groups(types, f.EventTypes)
	f.MaxInFlight = strings.TrimSpace(form.Get("max_in_flight"))
	f.MaxPerSec = strings.TrimSpace(form.Get("max_per_second"))
	f.Ordered = form.Get("ordered") == "on"
	f.Scheme = form.Get("signature_scheme")
	f.Headers = form.Get("headers")
	f.ClearHeaders = form.Get("clear_headers") == "on"
	f.Labels = form.Get("labels")
	f.Filter = form.Get("filter")
	f.TestEvent = strings.TrimSpace(form.Get("test_event_id"))
	f.TestSample = form.Get("test_sample")
	f.RequestID = form.Get("request_id")
}

// formValues are a read form's values as the service takes them.
type formValues struct {
	maxInFlight, maxPerSec int32
	headers                map[string]string // nil: the box was empty
	labels                 map[string]string
}

// parse checks what the service cannot (numbers, the lines of the header
// and label boxes) and returns the values; problems go to f.Errors.
func (f *formData) parse() formValues {
	var v formValues
	v.maxInFlight = number(f.Errors, endpoint.FieldMaxInFlight, f.MaxInFlight)
	v.maxPerSec = number(f.Errors, endpoint.FieldMaxPerSecond, f.MaxPerSec)
	if strings.TrimSpace(f.Headers) != "" || f.ClearHeaders {
		v.headers = parseHeaders(f.Errors, f.Headers)
	}
	v.labels = parseLabels(f.Errors, f.Labels)
	return v
}

// changes is the update of e that the form asks for: only the fields whose
// value differs, so a form saved unchanged changes nothing. Event types
// keep the endpoint's order for those kept.
func (f *formData) changes(e *endpoint.Endpoint, v formValues) endpoint.UpdateRequest {
	u := endpoint.UpdateRequest{OwnerID: e.OwnerID, ID: e.ID.String()}
	// The form trims the name and URL, and a browser sends a textarea's
	// line ends as CRLF: neither is a change.
	if f.Name != strings.TrimSpace(e.Name) {
		u.Paths, u.Name = append(u.Paths, endpoint.PathName), f.Name
	}
	if f.URL != strings.TrimSpace(e.URL) {
		u.Paths, u.URL = append(u.Paths, endpoint.PathURL), f.URL
	}
	if lf(f.Description) != lf(e.Description) {
		u.Paths, u.Description = append(u.Paths, endpoint.PathDescription), f.Description
	}
	if !sameSet(f.EventTypes, e.EventTypes) {
		var types []string
		for _, t := range e.EventTypes {
			if slices.Contains(f.EventTypes, t) {
				types = append(types, t)
			}
		}
		for _, t := range f.EventTypes {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
		u.Paths, u.EventTypes = append(u.Paths, endpoint.PathEventTypes), types
	}
	inFlight := v.maxInFlight
	if inFlight == 0 {
		inFlight = 1 // the service's default
	}
	if f.Ordered != e.Ordered {
		u.Paths, u.Ordered = append(u.Paths, endpoint.PathOrdered), f.Ordered
	}
	if inFlight != e.MaxInFlight {
		u.Paths, u.MaxInFlight = append(u.Paths, endpoint.PathMaxInFlight), v.maxInFlight
	}
	if v.maxPerSec != e.MaxPerSecond {
		u.Paths, u.MaxPerSecond = append(u.Paths, endpoint.PathMaxPerSecond), v.maxPerSec
	}
	// Header values are write-only: an empty box keeps them; new lines
	// replace them all; the Remove box removes them.
	if v.headers != nil {
		u.Paths, u.Headers = append(u.Paths, endpoint.PathHeaders), v.headers
	}
	if !maps.Equal(v.labels, e.Labels) && (len(v.labels) > 0 || len(e.Labels) > 0) {
		u.Paths, u.Labels = append(u.Paths, endpoint.PathLabels), v.labels
	}
	if !sameFilter(f.Filter, e.Filter) {
		// The service checks it (and names the spot of a mistake); an
		// empty box removes the filter.
		u.Paths, u.Filter = append(u.Paths, endpoint.PathFilter), filterText(f.Filter)
	}
	return u
}

func lf(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// number reads an optional whole number field; a bad one is an error named
// like the API's field.
func number(errs map[string]string, field, raw string) int32 {
	if raw == "" {
		return 0
	}
	n, err := strconv.ParseInt(raw, 10, 32)
	if err != nil || n < 0 {
		errs[field] = "must be a whole number, 0 or more"
		return 0
	}
	return int32(n)
}

// parseHeaders reads "Name: value" lines. Values are write-only: they go to
// the service and are shown again only in the form they were typed in,
// when it comes back with an error.
func parseHeaders(errs map[string]string, raw string) map[string]string {
	out := map[string]string{}
	n := 0
	for line := range strings.Lines(raw) {
		n++
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			appendError(errs, endpoint.FieldHeaders, "line "+strconv.Itoa(n)+": write one header a line, as Name: value")
			continue
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	return out
}

// parseLabels reads "key=value" lines.
func parseLabels(errs map[string]string, raw string) map[string]string {
	out := map[string]string{}
	n := 0
	for line := range strings.Lines(raw) {
		n++
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			appendError(errs, endpoint.FieldLabels, "line "+strconv.Itoa(n)+": write one label a line, as key=value")
			continue
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

// formatLabels writes labels as the box shows them, sorted by key.
func formatLabels(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k + "=" + labels[k] + "\n")
	}
	return b.String()
}

func appendError(errs map[string]string, field, msg string) {
	if prev, dup := errs[field]; dup {
		errs[field] = prev + "; " + msg
	} else {
		errs[field] = msg
	}
}

// fieldErrors spreads a validation error over the form's fields, each
// message naming the item at fault: the pattern of "event_types[2]", the
// header of `headers["X-Key"]`, the label of `labels["team"]`.
func (f *formData) fieldErrors(err error) bool {
	ve, ok := errors.AsType[*endpoint.ValidationError](err)
	if !ok {
		return false
	}
	for _, v := range ve.Violations {
		if spot, ok := strings.CutPrefix(v.Field, endpoint.FieldFilter+"."); ok {
			// A filter's mistake is named at its spot inside the filter:
			// "data.status.$in[1]".
			appendError(f.Errors, endpoint.FieldFilter, spot+": "+v.Description)
			continue
		}
		field, rest, indexed := strings.Cut(v.Field, "[")
		field, _, _ = strings.Cut(field, ".")
		msg := v.Description
		if indexed {
			item := strings.TrimSuffix(rest, "]")
			if i, err := strconv.Atoi(item); err == nil && field == endpoint.FieldEventTypes && i >= 0 && i < len(f.EventTypes) {
				item = strconv.Quote(f.EventTypes[i])
				// "duplicates event_types[0]" says nothing on a page.
				if _, other, ok := strings.Cut(msg, "duplicates "+endpoint.FieldEventTypes+"["); ok {
					if j, err := strconv.Atoi(strings.TrimSuffix(other, "]")); err == nil && j >= 0 && j < len(f.EventTypes) {
						msg = "is there twice"
					}
				}
			}
			msg = item + ": " + msg
		}
		appendError(f.Errors, field, msg)
	}
	return true
}

// formOrder is the fields in the form's order, with their labels, for the
// error summary.
var formOrder = []struct{ field, id, label string }{
	{endpoint.FieldURL, "url", "Endpoint URL"},
	{endpoint.FieldName, "name", "Name"},
	{endpoint.FieldDescription, "description", "Description"},
	{endpoint.FieldEventTypes, "event-types", "Event types"},
	{endpoint.FieldMaxInFlight, "max_in_flight", "Deliveries in flight"},
	{endpoint.FieldMaxPerSecond, "max_per_second", "Rate limit"},
	{endpoint.FieldOrdered, "ordered", "Ordered"},
	{endpoint.FieldFilter, "filter", "Filter"},
	{endpoint.FieldHeaders, "headers", "Custom headers"},
	{endpoint.FieldLabels, "labels", "Labels"},
	{endpoint.FieldSignatureScheme, "scheme-v1", "Signature scheme"},
}

// summarize lists f.Errors in the form's order; an error of a field the
// form does not have goes last, by its API name.
func (f *formData) summarize() {
	f.Problems = nil
	seen := map[string]bool{}
	for _, o := range formOrder {
		if msg, ok := f.Errors[o.field]; ok {
			f.Problems = append(f.Problems, problem{Field: o.id, Text: o.label + ": " + msg})
			seen[o.field] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Errors)) {
		if !seen[k] {
			f.Problems = append(f.Problems, problem{Text: k + ": " + f.Errors[k]})
		}
	}
}

// filterText is a filter box's text as the service takes it: nil for an
// empty box (no filter).
func filterText(box string) []byte {
	if strings.TrimSpace(box) == "" {
		return nil
	}
	return []byte(box)
}

// indentFilter shows a stored filter (canonical JSON) in the box, one
// clause a line; "" for none.
func indentFilter(stored []byte) string {
	if len(stored) == 0 || string(stored) == "{}" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, stored, "", "  "); err != nil {
		return string(stored)
	}
	return b.String()
}

// sameFilter: the box says what the endpoint has, whatever its spacing and
// key order, so that a form saved unchanged changes nothing. A box that
// does not parse is a change (which the service refuses, naming the spot).
func sameFilter(box string, stored []byte) bool {
	text := filterText(box)
	if text == nil {
		return len(stored) == 0
	}
	f, err := filter.Parse(text)
	if err != nil {
		return false
	}
	if f.Empty() {
		return len(stored) == 0
	}
	return bytes.Equal(f.JSON(), stored)
}
