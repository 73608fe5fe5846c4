package main

import (
	"os"
	"path"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPage(t *testing.T) {
	t.Parallel()

	t.Run("DocsEventsMdIsUpToDate", func(t *testing.T) {
		t.Parallel()
		want, err := page()
		require.NoError(t, err)
		got, err := os.ReadFile(path.Join("..", "..", "..", "docs", "events.md"))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "docs/events.md is out of date: run make generate and commit it")
	})

	t.Run("HasTheFilters", func(t *testing.T) {
		t.Parallel()
		text, err := page()
		require.NoError(t, err)
		require.Contains(t, string(text), "\n## Filters\n")
		require.Contains(t, string(text), "| size, as compact JSON | 4096 bytes |")
	})
}
