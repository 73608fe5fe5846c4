package revocation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

func TestStore(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db    *dbtest.DB
		store *Store
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		return &testBundle{db: db, store: New(db.Pool)}
	}

	t.Run("RevokedUntilPruned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		revoked, err := b.store.Revoked(ctx, "session-a")
		require.NoError(t, err)
		require.False(t, revoked)

		require.NoError(t, b.store.Revoke(ctx, "session-a", time.Now().Add(time.Hour)))
		require.NoError(t, b.store.Revoke(ctx, "session-a", time.Now().Add(time.Hour)), "twice is fine")
		revoked, err = b.store.Revoked(ctx, "session-a")
		require.NoError(t, err)
		require.True(t, revoked)

		// A row past its session's expiry goes with the next logout.
		require.NoError(t, b.store.Revoke(ctx, "session-old", time.Now().Add(-time.Minute)))
		require.NoError(t, b.store.Revoke(ctx, "session-b", time.Now().Add(time.Hour)))
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM session_revocations`).Scan(&n))
		require.Equal(t, 2, n)
	})
}
