package endpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPageTokens(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		c, ok := decodeListToken(encodeListToken(ListCursor{}))
		require.True(t, ok)
		require.NotNil(t, c)
		id, ok := decodeDeliveriesToken(encodeDeliveriesToken(42))
		require.True(t, ok)
		require.Equal(t, int64(42), id)
	})

	t.Run("RejectsForeignTokens", func(t *testing.T) {
		t.Parallel()
		_, ok := decodeDeliveriesToken(encodeToken("d1", "-1"))
		require.False(t, ok)
		_, ok = decodeListToken(encodeToken("e1", "x", "y"))
		require.False(t, ok)
		_, ok = decodeListToken("%%%")
		require.False(t, ok)
	})
}
