package portal

import (
	"net/http"
	"strconv"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// deliveryData is a delivery's page: its state and its attempts.
type deliveryData struct {
	D        *endpoint.Delivery
	E        *endpoint.Endpoint
	Attempts []attempt.Attempt
	Pages    pager
	CanRetry bool
	// CanResend: delivered, so it can be sent once more on request.
	CanResend bool
	Ended     bool
}

func (d *deliveryData) pageTitle() string {
	return "Delivery " + strconv.FormatInt(d.D.JobID, 10)
}

// deliveryID reads a delivery id from the URL; a malformed one is not
// found, like another owner's.
func deliveryID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

func (p *Portal) showDelivery(w http.ResponseWriter, r *http.Request, sess *session) {
	id, ok := deliveryID(r)
	if !ok {
		p.notFound(w, r, sess)
		return
	}
	d, err := p.svc.GetDelivery(r.Context(), sess.ownerID, id)
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	data := &deliveryData{D: d, CanRetry: d.State == endpoint.DeliveryScheduled, CanResend: d.State == endpoint.DeliveryDelivered,
		Ended: d.State == endpoint.DeliveryFailed || d.State == endpoint.DeliveryCancelled}
	if e, err := p.svc.Get(r.Context(), sess.ownerID, d.EndpointID); err == nil {
		data.E = e
	}
	atts, err := p.svc.ListAttempts(r.Context(), sess.ownerID, id, 50, r.URL.Query().Get("page"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	data.Attempts = atts.Items
	data.Pages = pageLinks(p.base+"deliveries/"+strconv.FormatInt(id, 10), r.URL.Query(), atts.NextPageToken)
	p.render(w, r, http.StatusOK, "delivery", sess, data)
}

func (p *Portal) retryDelivery(w http.ResponseWriter, r *http.Request, sess *session) {
	id, ok := deliveryID(r)
	if !ok {
		p.notFound(w, r, sess)
		return
	}
	// The Resend button says so; a second click while the resend is on its
	// way finds it pending and sends nothing more.
	retry, done := p.svc.RetryDelivery, "retried"
	if r.PostFormValue("resend") == "1" {
		retry, done = p.svc.ResendDelivery, "resent"
	}
	if _, err := retry(r.Context(), sess.ownerID, id); err != nil {
		p.failID(w, r, sess, err)
		return
	}
	p.redirect(w, r, "deliveries/"+strconv.FormatInt(id, 10)+"?done="+done)
}

// eventsData is the events search.
type eventsData struct {
	Events               []*webhook.Event
	Pages                pager
	Type, Subject        string
	After, Before, Error string
}

func (*eventsData) pageTitle() string { return "Events" }

func (p *Portal) listEvents(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	data := &eventsData{Type: q.Get("type"), Subject: q.Get("subject"), After: q.Get("after"), Before: q.Get("before")}
	page, err := p.svc.ListEvents(r.Context(), endpoint.ListEventsRequest{
		OwnerID: sess.ownerID, PageSize: 25, PageToken: q.Get("page"), EventType: data.Type, SubjectPrefix: data.Subject,
		OccurredAfter: parseInputTime(data.After), OccurredBefore: parseInputTime(data.Before),
	})
	switch {
	case err == nil:
		data.Events = page.Items
		data.Pages = pageLinks(p.base+"events", q, page.NextPageToken)
	case isInvalid(err):
		data.Error = err.Error()
	default:
		p.fail(w, r, sess, err)
		return
	}
	p.render(w, r, http.StatusOK, "events", sess, data)
}

// eventData is an event's page: the event, its deliveries, and the fanout's
// decision for every endpoint of the owner.
type eventData struct {
	Ev         *webhook.Event
	Data       string
	Deliveries []*endpoint.Delivery
	Labels     map[string]string
	Decisions  []decisionRow
	Recorded   bool
	// Withheld: scope kept the event from every one of the owner's
	// endpoints, so the page shows the decisions and not the data, which
	// the owner's receivers were not allowed to see either.
	Withheld bool
}

type decisionRow struct {
	Reason    string
	Delivered bool
	Count     int
	Endpoints []endpointRef
}

// endpointRef names an endpoint on a page: its name, else its URL, else
// (deleted since) its id; Note says more of its decision (a filter's:
// which condition refused the event, with what value).
type endpointRef struct{ ID, Label, Note string }

func (*eventData) pageTitle() string { return "Event" }

// reasonText says each fanout decision in a sentence.
var reasonText = map[decision.Reason]string{
	decision.NotSubscribed:   "Not subscribed to this event type",
	decision.Disabled:        "Endpoint disabled",
	decision.NotTestTarget:   "Not the endpoint this test event was sent to",
	decision.NotPublished:    "Scope: the subject is not published",
	decision.EmbedDenied:     "Scope: the embed's access code does not admit it",
	decision.NoAccessService: "Scope: no access service to ask",
	decision.AccessError:     "Scope: the access service did not answer",
	decision.Refused:         "Refused by the scope rules",
	decision.Queued:          "Delivery queued",
	decision.HandedOff:       "Delivery started at once",
	decision.CoolingDown:     "Delivery queued behind the endpoint's cool-down (it is failing)",
	decision.Paused:          "Delivery queued for the end of the receiver's pause",
	decision.Filtered:        "Kept back by the endpoint's filter",
}

func (p *Portal) showEvent(w http.ResponseWriter, r *http.Request, sess *session) {
	ev, err := p.svc.GetEvent(r.Context(), sess.ownerID, r.PathValue("id"))
	if err != nil {
		p.failID(w, r, sess, err)
		return
	}
	data := &eventData{Ev: ev.Event, Data: indent(ev.Event.Data), Deliveries: ev.Deliveries, Labels: map[string]string{}}
	// The owner's endpoints by id, to name them (one page: the owner's cap
	// is 100 by default).
	if eps, err := p.svc.List(r.Context(), sess.ownerID, endpoint.MaxPageSize, "", nil); err == nil {
		for _, e := range eps.Items {
			label := e.Name
			if label == "" {
				label = e.URL
			}
			data.Labels[e.ID.String()] = label
		}
	}
	if ev.Fanout != nil {
		data.Recorded = true
		data.Withheld = scopeKept(ev.Fanout.Outcomes)
		if data.Withheld {
			data.Data = ""
		}
		for _, o := range ev.Fanout.Outcomes {
			text := reasonText[o.Reason]
			if text == "" {
				text = o.Reason.String()
			}
			row := decisionRow{Reason: text, Delivered: o.Reason.Delivered(), Count: o.Count}
			for i, id := range o.EndpointIDs {
				ref := endpointRef{ID: id, Label: data.label(id)}
				if i < len(o.Notes) {
					ref.Note = o.Notes[i]
				}
				row.Endpoints = append(row.Endpoints, ref)
			}
			data.Decisions = append(data.Decisions, row)
		}
	}
	p.render(w, r, http.StatusOK, "event", sess, data)
}

// scopeKept: no endpoint got the event, and scope is why for at least one
// that was subscribed.
func scopeKept(outcomes []decision.Outcome) bool {
	kept := false
	for _, o := range outcomes {
		if o.Reason.Delivered() {
			return false
		}
		switch o.Reason {
		case decision.NotPublished, decision.EmbedDenied, decision.NoAccessService, decision.AccessError, decision.Refused:
			kept = true
		}
	}
	return kept
}

// label names an endpoint of the owner by id.
func (d *eventData) label(id string) string {
	if l := d.Labels[id]; l != "" {
		return l
	}
	return id
}

// Label is label for the template.
func (d *eventData) Label(id string) string { return d.label(id) }
