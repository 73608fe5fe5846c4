package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPublishEvent(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		ev, err := publishEvent("acme", "booking.created", "booking://1", "", "", "")
		require.NoError(t, err)
		require.Empty(t, ev.GetId(), "the server assigns one")
		require.Nil(t, ev.GetOccurredAt(), "the server's time")
		require.Empty(t, ev.GetData().GetFields())
		require.NotNil(t, ev.GetData(), "an empty object, not none")
		require.Equal(t, "acme", ev.GetOwnerId())
	})

	t.Run("Given", func(t *testing.T) {
		t.Parallel()
		ev, err := publishEvent("acme", "corpus.note.changed", "wiki://x", `{"op":"updated","published":true,"n":3}`, "evt_1", "2026-11-30T10:00:00Z")
		require.NoError(t, err)
		require.Equal(t, "evt_1", ev.GetId())
		require.Equal(t, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), ev.GetOccurredAt().AsTime())
		require.True(t, ev.GetData().GetFields()["published"].GetBoolValue())
		require.InDelta(t, 3, ev.GetData().GetFields()["n"].GetNumberValue(), 0)
	})

	t.Run("BadFlagsNamed", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			owner, typ, subject, data, occurred, want string
		}{
			{"", "a.b", "s://x", "{}", "", "--owner"},
			{"acme", "", "s://x", "{}", "", "--type"},
			{"acme", "a.b", "", "{}", "", "--subject"},
			{"acme", "a.b", "s://x", "[1]", "", "invalid --data"},
			{"acme", "a.b", "s://x", `{"a":`, "", "invalid --data"},
			{"acme", "a.b", "s://x", "{}", "yesterday", "invalid --occurred-at"},
		} {
			_, err := publishEvent(tc.owner, tc.typ, tc.subject, tc.data, "", tc.occurred)
			require.ErrorContains(t, err, tc.want)
		}
	})
}

func TestCallError(t *testing.T) {
	t.Parallel()

	t.Run("FieldViolationsOnce", func(t *testing.T) {
		t.Parallel()
		st, err := status.New(codes.InvalidArgument, "invalid url: must be an http or https URL (and 1 more invalid field: event_types[1])").
			WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: "url", Description: "must be an http or https URL"},
				{Field: "event_types[1]", Description: "not a valid glob"},
			}})
		require.NoError(t, err)
		got := callError("endpoints create", st.Err()).Error()
		require.Equal(t, "endpoints create: InvalidArgument:\n  url: must be an http or https URL\n  event_types[1]: not a valid glob", got)
		require.Equal(t, 1, strings.Count(got, "must be an http or https URL"), "each violation printed once")
	})

	t.Run("MessageWithoutDetails", func(t *testing.T) {
		t.Parallel()
		got := callError("endpoints get", status.Error(codes.NotFound, "endpoint not found")).Error()
		require.Equal(t, "endpoints get: NotFound: endpoint not found", got)
	})
}
