package webhook_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// FuzzDecode feeds arbitrary bodies to the receiver-side thin-event decoder.
// It must never panic; whatever it accepts has every required field and an
// object for data, and survives a round trip through JSON unchanged.
// Seeds live in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"id":"evt_1","type":"corpus.note.changed","subject":"wiki://x","occurred_at":"2026-03-01T12:00:00Z","data":{"published":true}}`,
		`{"id":"evt_1","type":"a.b","subject":"a://b","occurred_at":"2026-03-01T12:00:00.123456789+05:30","data":{},"extra":[1,2]}`,
		`{"id":"evt_1","type":"a.b","subject":"a://b","occurred_at":"2026-03-01T12:00:00Z","data":null}`,
		`{"id":"evt_1","type":"a.b","subject":"a://b","occurred_at":"2026-03-01T12:00:00Z","data":"{}"}`,
		`{"id":"evt_1","type":"a.b","subject":"a://b","occurred_at":"0001-01-01T00:00:00Z","data":{}}`,
		`{"id":"evt_1","id":"evt_2","type":"a.b","subject":"a://b","occurred_at":"2026-03-01T12:00:00Z","data":{"a":1,"a":2}}`,
		`[]`, `null`, ``, `{"data":{}}`, "{\"id\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		t.Parallel()

		ev, err := webhook.Decode(body)
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrInvalidEvent)
			require.Nil(t, ev)
			return
		}
		require.NotEmpty(t, ev.ID)
		require.NotEmpty(t, ev.Type)
		require.NotEmpty(t, ev.Subject)
		require.False(t, ev.OccurredAt.IsZero())
		require.True(t, json.Valid(ev.Data))
		require.True(t, bytes.HasPrefix(bytes.TrimSpace(ev.Data), []byte("{")), "data %q is not an object", ev.Data)

		again, err := json.Marshal(ev)
		require.NoError(t, err)
		ev2, err := webhook.Decode(again)
		require.NoError(t, err, "re-encoded %s", again)
		require.Equal(t, ev.ID, ev2.ID)
		require.Equal(t, ev.Type, ev2.Type)
		require.Equal(t, ev.Subject, ev2.Subject)
		require.True(t, ev.OccurredAt.Equal(ev2.OccurredAt))
		require.JSONEq(t, string(ev.Data), string(ev2.Data))
	})
}
