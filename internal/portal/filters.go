package portal

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// The endpoint form's filter box: checked while it is typed (checkFilter,
// which the page's script calls) and tested against an event (testFilter,
// the Test filter button). Both call the endpoint service that the API's
// CreateEndpoint and TestFilter call, so what the page says is what a save
// or the API would say. Neither writes anything: a reload or a second
// click repeats nothing.

// filterProblem is one mistake of a check or test, for the page's script:
// the API's field ("filter.data.status") and the line the form shows.
type filterProblem struct {
	Field string `json:"field"`
	Text  string `json:"text"`
}

// filterCheck is checkFilter's answer.
type filterCheck struct {
	OK       bool            `json:"ok"`
	Filter   string          `json:"filter,omitempty"` // canonical, when OK
	Problems []filterProblem `json:"problems,omitempty"`
}

// filterResult is what the Test filter button found.
type filterResult struct {
	Matched bool `json:"matched"`
	// Applies: the endpoint's types take the event's type; when not, the
	// event would not be sent whatever the filter says.
	Applies     bool            `json:"applies"`
	Explanation string          `json:"explanation,omitempty"`
	EventType   string          `json:"event_type,omitempty"`
	EventID     string          `json:"event_id,omitempty"`
	Problems    []filterProblem `json:"problems,omitempty"`
	// Line is the result in one line, as the page shows it; Good: the
	// event would be delivered.
	Line string `json:"text"`
	Good bool   `json:"good"`
}

// said fills Line and Good.
func (r *filterResult) said() *filterResult {
	r.Good = false
	switch {
	case len(r.Problems) > 0:
		texts := make([]string, len(r.Problems))
		for i, p := range r.Problems {
			texts[i] = p.Text
		}
		r.Line = "Not tested: " + strings.Join(texts, "; ")
	case r.Matched && r.Applies:
		r.Line, r.Good = "Match: this event would be delivered.", true
	case r.Matched:
		r.Line = "The filter matches, but this endpoint's event types do not take " + r.EventType + " events."
	default:
		r.Line = "No match: " + r.Explanation
	}
	return r
}

// problemsOf reads a service error as the form's lines; false when it is
// not a client's mistake.
func problemsOf(err error) ([]filterProblem, bool) {
	if ve, ok := errors.AsType[*endpoint.ValidationError](err); ok {
		out := make([]filterProblem, 0, len(ve.Violations))
		for _, v := range ve.Violations {
			// As the form names a filter's mistake: at its spot inside
			// the filter.
			text := v.Field + ": " + v.Description
			if spot, ok := strings.CutPrefix(v.Field, endpoint.FieldFilter+"."); ok {
				text = "filter " + spot + ": " + v.Description
			} else if v.Field == endpoint.FieldFilter {
				text = "filter " + v.Description
			}
			out = append(out, filterProblem{Field: v.Field, Text: text})
		}
		return out, true
	}
	if errors.Is(err, endpoint.ErrEventNotFound) {
		return []filterProblem{{Field: endpoint.FieldEventID, Text: "event_id: no event of yours has this id"}}, true
	}
	return nil, false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	securityHeaders(w, nil)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) //nolint:errchkjson // plain structs of strings and bools
}

// checkFilter answers the page's script with what a save would say of the
// filter box, given the event types chosen.
func (p *Portal) checkFilter(w http.ResponseWriter, r *http.Request, sess *session) {
	f := &formData{}
	readForm(p.webhookTypes(), r, f)
	canon, err := p.svc.CheckFilter(endpoint.CheckFilterRequest{OwnerID: sess.ownerID, Filter: filterText(f.Filter), EventTypes: f.EventTypes})
	if err != nil {
		probs, ok := problemsOf(err)
		if !ok {
			p.fail(w, r, sess, err)
			return
		}
		// The types' own mistakes are the save's to say; here only the
		// filter's.
		out := filterCheck{}
		for _, pr := range probs {
			if pr.Field == endpoint.FieldFilter || strings.HasPrefix(pr.Field, endpoint.FieldFilter+".") {
				out.Problems = append(out.Problems, pr)
			}
		}
		out.OK = len(out.Problems) == 0
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeJSON(w, http.StatusOK, filterCheck{OK: true, Filter: string(canon)})
}

// sampleEvent is the sample box's JSON: an event as the API's sample takes
// it.
type sampleEvent struct {
	Type    string          `json:"type"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// runFilterTest tests the form's filter against its stored event or sample.
func (p *Portal) runFilterTest(r *http.Request, sess *session, f *formData) (*filterResult, error) {
	req := endpoint.TestFilterRequest{OwnerID: sess.ownerID, Filter: filterText(f.Filter), EventTypes: f.EventTypes, EventID: f.TestEvent}
	if req.Filter == nil {
		req.Filter = []byte("{}") // no filter: every event of the types matches
	}
	if strings.TrimSpace(f.TestSample) != "" {
		var s sampleEvent
		if err := json.Unmarshal([]byte(f.TestSample), &s); err != nil {
			//nolint:nilerr // a sample that is not JSON is the person's to fix: said on the page, not an error of the request
			return (&filterResult{Problems: []filterProblem{{Field: endpoint.FieldSample,
				Text: endpoint.FieldSample + `: is not an event's JSON, as {"type": "…", "subject": "…", "data": {…}}`}}}).said(), nil
		}
		req.Sample = &webhook.Event{Type: s.Type, Subject: s.Subject, Data: s.Data}
	}
	got, err := p.svc.TestFilter(r.Context(), req)
	if err != nil {
		probs, ok := problemsOf(err)
		if !ok {
			return nil, err
		}
		return (&filterResult{Problems: probs}).said(), nil
	}
	out := &filterResult{Matched: got.Matched, Applies: got.Applies, Explanation: got.Explanation, EventType: got.Event.Type, EventID: got.Event.ID}
	if !got.Matched && out.Explanation == "" {
		out.Explanation = "the filter refused it"
	}
	return out.said(), nil
}

// testFilter is the Test filter button. The page's script asks for JSON
// and shows the answer in place; without the script the form comes back
// as it was sent, with the answer under the button (nothing is saved).
func (p *Portal) testFilter(w http.ResponseWriter, r *http.Request, sess *session) {
	f := &formData{Errors: map[string]string{}}
	var e *endpoint.Endpoint
	if id := r.PostForm.Get("endpoint_id"); id != "" {
		var err error
		if e, err = p.svc.Get(r.Context(), sess.ownerID, id); err != nil {
			p.failID(w, r, sess, err)
			return
		}
		f.Edit, f.ID, f.HeaderNames = true, e.ID.String(), e.HeaderNames
	}
	readForm(p.webhookTypes(), r, f)
	if e != nil {
		f.Scheme = e.SigningScheme // the edit form does not send it
	}
	res, err := p.runFilterTest(r, sess, f)
	if err != nil {
		p.fail(w, r, sess, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		writeJSON(w, http.StatusOK, res)
		return
	}
	f.Test = res
	p.render(w, r, http.StatusOK, "form", sess, f)
}
