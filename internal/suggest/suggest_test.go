package suggest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNearest(t *testing.T) {
	t.Parallel()

	t.Run("Typos", func(t *testing.T) {
		t.Parallel()
		known := []string{"list", "get", "event_types", "description", "endpoints"}
		for typo, want := range map[string]string{
			"lsit": "list", "gte": "get", "evnt_types": "event_types", "Descripton": "description", "endpionts": "endpoints", //nolint:misspell // misspelt on purpose
		} {
			require.Equal(t, want, Nearest(typo, known), typo)
		}
	})

	t.Run("NothingNear", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Nearest("frobnicate", []string{"list", "get"}))
		require.Empty(t, Nearest("zz", []string{"get"}), "short names need a near match")
	})

	t.Run("Distance", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 0, Distance("abc", "abc"))
		require.Equal(t, 1, Distance("abc", "acb"), "a swap is one edit")
		require.Equal(t, 3, Distance("", "abc"))
	})
}
