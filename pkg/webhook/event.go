package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidEvent reports a verified body that is not a well-formed thin event.
var ErrInvalidEvent = errors.New("webhook: invalid event")

// Event is the thin event the dispatcher carries: enough to know what changed, never
// the document itself. Receivers call the application's API for content, so a leaked
// or replayed delivery discloses little.
//
// The same type is what a publisher validates ([Event.Validate]), what the dispatcher
// stores and signs ([Event.Payload]) and what a receiver decodes ([Decode]).
type Event struct {
	// ID is unique per event and equals the webhook-id header; use it to deduplicate.
	ID string `json:"id"`
	// Type names the event, e.g. "corpus.note.changed".
	Type string `json:"type"`
	// Subject is the URI of the thing the event is about. Deletion events carry the
	// last known subject.
	Subject string `json:"subject"`
	// OccurredAt is when the change happened in the application, not when it was
	// delivered; deliveries can arrive late and out of order.
	OccurredAt time.Time `json:"occurred_at"`
	// Data is a small JSON object whose shape depends on Type.
	Data json.RawMessage `json:"data"`

	// OwnerID is the owner the event is published for: only that owner's endpoints
	// may receive it. It travels beside the event, never in it, so it is not part of
	// the payload and is always empty in an Event that Decode returns.
	OwnerID string `json:"-"`

	// Weight is the publishing call's weight in the fairness across owners
	// (0: none given, counted as 1); a backfill published at 0.1 goes behind
	// the owner's live traffic. Like OwnerID it travels beside the event and
	// is never part of the payload. The dispatcher does not store it: an
	// event fanned out by a job of its own (one that asks the access
	// service) goes at its owner's weight.
	Weight float64 `json:"-"`
}

// Decode parses a thin event.
//
// Unknown top-level fields are ignored so receivers keep working when the sender adds
// fields. id, type, subject and occurred_at are required, and data must be a JSON
// object (possibly empty).
func Decode(body []byte) (*Event, error) {
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	var missing []string
	if ev.ID == "" {
		missing = append(missing, "id")
	}
	if ev.Type == "" {
		missing = append(missing, "type")
	}
	if ev.Subject == "" {
		missing = append(missing, "subject")
	}
	if ev.OccurredAt.IsZero() {
		missing = append(missing, "occurred_at")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %q", ErrInvalidEvent, missing)
	}
	// Unmarshal leaves RawMessage nil when the field is absent and keeps "null" or a
	// scalar verbatim; receivers index into data, so only an object is accepted.
	if d := bytes.TrimSpace(ev.Data); len(d) == 0 || d[0] != '{' {
		return nil, fmt.Errorf("%w: data must be a JSON object", ErrInvalidEvent)
	}
	return &ev, nil
}
