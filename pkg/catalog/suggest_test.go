package catalog_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestClosest(t *testing.T) {
	t.Parallel()
	c := catalog.Default()

	for _, tt := range []struct{ typ, want string }{
		{"booking.craeted", "booking.created"}, // two letters swapped
		{"booking.create", "booking.created"},  // one left out
		{"bookings.created", "booking.created"},
		{"booking_created", "booking.created"},
		{"corpus.note.chnaged", "corpus.note.changed"},
		{"booking.canceled", "booking.cancelled"},
		{"code.isued", "code.issued"},
		{"gas.refiled", "gas.refilled"},
	} {
		got, ok := c.Closest(tt.typ)
		require.True(t, ok, tt.typ)
		require.Equal(t, tt.want, got, tt.typ)
	}

	t.Run("NothingNear", func(t *testing.T) {
		t.Parallel()
		for _, typ := range []string{"order.placed", "booking.new", "x", "", "audit.logged"} {
			_, ok := c.Closest(typ)
			require.False(t, ok, typ)
		}
	})

	t.Run("KnownTypeHasNone", func(t *testing.T) {
		t.Parallel()
		_, ok := c.Closest("booking.created")
		require.False(t, ok)
	})

	t.Run("OperationalTypesAreNotSuggested", func(t *testing.T) {
		t.Parallel()
		// endpoint.failing is the dispatcher's own: a publisher may not
		// publish it, so it is no answer to a typo.
		_, ok := c.Closest("endpoint.failin")
		require.False(t, ok)
	})

	t.Run("RequireKnown", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, c.RequireKnown("booking.created"))
		err := c.RequireKnown("booking.craeted")
		fe, ok := errors.AsType[*webhook.FieldError](err)
		require.True(t, ok, "%T", err)
		require.Equal(t, webhook.FieldType, fe.Field)
		require.Equal(t, `invalid event.type: is in no event catalog; did you mean "booking.created"?`, err.Error())
		require.EqualError(t, c.RequireKnown("order.placed"), "invalid event.type: is in no event catalog")
	})
}

func TestUnknownType(t *testing.T) {
	t.Parallel()
	require.Equal(t, `is in no event catalog; did you mean "booking.created"?`, catalog.Default().UnknownType("bookng.created"))
	require.Equal(t, "is in no event catalog", catalog.Default().UnknownType("order.placed"))
}
