package catalog_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// TestValidateDataReportsEveryViolation: a data object wrong in several
// places names each field, in order, so that the publisher fixes them all at
// once; one mistake is still a lone *webhook.FieldError.
func TestValidateDataReportsEveryViolation(t *testing.T) {
	t.Parallel()

	t.Run("EveryField", func(t *testing.T) {
		t.Parallel()
		err := catalog.Default().ValidateData("booking.created", json.RawMessage(`{"booking_id": 5, "starts_at": "soon", "colour": "red"}`))
		fields := webhook.Fields(err)
		var got []string
		for _, fe := range fields {
			got = append(got, fe.Field+": "+fe.Reason)
		}
		require.Equal(t, []string{
			"data.booking_id: expected string",
			"data.colour: is not a property of booking.created data",
			"data.starts_at: must be an RFC 3339 date-time",
		}, got)
		require.ErrorIs(t, err, webhook.ErrInvalidEvent)
		fe, ok := errors.AsType[*webhook.FieldError](err)
		require.True(t, ok, "errors.As finds the first")
		require.Equal(t, "data.booking_id", fe.Field)
		require.Equal(t, "invalid event.data.booking_id: expected string (and 2 more invalid fields)", err.Error())
	})

	t.Run("OneMistakeIsOneFieldError", func(t *testing.T) {
		t.Parallel()
		err := catalog.Default().ValidateData("booking.created", json.RawMessage(`{"booking_id": "bk_1", "starts_at": "tomorrow"}`))
		fe, ok := err.(*webhook.FieldError) //nolint:errorlint // exactly one FieldError, neither wrapped nor a FieldErrors
		require.True(t, ok, "%T", err)
		require.Equal(t, "data.starts_at", fe.Field)
	})
}
