package client

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Builder builds one event. Start it with the function named for the type
// (CodeIssued, CorpusNoteChanged, …) or NewEvent, set what the event needs,
// and call Event. Its methods return the builder, so calls chain.
type Builder struct {
	e    webhook.Event
	data map[string]any
	raw  json.RawMessage
}

// NewEvent starts an event of type typ (Type… constants) of ownerID about
// subject (a URI such as "code://c_123").
func NewEvent(typ, ownerID, subject string) *Builder {
	return &Builder{e: webhook.Event{Type: typ, OwnerID: ownerID, Subject: subject}}
}

// ID sets the event's id. Publishing is idempotent by id: publish a retried
// or re-sent event with the id it had. Default: a new UUID.
func (b *Builder) ID(id string) *Builder { b.e.ID = id; return b }

// OccurredAt sets when it happened. Default: when Event is called.
func (b *Builder) OccurredAt(t time.Time) *Builder { b.e.OccurredAt = t; return b }

// Set sets one key of the event's data (a small JSON object: ids, flags,
// never a document body).
func (b *Builder) Set(key string, value any) *Builder {
	if b.data == nil {
		b.data = make(map[string]any)
	}
	b.data[key] = value
	return b
}

// Data sets the event's data, replacing what was set before; data is copied.
func (b *Builder) Data(data map[string]any) *Builder {
	b.data, b.raw = maps.Clone(data), nil
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
