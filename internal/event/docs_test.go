package event

import (
	"os"
	"path"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMarkdown(t *testing.T) {
	t.Parallel()

	t.Run("DocsEventsMdIsUpToDate", func(t *testing.T) {
		t.Parallel()
		want, err := Markdown()
		require.NoError(t, err)
		got, err := os.ReadFile(path.Join("..", "..", "docs", "events.md"))
		require.NoError(t, err)
		// The filters' section follows (internal/event/eventsdoc checks the
		// whole page).
		require.Equal(t, string(want), string(got[:min(len(want), len(got))]), "docs/events.md is out of date: run make generate and commit it")
	})

	t.Run("NamesEveryTypeAndProperty", func(t *testing.T) {
		t.Parallel()
		text, err := Markdown()
		require.NoError(t, err)
		for _, ti := range WebhookTypes() {
			require.Contains(t, string(text), "## `"+ti.Name+"`")
			props, _, err := schemaProperties(ti.Schema)
			require.NoError(t, err)
			for _, p := range props {
				require.Contains(t, string(text), "| `"+p.name+"` |", ti.Name)
			}
		}
	})
}
