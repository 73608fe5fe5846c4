package endpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/filter"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Filter fields and paths.
const (
	// FieldFilter is an endpoint's filter; its mistakes are named below it
	// ("filter.data.status.$in[1]").
	FieldFilter = filter.Root
	// PathFilter replaces the filter (nil or {} removes it).
	PathFilter = FieldFilter
	// FieldSample is TestFilter's sample event (FieldEventID names the
	// stored one, and either when neither or both are given).
	FieldSample = "sample"
)

// parseFilter reads a filter, adding its mistake to v; nil when there is
// none or it is empty.
func (val *validator) parseFilter(v *violations, text []byte) *filter.Filter {
	if len(text) == 0 {
		return nil
	}
	f, err := filter.Parse(text)
	if fe, ok := errors.AsType[*filter.Error](err); ok {
		v.add(fe.Field, fe.Reason)
		return nil
	}
	if err != nil {
		v.add(FieldFilter, "is not a valid filter")
		return nil
	}
	return f
}

// checkFilter holds f against the schemas of the types globs subscribe to.
func (val *validator) checkFilter(v *violations, f *filter.Filter, globs []string) {
	err := f.Check(filter.FieldsFor(val.catalog.Catalog(), globs))
	if es, ok := errors.AsType[filter.Errors](err); ok {
		for _, e := range es {
			v.add(e.Field, e.Reason)
		}
	}
}

// filterAgainst checks a filter in canonical form ("" for none) against
// the schemas of the types globs subscribe to, each mistake's reason after
// prefix.
func (val *validator) filterAgainst(v *violations, text string, globs []string, prefix string) {
	if text == "" {
		return
	}
	f, err := filter.Parse([]byte(text))
	if err != nil {
		v.add(FieldFilter, "is not a valid filter")
		return
	}
	var mine violations
	val.checkFilter(&mine, f, globs)
	for _, m := range mine {
		v.add(m.Field, prefix+m.Description)
	}
}

// CheckFilterRequest is a filter to check with the event types it would
// go with, as a form checks it while it is typed.
type CheckFilterRequest struct {
	OwnerID string
	// Filter is the filter's JSON text; empty is no filter.
	Filter []byte
	// EventTypes are the globs of the endpoint-to-be; empty: every type
	// (a form whose types are not chosen yet).
	EventTypes []string
}

// CheckFilter checks a filter exactly as Create and Update check it (the
// same parse, limits and schema check), without writing anything, and
// returns it in canonical form ("{}" for none). A form calls it to say
// what is wrong while the filter is typed: what it says then is what a
// save would say.
func (s *Service) CheckFilter(r CheckFilterRequest) ([]byte, error) {
	var v violations
	s.val.ownerID(&v, r.OwnerID)
	f := s.val.parseFilter(&v, r.Filter)
	globs := r.EventTypes
	before := len(v)
	if len(globs) > 0 {
		s.val.eventTypes(&v, globs)
	} else {
		globs = []string{"*"}
	}
	// Against the schemas only when the types are valid, as Create does.
	if !f.Empty() && len(v) == before {
		s.val.checkFilter(&v, f, globs)
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	return f.JSON(), nil
}

// TestFilterRequest is what TestFilter evaluates: a filter (or an
// endpoint's) against a stored event of the owner or a sample.
type TestFilterRequest struct {
	OwnerID string
	// Filter is the filter's JSON text; nil: EndpointID's filter.
	Filter     []byte
	EndpointID string
	// EventTypes are the globs the filter is checked against when no
	// endpoint is named; empty: every type.
	EventTypes []string
	// EventID names a stored event; Sample is an event given whole (its
	// type, subject and data are read). Exactly one of them.
	EventID string
	Sample  *webhook.Event
}

// FilterTest is what TestFilter found.
type FilterTest struct {
	Matched bool
	// Explanation says why not, as the event's fanout decision would.
	Explanation string
	// Filter is the filter tested, in canonical form ("{}" for none).
	Filter []byte
	Event  *webhook.Event
	// Applies: the event's type is one the filter applies to (subscribed,
	// and not a test event).
	Applies bool
}

// TestFilter evaluates a filter against an event without delivering
// anything. The filter is checked as Create checks it.
func (s *Service) TestFilter(ctx context.Context, r TestFilterRequest) (*FilterTest, error) {
	var v violations
	s.val.ownerID(&v, r.OwnerID)
	var epID uuid.UUID
	if r.EndpointID != "" {
		epID = parseID(&v, r.EndpointID)
	}
	switch {
	case r.EventID != "" && r.Sample != nil:
		v.add(FieldEventID, "give either a stored event's id or a sample, not both")
	case r.EventID == "" && r.Sample == nil:
		v.add(FieldEventID, "give the id of one of the owner's stored events, or a sample event")
	case r.EventID != "":
		if err := webhook.ValidateID(r.EventID); err != nil {
			v.add(FieldEventID, "is not a valid event id")
		}
	}
	if r.Filter == nil && r.EndpointID == "" {
		v.add(FieldFilter, "give a filter to test, or the endpoint_id of an endpoint whose filter to test")
	}
	if len(r.EventTypes) > 0 {
		s.val.eventTypes(&v, r.EventTypes)
	}
	f := s.val.parseFilter(&v, r.Filter)
	if err := v.err(); err != nil {
		return nil, err
	}

	globs := r.EventTypes
	if r.EndpointID != "" {
		e, err := s.store.Get(ctx, r.OwnerID, epID)
		if err != nil {
			return nil, err
		}
		if len(globs) == 0 {
			globs = e.EventTypes
		}
		if r.Filter == nil && e.Filter != nil {
			if f, err = filter.Parse(e.Filter); err != nil {
				return nil, fmt.Errorf("stored filter of endpoint %s: %w", epID, err)
			}
		}
	}
	if len(globs) == 0 {
		globs = []string{"*"}
	}
	if f != nil && r.Filter != nil {
		s.val.checkFilter(&v, f, globs)
	}

	var ev *webhook.Event
	if r.Sample != nil {
		ev = s.val.sample(&v, r.OwnerID, r.Sample)
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	if ev == nil {
		got, err := s.store.GetEvent(ctx, r.OwnerID, r.EventID)
		if err != nil {
			return nil, err
		}
		ev = got.Event
	}

	d := filter.NewDoc(ev.Subject, ev.Data)
	out := &FilterTest{Matched: f.Matches(d), Explanation: f.Explain(d), Filter: f.JSON(), Event: ev}
	for _, t := range filter.Subscribed(s.val.catalog.Catalog(), globs) {
		if t.Name == ev.Type {
			out.Applies = true
		}
	}
	return out, nil
}

// sample checks a sample event as Publish would check it (its type must be
// one that leaves, its data must match the type's schema), naming the
// fields below "sample".
func (val *validator) sample(v *violations, owner string, in *webhook.Event) *webhook.Event {
	e := &webhook.Event{
		// The id and time are the sample's own: nothing is stored.
		ID: "sample", OwnerID: owner, Type: in.Type, Subject: in.Subject,
		OccurredAt: time.Now().UTC(), Data: in.Data,
	}
	if len(e.Data) == 0 {
		e.Data = []byte("{}")
	}
	cat := val.catalog.Catalog()
	if in.Type != "" && !cat.Known(in.Type) {
		v.add(FieldSample+"."+webhook.FieldType, cat.UnknownType(in.Type))
		return nil
	}
	if in.Type != "" && !cat.Exposed(in.Type) {
		v.add(FieldSample+"."+webhook.FieldType, "is an internal event type, which never leaves: no filter applies to it")
		return nil
	}
	var err error
	if cat.ExposureOf(in.Type) == catalog.ExposureOperational {
		// Only the dispatcher publishes these, but they reach endpoints
		// through their filters like the rest: a sample of one is fine.
		if err = e.Validate(e.OccurredAt); err == nil {
			err = cat.ValidateData(e.Type, e.Data)
		}
	} else {
		err = cat.Validate(e, e.OccurredAt)
	}
	if fe, ok := errors.AsType[*webhook.FieldError](err); ok {
		v.add(FieldSample+"."+fe.Field, fe.Reason)
		return nil
	}
	if err != nil {
		v.add(FieldSample, "is not a valid event")
		return nil
	}
	e.ID = ""
	return e
}

// FilterProblem is an endpoint whose filter a catalog cannot carry: it tests
// fields (or values) that the catalog's types no longer have.
type FilterProblem struct {
	EndpointID string
	OwnerID    string
	Filter     string
	// Mistakes are Check's, each naming its spot.
	Mistakes []*filter.Error
}

// MaxFilterProblems bounds what CheckFilters reports.
const MaxFilterProblems = 1000

// CheckFilters holds every stored filter against cat, with its endpoint's
// event_types, and returns the endpoints whose filters it would break (at
// most MaxFilterProblems, by owner and id) and how many filters it
// checked: what `dispatcher catalog check` runs before a catalog is
// rolled out. pool's search_path must be the dispatcher's schema.
func CheckFilters(ctx context.Context, pool *pgxpool.Pool, cat *catalog.Catalog) (problems []FilterProblem, checked int, err error) {
	rows, err := pool.Query(ctx, `SELECT id::text, owner_id, event_types, filter FROM webhook_endpoints WHERE filter IS NOT NULL ORDER BY owner_id, id`)
	if err != nil {
		return nil, 0, fmt.Errorf("read endpoint filters: %w", err)
	}
	defer rows.Close()
	fields := map[string]*filter.Fields{}
	for rows.Next() {
		var (
			p     FilterProblem
			globs []string
		)
		if err := rows.Scan(&p.EndpointID, &p.OwnerID, &globs, &p.Filter); err != nil {
			return nil, 0, fmt.Errorf("read endpoint filters: %w", err)
		}
		checked++
		f, err := filter.Parse([]byte(p.Filter))
		if fe, ok := errors.AsType[*filter.Error](err); ok {
			p.Mistakes = []*filter.Error{fe}
		} else if err == nil {
			// Endpoints share their subscriptions often: read the schemas
			// once per list of globs.
			key := strings.Join(globs, "\x00")
			fs, ok := fields[key]
			if !ok {
				fs = filter.FieldsFor(cat, globs)
				fields[key] = fs
			}
			if es, ok := errors.AsType[filter.Errors](f.Check(fs)); ok {
				p.Mistakes = es
			}
		}
		if len(p.Mistakes) > 0 && len(problems) < MaxFilterProblems {
			problems = append(problems, p)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read endpoint filters: %w", err)
	}
	return problems, checked, nil
}

// currentSubscription reads, in tx and locked against concurrent updates,
// what an update that changes only one of event_types and filter must check
// the other against.
func currentSubscription(ctx context.Context, tx pgx.Tx, owner string, id uuid.UUID) (globs []string, filterText *string, err error) {
	err = tx.QueryRow(ctx, `SELECT event_types, filter FROM webhook_endpoints WHERE id = $1 AND owner_id = $2 FOR NO KEY UPDATE`, id, owner).
		Scan(&globs, &filterText)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	return globs, filterText, err
}
