package pglisten

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	t.Parallel()

	for failures := range 20 {
		d := Backoff(failures)
		require.Positive(t, d)
		require.LessOrEqual(t, d, maxBackoff*6/5, "failures=%d", failures)
	}
	require.Less(t, Backoff(1), 200*time.Millisecond)
	require.GreaterOrEqual(t, Backoff(20), maxBackoff*4/5)
}
