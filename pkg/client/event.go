package client

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Builder builds one event. Start it with the function named for the type,
// which takes the type's data (CodeIssued(owner, subject, CodeIssuedData{…})),
// or with NewEvent; set what else the event needs, and call Event. Its
// methods return the builder, so calls chain.
type Builder struct {
	e    webhook.Event
	data any // a map (Set, Data) or a value to encode (DataValue)
	raw  json.RawMessage
	err  error
}

// NewEvent starts an event of type typ (Type… constants) of ownerID about
// subject (a URI such as "code://c_123"), with empty data.
func NewEvent(typ, ownerID, subject string) *Builder {
	return &Builder{e: webhook.Event{Type: typ, OwnerID: ownerID, Subject: subject}}
}

// ID sets the event's id. Publishing is idempotent by id: publish a retried
// or re-sent event with the id it had. Default: a new UUID.
func (b *Builder) ID(id string) *Builder { b.e.ID = id; return b }

// OccurredAt sets when it happened. Default: when Event is called.
func (b *Builder) OccurredAt(t time.Time) *Builder { b.e.OccurredAt = t; return b }

// Set sets one key of data built as a map (NewEvent, Data); data set with
// DataValue (a type's …Data struct) has fields for that instead.
func (b *Builder) Set(key string, value any) *Builder {
	switch m := b.data.(type) {
	case nil:
		b.data, b.raw = map[string]any{key: value}, nil
	case map[string]any:
		m[key] = value
	default:
		b.err = fmt.Errorf("client: Set(%q) on data of type %T: set the field instead", key, b.data)
	}
	return b
}

// Data sets the event's data, replacing what was set before; data is copied.
func (b *Builder) Data(data map[string]any) *Builder {
	b.data, b.raw = maps.Clone(data), nil
	return b
}

// DataValue sets the event's data to v encoded as JSON (an object: a
// …Data struct, or any struct or map), replacing what was set before.
func (b *Builder) DataValue(v any) *Builder {
	b.data, b.raw = v, nil
	return b
}

// DataJSON sets the event's data as a JSON object, replacing what was set
// before.
func (b *Builder) DataJSON(data json.RawMessage) *Builder {
	b.data, b.raw = nil, data
	return b
}

// Event returns the event, with its id and occurred_at defaulted, once it
// passes the dispatcher's rules (webhook.Event.Validate); the error is a
// *webhook.FieldError naming the field otherwise. Each call defaults the id
// anew: keep the event, not the builder, to publish it again.
func (b *Builder) Event() (*webhook.Event, error) {
	if b.err != nil {
		return nil, b.err
	}
	e := b.e
	if e.ID == "" {
		e.ID = uuid.NewString()
	}
	now := time.Now()
	if e.OccurredAt.IsZero() {
		// Microseconds: what the dispatcher stores, so that publishing the
		// same event again is a duplicate, not a conflict.
		e.OccurredAt = now.UTC().Truncate(time.Microsecond)
	}
	switch {
	case b.raw != nil:
		e.Data = append(json.RawMessage(nil), b.raw...)
	case b.data != nil:
		d, err := json.Marshal(b.data)
		if err != nil {
			return nil, fmt.Errorf("client: event data: %w", err)
		}
		e.Data = d
	default:
		e.Data = json.RawMessage("{}")
	}
	if err := e.Validate(now); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &e, nil
}
