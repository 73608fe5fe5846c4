package webhook_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestDecode(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()

		ev, err := webhook.Decode([]byte(testBody))
		require.NoError(t, err)
		require.Equal(t, &webhook.Event{
			ID:         testMsgID,
			Type:       "corpus.note.changed",
			Subject:    "wiki://software/project/standmeet/architecture",
			OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			Data:       []byte(`{"op":"updated","published":true,"was_published":true}`),
		}, ev)
	})

	t.Run("UnknownFieldsIgnored", func(t *testing.T) {
		t.Parallel()

		ev, err := webhook.Decode([]byte(`{"id":"e1","type":"t","subject":"s://x","occurred_at":"2026-01-02T03:04:05.123+02:00","data":{},"schema_version":2,"trace":{"id":"x"}}`))
		require.NoError(t, err)
		require.Equal(t, "e1", ev.ID)
		require.True(t, ev.OccurredAt.Equal(time.Date(2026, 1, 2, 1, 4, 5, 123_000_000, time.UTC)))
		require.JSONEq(t, `{}`, string(ev.Data))
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()

		tests := []struct {
			name string
			body string
		}{
			{name: "Empty", body: ``},
			{name: "NotJSON", body: `hello`},
			{name: "Array", body: `[]`},
			{name: "TrailingGarbage", body: `{"id":"e1","type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":{}} x`},
			{name: "MissingID", body: `{"type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":{}}`},
			{name: "MissingType", body: `{"id":"e1","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":{}}`},
			{name: "MissingSubject", body: `{"id":"e1","type":"t","occurred_at":"2026-01-02T03:04:05Z","data":{}}`},
			{name: "MissingOccurredAt", body: `{"id":"e1","type":"t","subject":"s","data":{}}`},
			{name: "BadOccurredAt", body: `{"id":"e1","type":"t","subject":"s","occurred_at":"yesterday","data":{}}`},
			{name: "MissingData", body: `{"id":"e1","type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z"}`},
			{name: "NullData", body: `{"id":"e1","type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":null}`},
			{name: "ArrayData", body: `{"id":"e1","type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":[1]}`},
			{name: "StringData", body: `{"id":"e1","type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":"{}"}`},
			{name: "WrongIDType", body: `{"id":1,"type":"t","subject":"s","occurred_at":"2026-01-02T03:04:05Z","data":{}}`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()

				ev, err := webhook.Decode([]byte(tt.body))
				require.ErrorIs(t, err, webhook.ErrInvalidEvent)
				require.Nil(t, ev)
			})
		}
	})
}
