package ingest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// FuzzRelayRow feeds arbitrary outbox rows through the relay's row → event
// conversion and the validation that decides whether a row is relayed or set
// aside. It must never panic; a row that passes must make a payload that
// carries exactly the row's fields (never the owner) and the row's data,
// compacted but equal in meaning. Seeds live in testdata/fuzz/FuzzRelayRow.
func FuzzRelayRow(f *testing.F) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := now.Add(-time.Minute).UnixMicro()
	f.Add("evt_1", "owner_1", event.TypeNoteChanged, "wiki://software/project/x", at, `{"op": "updated", "published": true}`)
	f.Add("evt.1", "owner 1", "Corpus", "no-scheme", int64(0), `[1, 2]`)
	f.Add("", "", "", "", int64(-9223372036854775808), `null`)
	f.Add("evt_2", "owner_1", "billing.invoice.computed", "raw://diary", at, `{"a": {"b": [1, {"c": null}]}}`)
	f.Add("evt_3", "owner_1", event.TypeNoteChanged, "wiki://x", at, `{"k": "\u0000"}`)
	f.Add("evt_4", "owner_1", event.TypeNoteChanged, "wiki://x", at, `{"k": "\ud83d\ude00", "l": "\ud800"}`)
	f.Add("evt_5", "owner_1", event.TypeNoteChanged, "wiki://x", at, "{\"k\": \"\xff\"}")

	f.Fuzz(func(t *testing.T, id, owner, typ, subject string, micros int64, data string) {
		t.Parallel()

		row := outboxRow{id: 1, eventID: id, ownerID: owner, typ: typ, subject: subject, occurredAt: time.UnixMicro(micros), data: data}
		e := row.event()
		require.Equal(t, id, e.ID)
		require.Equal(t, owner, e.OwnerID)
		require.Equal(t, typ, e.Type)
		require.Equal(t, subject, e.Subject)
		if json.Valid([]byte(data)) {
			var want bytes.Buffer
			require.NoError(t, json.Compact(&want, []byte(data)))
			require.Equal(t, want.String(), string(e.Data), "valid data is relayed compacted")
		} else {
			require.Equal(t, data, string(e.Data), "invalid data is kept as is, for validation to refuse")
		}

		if err := e.Validate(now); err != nil {
			var fe *webhook.FieldError
			require.ErrorAs(t, err, &fe, "a refusal always names its field")
			return
		}
		require.LessOrEqual(t, len(e.Data), webhook.MaxDataBytes)
		body, err := e.Payload()
		require.NoError(t, err, "a valid event always has a payload")
		var got struct {
			ID         string          `json:"id"`
			Type       string          `json:"type"`
			Subject    string          `json:"subject"`
			OccurredAt time.Time       `json:"occurred_at"`
			Data       json.RawMessage `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &got))
		require.Equal(t, id, got.ID)
		require.Equal(t, typ, got.Type)
		require.Equal(t, subject, got.Subject)
		require.True(t, row.occurredAt.Equal(got.OccurredAt))
		require.JSONEq(t, data, string(got.Data))
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &top))
		require.Len(t, top, 5, "the payload is thin: id, type, subject, occurred_at, data")
		require.NotContains(t, top, "owner_id")
	})
}
