package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/event"
)

func TestGenerate(t *testing.T) {
	t.Parallel()

	t.Run("CommittedFileIsCurrent", func(t *testing.T) {
		t.Parallel()
		want, err := Generate(event.WebhookTypes())
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join("..", "..", "pkg", "client", "events.go"))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "pkg/client/events.go is stale: run make generate")
	})

	t.Run("Names", func(t *testing.T) {
		t.Parallel()
		for typ, want := range map[string]string{
			"code.issued":                   "CodeIssued",
			"access_request.status_changed": "AccessRequestStatusChanged",
			"api_key.issued":                "APIKeyIssued",
			"ip_ban.added":                  "IPBanAdded",
			"microsite.store.doc_inserted":  "MicrositeStoreDocInserted",
		} {
			got, err := goName(typ)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
		for _, bad := range []string{"", ".", "Code.issued", "code-issued", "1code.x", "café.x"} {
			_, err := goName(bad)
			require.Error(t, err, bad)
		}
	})

	t.Run("CollisionIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := Generate([]event.TypeInfo{{Name: "a_b.c"}, {Name: "a.b_c"}})
		require.ErrorContains(t, err, "both become ABC")
	})
}
