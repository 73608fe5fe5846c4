package portal

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
)

// lastDeliveryReads bounds the endpoints list's concurrent reads of each
// endpoint's last delivery.
const lastDeliveryReads = 4

// endpointRow is one endpoint on the list.
type endpointRow struct {
	E      *endpoint.Endpoint
	Health health
	Last   *endpoint.Delivery
	Stats  stats24h
}

// health is an endpoint's state in one word and a sentence.
type health struct {
	Class string // healthy, failing, paused, disabled: the badge's style
	Label string
	Note  string
}

func healthOf(e *endpoint.Endpoint, now time.Time) health {
	switch {
	case !e.Enabled:
		h := health{Class: "disabled", Label: "Disabled"}
		if e.DisabledReason != "" {
			h.Note = e.DisabledReason
		}
		return h
	case e.PausedUntil != nil && e.PausedUntil.After(now):
		return health{Class: "paused", Label: "Paused", Note: "Paused until " + stamp(*e.PausedUntil) + pauseWhy(e.PauseReason)}
	case e.FailingSince != nil:
		note := "Failing since " + stamp(*e.FailingSince)
		if e.NextProbeAt != nil {
			note += "; next probe " + stamp(*e.NextProbeAt)
		}
		return health{Class: "failing", Label: "Failing", Note: note}
	}
	return health{Class: "healthy", Label: "Healthy"}
}

func pauseWhy(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + strings.ReplaceAll(reason, "_", " ") + ")"
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

type listData struct {
	Rows []endpointRow
	Next string
}

func (*listData) pageTitle() string { return "Endpoints" }

func (p *Portal) listEndpoints(w http.ResponseWriter, r *http.Request, sess *session) {
	page, err := p.svc.List(r.Context(), sess.ownerID, 50, r.URL.Query().Get("page"), nil)
	if err != nil {
		if errors.Is(err, endpoint.ErrInvalid) {
			p.notFound(w, r, sess)
			return
		}
		p.fail(w, r, sess, err)
		return
	}
	data := &listData{Next: page.NextPageToken}
	ids := make([]string, len(page.Items))
	now := p.cfg.Now()
	data.Rows = make([]endpointRow, len(page.Items))
	// Each endpoint's last delivery is its own small query; a few at once
	// (not all: they share the pool with the deliveries).
	g, gctx := errgroup.WithContext(r.Context())
	g.SetLimit(lastDeliveryReads)
	for i, e := range page.Items {
		ids[i] = e.ID.String()
		data.Rows[i] = endpointRow{E: e, Health: healthOf(e, now)}
		g.Go(func() error {
			last, err := p.svc.ListDeliveries(gctx, endpoint.ListDeliveriesRequest{OwnerID: sess.ownerID, EndpointID: ids[i], PageSize: 1})
			if err == nil && len(last.Items) > 0 {
				data.Rows[i].Last = last.Items[0]
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		p.fail(w, r, sess, err)
		return
	}
	if len(ids) > 0 {
		stats, err := p.svc.EndpointStats(r.Context(), sess.ownerID, ids)
		if err != nil {
			p.fail(w, r, sess, err)
			return
		}
		for i := range stats {
			data.Rows[i].Stats = statsOf(stats[i].Windows[attempt.WindowDay])
		}
	}
	p.render(w, r, http.StatusOK, "endpoints", sess, data)
}

// formData is the create and edit form.
type formData struct {
	Edit        bool
	ID          string
	Name        string
	URL         string
	Description string
	EventTypes  []string
	Catalog     []event.TypeInfo
	MaxInFlight string
	MaxPerSec   string
	Ordered     bool
	Scheme      string
	HeaderNames []string
	Errors      map[string]string
}

func (f *formData) pageTitle() string {
	if f.Edit {
		return "Edit endpoint"
	}
	return "New endpoint"
}

func (p *Portal) newEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	p.render(w, r, http.StatusOK, "form", sess, &formData{Catalog: event.WebhookTypes(), Scheme: endpoint.SchemeV1, MaxInFlight: "1"})
}

// readForm reads the fields both forms share.
func readForm(r *http.Request, f *formData) {
	f.Name = strings.TrimSpace(r.PostForm.Get("name"))
	f.URL = strings.TrimSpace(r.PostForm.Get("url"))
	f.Description = r.PostForm.Get("description")
	f.EventTypes = r.PostForm["event_types"]
	if extra := strings.TrimSpace(r.PostForm.Get("event_types_other")); extra != "" {
		f.EventTypes = append(f.EventTypes, strings.FieldsFunc(extra, func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\r' })...)
	}
	f.MaxInFlight = strings.TrimSpace(r.PostForm.Get("max_in_flight"))
	f.MaxPerSec = strings.TrimSpace(r.PostForm.Get("max_per_second"))
	f.Ordered = r.PostForm.Get("ordered") == "on"
	f.Scheme = r.PostForm.Get("signature_scheme")
	f.Catalog = event.WebhookTypes()
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
// the service and are never put back on a page.
func parseHeaders(errs map[string]string, raw string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(raw) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			errs[endpoint.FieldHeaders] = "write one header a line, as Name: value"
			continue
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	return out
}

// fieldErrors spreads a validation error over the form's fields; the API's
// field names, cut at the index ("event_types[2]" is event_types).
func fieldErrors(errs map[string]string, err error) bool {
	ve, ok := errors.AsType[*endpoint.ValidationError](err)
	if !ok {
		return false
	}
	for _, v := range ve.Violations {
		field, _, _ := strings.Cut(v.Field, "[")
		field, _, _ = strings.Cut(field, ".")
		if prev, dup := errs[field]; dup {
			errs[field] = prev + "; " + v.Description
		} else {
			errs[field] = v.Description
		}
	}
	return true
}

// secretData is the page that shows a secret once.
type secretData struct {
	E                 *endpoint.Endpoint
	Created           bool
	Secret            string
	PublicKey         string
	PreviousExpiresAt *time.Time
}

func (d *secretData) pageTitle() string {
	if d.Created {
		return "Endpoint created"
	}
	return "Secret rotated"
}

func (p *Portal) createEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	f := &formData{Errors: map[string]string{}}
	readForm(r, f)
	maxInFlight := number(f.Errors, endpoint.FieldMaxInFlight, f.MaxInFlight)
	maxPerSec := number(f.Errors, endpoint.FieldMaxPerSecond, f.MaxPerSec)
	headers := parseHeaders(f.Errors, r.PostForm.Get("headers"))
	if len(f.Errors) > 0 {
		p.render(w, r, http.StatusBadRequest, "form", sess, f)
		return
	}
	c, err := p.svc.Create(r.Context(), endpoint.CreateParams{
		OwnerID: sess.ownerID, URL: f.URL, Description: f.Description, EventTypes: f.EventTypes,
		Headers: headers, SigningScheme: f.Scheme, MaxPerSecond: maxPerSec, MaxInFlight: maxInFlight,
		Ordered: f.Ordered, Name: f.Name,
	})
	if err != nil {
		if fieldErrors(f.Errors, err) {
			p.render(w, r, http.StatusBadRequest, "form", sess, f)
			return
		}
		p.fail(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "secret", sess, &secretData{E: c.Endpoint, Created: true, Secret: c.Secret, PublicKey: c.Endpoint.PublicKey})
}

func (p *Portal) editEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "form", sess, &formData{
		Edit: true, ID: e.ID.String(), Name: e.Name, URL: e.URL, Description: e.Description, EventTypes: e.EventTypes,
		Catalog: event.WebhookTypes(), MaxInFlight: strconv.Itoa(int(e.MaxInFlight)), MaxPerSec: strconv.Itoa(int(e.MaxPerSecond)),
		Ordered: e.Ordered, Scheme: e.SigningScheme, HeaderNames: e.HeaderNames,
	})
}

// failID is fail where a malformed id in the URL is a page not found, like
// another owner's id: the URL is not a form.
func (p *Portal) failID(w http.ResponseWriter, r *http.Request, sess *session, err error) {
	if errors.Is(err, endpoint.ErrInvalid) {
		p.notFound(w, r, sess)
		return
	}
	p.fail(w, r, sess, err)
}

func (p *Portal) updateEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	f := &formData{Edit: true, ID: e.ID.String(), HeaderNames: e.HeaderNames, Errors: map[string]string{}}
	readForm(r, f)
	f.Scheme = e.SigningScheme
	maxInFlight := number(f.Errors, endpoint.FieldMaxInFlight, f.MaxInFlight)
	maxPerSec := number(f.Errors, endpoint.FieldMaxPerSecond, f.MaxPerSec)
	paths := []string{endpoint.PathName, endpoint.PathURL, endpoint.PathDescription, endpoint.PathEventTypes,
		endpoint.PathMaxInFlight, endpoint.PathMaxPerSecond, endpoint.PathOrdered}
	var headers map[string]string
	// Header values are write-only: blank keeps them; new lines replace
	// them all; the box removes them.
	if raw := r.PostForm.Get("headers"); strings.TrimSpace(raw) != "" || r.PostForm.Get("clear_headers") == "on" {
		headers = parseHeaders(f.Errors, raw)
		paths = append(paths, endpoint.PathHeaders)
	}
	if len(f.Errors) > 0 {
		p.render(w, r, http.StatusBadRequest, "form", sess, f)
		return
	}
	_, err = p.svc.Update(r.Context(), endpoint.UpdateRequest{
		OwnerID: sess.ownerID, ID: f.ID, Paths: paths, URL: f.URL, Description: f.Description,
		EventTypes: f.EventTypes, Headers: headers, MaxPerSecond: maxPerSec, MaxInFlight: maxInFlight,
		Ordered: f.Ordered, Name: f.Name,
	})
	if err != nil {
		if fieldErrors(f.Errors, err) {
			p.render(w, r, http.StatusBadRequest, "form", sess, f)
			return
		}
		p.fail(w, r, sess, err)
		return
	}
	p.redirect(w, r, "endpoints/"+f.ID+"?done=saved")
}

func (p *Portal) setEnabled(on bool) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		id := r.PathValue("id")
		_, err := p.svc.Update(r.Context(), endpoint.UpdateRequest{OwnerID: sess.ownerID, ID: id, Paths: []string{endpoint.PathEnabled}, Enabled: on})
		if err != nil {
			p.failID(w, r, sess, err)
			return
		}
		done := "disabled"
		if on {
			done = "enabled"
		}
		p.redirect(w, r, "endpoints/"+id+"?done="+done)
	}
}

type confirmData struct{ E *endpoint.Endpoint }

func (*confirmData) pageTitle() string { return "Delete endpoint" }

func (p *Portal) confirmDelete(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "confirm", sess, &confirmData{E: e})
}

func (p *Portal) deleteEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := p.svc.Delete(r.Context(), sess.ownerID, r.PathValue("id")); err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.redirect(w, r, "?done=deleted")
}

func (p *Portal) rotateSecret(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	grace := endpoint.GracePeriod{}
	if h := r.PostForm.Get("grace_hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 0 {
			grace.Malformed = true
		} else {
			grace.Value = new(time.Duration(n) * time.Hour)
		}
	}
	rot, err := p.svc.RotateSecret(r.Context(), sess.ownerID, id, grace)
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	e, err := p.svc.Get(r.Context(), sess.ownerID, id)
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "secret", sess, &secretData{E: e, Secret: rot.Secret, PublicKey: rot.PublicKey, PreviousExpiresAt: rot.PreviousExpiresAt})
}

// endpointData is an endpoint's page: its settings and health, its
// figures, and its deliveries with the filters.
type endpointData struct {
	E          *endpoint.Endpoint
	Health     health
	Stats      [2]stats24h // day, week
	Chart      *chart
	Deliveries []*endpoint.Delivery
	Next       string
	Filter     deliveryFilter
	States     []string
	Error      string
}

func (d *endpointData) pageTitle() string {
	if d.E.Name != "" {
		return d.E.Name
	}
	return d.E.URL
}

// deliveryFilter is the deliveries list's query, as the form sends it.
type deliveryFilter struct {
	State, EventType, After, Before string
	Page                            string
}

// query is the filter as a query string, for the next page's link.
func (f deliveryFilter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"state": f.State, "type": f.EventType, "after": f.After, "before": f.Before} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

var stateNames = []string{"pending", "scheduled", "delivering", "delivered", "failed", "cancelled"}

func parseState(s string) endpoint.DeliveryState {
	for i, n := range stateNames {
		if n == s {
			return endpoint.DeliveryState(i + 1)
		}
	}
	return 0
}

// parseInputTime reads an <input type="datetime-local"> value as UTC.
func parseInputTime(s string) endpoint.Timestamp {
	if s == "" {
		return endpoint.Timestamp{}
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return endpoint.Timestamp{Value: &t}
		}
	}
	return endpoint.Timestamp{Malformed: true}
}

func (p *Portal) showEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	q := r.URL.Query()
	f := deliveryFilter{State: q.Get("state"), EventType: q.Get("type"), After: q.Get("after"), Before: q.Get("before"), Page: q.Get("page")}
	data := &endpointData{E: e, Health: healthOf(e, p.cfg.Now()), Filter: f, States: stateNames}
	req := endpoint.ListDeliveriesRequest{OwnerID: sess.ownerID, EndpointID: e.ID.String(), PageSize: 25, PageToken: f.Page,
		EventType: f.EventType, CreatedAfter: parseInputTime(f.After), CreatedBefore: parseInputTime(f.Before)}
	if f.State != "" {
		req.States = []endpoint.DeliveryState{parseState(f.State)}
	}
	page, err := p.svc.ListDeliveries(r.Context(), req)
	switch {
	case err == nil:
		data.Deliveries, data.Next = page.Items, page.NextPageToken
	case errors.Is(err, endpoint.ErrInvalid):
		// A filter the service refuses: say which, show no rows.
		data.Error = err.Error()
	default:
		p.fail(w, r, sess, err)
		return
	}
	stats, err := p.svc.EndpointStats(r.Context(), sess.ownerID, []string{e.ID.String()})
	if err != nil {
		p.fail(w, r, sess, err)
		return
	}
	if len(stats) == 1 {
		data.Stats = [2]stats24h{statsOf(stats[0].Windows[attempt.WindowDay]), statsOf(stats[0].Windows[attempt.WindowWeek])}
	}
	data.Chart = p.chartFor(r, sess, e)
	p.render(w, r, http.StatusOK, "endpoint", sess, data)
}

func (p *Portal) sendTest(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	eventID, err := p.svc.SendTest(r.Context(), sess.ownerID, id)
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.redirect(w, r, "endpoints/"+id+"/test/"+url.PathEscape(eventID))
}

// testData is a test event's page: its delivery to the endpoint and the
// attempts so far. It reloads itself (a meta refresh, no script) until the
// delivery has ended.
type testData struct {
	E        *endpoint.Endpoint
	EventID  string
	Delivery *endpoint.Delivery
	Attempts []attempt.Attempt
	Waiting  bool
}

func (*testData) pageTitle() string { return "Test event" }

func (p *Portal) testResult(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	ev, err := p.svc.GetEvent(r.Context(), sess.ownerID, r.PathValue("event"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	data := &testData{E: e, EventID: ev.Event.ID, Waiting: true}
	for _, d := range ev.Deliveries {
		if d.EndpointID == e.ID.String() {
			data.Delivery = d
		}
	}
	if d := data.Delivery; d != nil {
		atts, err := p.svc.ListAttempts(r.Context(), sess.ownerID, d.JobID, 10, "")
		if err != nil {
			p.fail(w, r, sess, err)
			return
		}
		data.Attempts = atts.Items
		ended := d.State == endpoint.DeliveryDelivered || d.State == endpoint.DeliveryFailed || d.State == endpoint.DeliveryCancelled
		// Attempts are recorded in batches, a moment after the delivery.
		data.Waiting = !ended || len(atts.Items) == 0 || d.State == endpoint.DeliveryScheduled
	}
	p.render(w, r, http.StatusOK, "test", sess, data)
}

func (p *Portal) redeliver(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	res, err := p.svc.Redeliver(r.Context(), endpoint.RedeliverRequest{OwnerID: sess.ownerID, EndpointID: id, Since: parseInputTime(r.PostForm.Get("since"))})
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "message", sess, &messageData{Title: "Redelivery queued",
		Message: strconv.Itoa(res.Count) + " failed or cancelled deliveries of this endpoint are queued again."})
}

// catalogData is the event catalog page.
type catalogData struct{ Types []catalogType }

type catalogType struct {
	event.TypeInfo
	SchemaText, ExampleText string
}

func (*catalogData) pageTitle() string { return "Event catalog" }

func (p *Portal) catalog(w http.ResponseWriter, r *http.Request, sess *session) {
	data := &catalogData{}
	for _, t := range event.WebhookTypes() {
		data.Types = append(data.Types, catalogType{TypeInfo: t, SchemaText: indent(t.Schema), ExampleText: indent(t.Example)})
	}
	p.render(w, r, http.StatusOK, "catalog", sess, data)
}

func indent(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	// Not MarshalIndent: its \u003c for "<" would show on the page as
	// such; html/template escapes the text where it is put.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
