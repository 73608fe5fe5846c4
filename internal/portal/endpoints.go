package portal

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
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
	at := func(t time.Time) string { return stamp(t) + " (" + relative(t, now) + ")" }
	switch {
	case !e.Enabled:
		h := health{Class: "disabled", Label: "Disabled"}
		if e.DisabledReason != "" {
			h.Note = e.DisabledReason
		}
		return h
	case e.PausedUntil != nil && e.PausedUntil.After(now):
		return health{Class: "paused", Label: "Paused", Note: "Paused until " + at(*e.PausedUntil) + pauseWhy(e.PauseReason)}
	case e.FailingSince != nil:
		note := "Failing since " + at(*e.FailingSince)
		if e.NextProbeAt != nil {
			note += "; next probe " + at(*e.NextProbeAt)
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

// The endpoint list's bounds: a page, and how many of the owner's
// endpoints the search reads (the owner's cap is 100 by default).
const (
	listPageSize = 25
	listScanMax  = 5000
)

// listFilter is the endpoint list's search, as its form sends it.
type listFilter struct {
	Q      string // in the name, URL or description
	Health string // "", failing, disabled, paused, healthy
	Label  string // key=value
	Page   int    // from 1
}

var healthFilters = []string{"failing", "paused", "disabled", "healthy"}

func (f listFilter) query(page int) string {
	v := url.Values{}
	if f.Q != "" {
		v.Set("q", f.Q)
	}
	if f.Health != "" {
		v.Set("health", f.Health)
	}
	if f.Label != "" {
		v.Set("label", f.Label)
	}
	if page > 1 {
		v.Set("page", strconv.Itoa(page))
	}
	return v.Encode()
}

func (f listFilter) match(e *endpoint.Endpoint, h health) bool {
	if f.Health != "" && h.Class != f.Health {
		return false
	}
	if f.Label != "" {
		k, v, _ := strings.Cut(f.Label, "=")
		if got, ok := e.Labels[strings.TrimSpace(k)]; !ok || got != strings.TrimSpace(v) {
			return false
		}
	}
	if f.Q == "" {
		return true
	}
	q := strings.ToLower(f.Q)
	return strings.Contains(strings.ToLower(e.Name), q) || strings.Contains(strings.ToLower(e.URL), q) ||
		strings.Contains(strings.ToLower(e.Description), q)
}

type listData struct {
	Rows   []endpointRow
	Filter listFilter
	Health []string
	// Totals by health over all the owner's endpoints; Matched is how many
	// the filter keeps, From and To the rows on this page (1-based).
	Totals           map[string]int
	All, Matched     int
	From, To         int
	PrevURL, NextURL string
	Truncated        bool
}

func (*listData) pageTitle() string { return "Endpoints" }

// Filtered says whether the list is searched or filtered.
func (d *listData) Filtered() bool {
	return d.Filter.Q != "" || d.Filter.Health != "" || d.Filter.Label != ""
}

func (p *Portal) listEndpoints(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	f := listFilter{Q: strings.TrimSpace(q.Get("q")), Health: q.Get("health"), Label: strings.TrimSpace(q.Get("label"))}
	if !slices.Contains(healthFilters, f.Health) {
		f.Health = ""
	}
	f.Page, _ = strconv.Atoi(q.Get("page"))
	f.Page = max(f.Page, 1)
	// The owner's endpoints, all of them (to the scan bound): the search,
	// the totals and the pages in both directions are made of them.
	now := p.cfg.Now()
	data := &listData{Filter: f, Health: healthFilters, Totals: map[string]int{}}
	var matched []endpointRow
	token := ""
	for {
		page, err := p.svc.List(r.Context(), sess.ownerID, endpoint.MaxPageSize, token, nil)
		if err != nil {
			p.fail(w, r, sess, err)
			return
		}
		for _, e := range page.Items {
			h := healthOf(e, now)
			data.All++
			data.Totals[h.Class]++
			if f.match(e, h) {
				matched = append(matched, endpointRow{E: e, Health: h})
			}
		}
		token = page.NextPageToken
		if token == "" {
			break
		}
		if data.All >= listScanMax {
			data.Truncated = true
			break
		}
	}
	data.Matched = len(matched)
	pages := max(1, (len(matched)+listPageSize-1)/listPageSize)
	f.Page = min(f.Page, pages)
	data.Filter.Page = f.Page
	lo, hi := (f.Page-1)*listPageSize, min(f.Page*listPageSize, len(matched))
	data.Rows = matched[lo:hi]
	data.From, data.To = lo+1, hi
	if f.Page > 1 {
		data.PrevURL = p.base + "?" + f.query(f.Page-1)
	}
	if f.Page < pages {
		data.NextURL = p.base + "?" + f.query(f.Page+1)
	}
	ids := make([]string, len(data.Rows))
	// Each endpoint's last delivery is its own small query; a few at once
	// (not all: they share the pool with the deliveries).
	g, gctx := errgroup.WithContext(r.Context())
	g.SetLimit(lastDeliveryReads)
	for i, row := range data.Rows {
		ids[i] = row.E.ID.String()
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

// newRequestID is a one-time id for a form that must not act twice: a
// UUID v4, which the endpoint service also takes as an idempotency key.
func newRequestID() string { return uuid.NewString() }

// requestIDOf reads a form's one-time id: a canonical UUID v4.
func requestIDOf(s string) (uuid.UUID, bool) {
	if !endpoint.SecretReplayable(s) {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(s)
	return id, err == nil && id.Version() == 4
}

// newEndpoint is the create form. Its address carries the form's one-time
// request id (a redirect adds one), so that Back to the form and submit
// again is the same request: it creates nothing more.
func (p *Portal) newEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	if !sess.canManage() {
		p.readOnly(w, r, sess)
		return
	}
	rid := r.URL.Query().Get("request")
	if _, ok := requestIDOf(rid); !ok {
		p.redirect(w, r, "endpoints/new?request="+newRequestID())
		return
	}
	p.render(w, r, http.StatusOK, "form", sess, &formData{Groups: groups(p.webhookTypes(), nil), Scheme: endpoint.SchemeV1, MaxInFlight: "1", RequestID: rid})
}

// secretData is the page that shows a secret once.
type secretData struct {
	E       *endpoint.Endpoint
	Created bool
	reveal
}

func (d *secretData) pageTitle() string {
	if d.Created {
		return "Endpoint created"
	}
	return "Secret rotated"
}

// formError shows the form again, as it was sent, with its errors.
func (p *Portal) formError(w http.ResponseWriter, r *http.Request, sess *session, f *formData) {
	f.summarize()
	p.render(w, r, http.StatusBadRequest, "form", sess, f)
}

func (p *Portal) createEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	f := &formData{Errors: map[string]string{}}
	readForm(p.webhookTypes(), r, f)
	rid, ok := requestIDOf(f.RequestID)
	if !ok {
		// A form from before request ids, or tampered with: a new id, and
		// the form again, nothing done.
		f.RequestID = newRequestID()
		f.Errors["request_id"] = "this form had expired; check it and send it again"
		p.formError(w, r, sess, f)
		return
	}
	v := f.parse()
	if len(f.Errors) > 0 {
		p.formError(w, r, sess, f)
		return
	}
	c, err := p.svc.Create(r.Context(), endpoint.CreateParams{
		OwnerID: sess.ownerID, URL: f.URL, Description: f.Description, EventTypes: f.EventTypes,
		Headers: v.headers, SigningScheme: f.Scheme, MaxPerSecond: v.maxPerSec, MaxInFlight: v.maxInFlight,
		Ordered: f.Ordered, Name: f.Name, Labels: v.labels, RequestID: rid.String(), Filter: filterText(f.Filter),
	})
	if errors.Is(err, endpoint.ErrRequestIDReused) {
		// The form was sent before, and created an endpoint; now it asks
		// for another with other values. The endpoint stays as made.
		f.RequestID = newRequestID()
		f.Errors["request_id"] = "this form was already sent and created an endpoint (see your endpoints). Check the form and send it again to create another"
		p.formError(w, r, sess, f)
		return
	}
	if err != nil {
		if f.fieldErrors(err) {
			p.formError(w, r, sess, f)
			return
		}
		p.fail(w, r, sess, err)
		return
	}
	err = p.reveals.put(r.Context(), sess.id, rid, revealCreated, reveal{EndpointID: c.Endpoint.ID, Secret: c.Secret, PublicKey: c.Endpoint.PublicKey})
	if err != nil {
		p.fail(w, r, sess, err)
		return
	}
	p.redirect(w, r, "endpoints/"+c.Endpoint.ID.String()+"/secret?request="+rid.String())
}

// showSecret is the page a create or a rotation leads to: the secret the
// first time, then that it was shown.
func (p *Portal) showSecret(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	rid, ok := requestIDOf(r.URL.Query().Get("request"))
	if !ok {
		p.notFound(w, r, sess)
		return
	}
	rv, err := p.reveals.take(r.Context(), sess.id, rid)
	if errors.Is(err, errNoSession) || err == nil && rv.EndpointID != e.ID {
		p.notFound(w, r, sess)
		return
	}
	if err != nil {
		p.fail(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "secret", sess, &secretData{E: e, Created: rv.Kind == revealCreated, reveal: *rv})
}

func (p *Portal) editEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	if !sess.canManage() {
		p.readOnly(w, r, sess)
		return
	}
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "form", sess, fromEndpoint(p.webhookTypes(), e))
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
	readForm(p.webhookTypes(), r, f)
	f.Scheme = e.SigningScheme
	v := f.parse()
	if len(f.Errors) > 0 {
		p.formError(w, r, sess, f)
		return
	}
	u := f.changes(e, v)
	if len(u.Paths) == 0 {
		// Nothing changed: nothing written, not even updated_at.
		p.redirect(w, r, "endpoints/"+f.ID+"?done=unchanged")
		return
	}
	if _, err := p.svc.Update(r.Context(), u); err != nil {
		if f.fieldErrors(err) {
			p.formError(w, r, sess, f)
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

// confirmData is the page that asks before an action that is hard to take
// back: delete, disable, rotate.
type confirmData struct {
	E         *endpoint.Endpoint
	Action    string // delete, disable, rotate
	RequestID string // rotate: the form's one-time id
}

func (d *confirmData) pageTitle() string {
	switch d.Action {
	case "disable":
		return "Disable endpoint"
	case "rotate":
		return "Rotate secret"
	}
	return "Delete endpoint"
}

// confirm shows the page that asks before action. The rotation's page
// carries its one-time request id in its address (a redirect adds one),
// so Back to it and submit again rotates nothing more.
func (p *Portal) confirm(action string) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		if !sess.canManage() {
			p.readOnly(w, r, sess)
			return
		}
		e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
		if err != nil {
			p.failID(w, r, sess, err)
			return
		}
		d := &confirmData{E: e, Action: action}
		if action == "rotate" {
			d.RequestID = r.URL.Query().Get("request")
			if _, ok := requestIDOf(d.RequestID); !ok {
				p.redirect(w, r, "endpoints/"+e.ID.String()+"/rotate?request="+newRequestID())
				return
			}
		}
		p.render(w, r, http.StatusOK, "confirm", sess, d)
	}
}

func (p *Portal) deleteEndpoint(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := p.svc.Delete(r.Context(), sess.ownerID, r.PathValue("id")); err != nil {
		// Deleted already (a resubmit) is Not found, like another owner's.
		p.failID(w, r, sess, err)
		return
	}
	p.redirect(w, r, "?done=deleted")
}

func (p *Portal) rotateSecret(w http.ResponseWriter, r *http.Request, sess *session) {
	e, err := p.svc.Get(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	id := e.ID.String()
	rid, ok := requestIDOf(r.PostForm.Get("request_id"))
	if !ok {
		p.render(w, r, http.StatusBadRequest, "message", sess, &messageData{Title: "Not rotated",
			Message: "This form had expired, and nothing was rotated. Open the endpoint and rotate from there."})
		return
	}
	grace := endpoint.GracePeriod{}
	if h := r.PostForm.Get("grace_hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 0 {
			grace.Malformed = true
		} else {
			grace.Value = new(time.Duration(n) * time.Hour)
		}
	}
	err = p.reveals.once(r.Context(), sess.id, rid, revealRotated, e.ID, func() (reveal, error) {
		rot, err := p.svc.RotateSecret(r.Context(), sess.ownerID, id, grace)
		if err != nil {
			return reveal{}, err
		}
		return reveal{EndpointID: e.ID, Secret: rot.Secret, PublicKey: rot.PublicKey, PreviousExpiresAt: rot.PreviousExpiresAt}, nil
	})
	if err != nil && !errors.Is(err, errRevealTaken) {
		p.failID(w, r, sess, err)
		return
	}
	// Done now or by the same form before: the page of its secret.
	p.redirect(w, r, "endpoints/"+id+"/secret?request="+rid.String())
}

// endpointData is an endpoint's page: its settings and health, its
// figures, and its deliveries with the filters.
type endpointData struct {
	E          *endpoint.Endpoint
	Health     health
	Stats      [2]stats24h // day, week
	Chart      *chart
	Deliveries []*endpoint.Delivery
	Pages      pager
	Filter     deliveryFilter
	States     []string
	Error      string
}

// FilterText is the endpoint's filter, indented; "" for none.
func (d *endpointData) FilterText() string { return indentFilter(d.E.Filter) }

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
		data.Deliveries = page.Items
		data.Pages = pageLinks(p.base+"endpoints/"+e.ID.String(), q, page.NextPageToken)
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
	p.redirect(w, r, "endpoints/"+id+"?done=redelivered&n="+strconv.Itoa(res.Count))
}

// catalogData is the event catalog page.
type catalogData struct{ Types []catalogType }

type catalogType struct {
	event.TypeInfo
	SchemaText, ExampleText string
}

func (*catalogData) pageTitle() string { return "Event catalog" }

// webhookTypes are the running catalog's webhook types, the ones an endpoint
// subscribes to.
func (p *Portal) webhookTypes() []event.TypeInfo {
	return event.TypesIn(p.cfg.Catalog.Catalog(), event.ExposureWebhook)
}

func (p *Portal) catalog(w http.ResponseWriter, r *http.Request, sess *session) {
	data := &catalogData{}
	for _, t := range p.webhookTypes() {
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

// refresh: the test page reloads itself until the attempt is in.
func (d *testData) refresh() int {
	if d.Waiting {
		return 2
	}
	return 0
}

// TTLMinutes is how long a new secret waits for its page, for the page.
func (*secretData) TTLMinutes() int { return int(RevealTTL / time.Minute) }
