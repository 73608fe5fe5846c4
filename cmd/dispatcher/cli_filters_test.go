package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFilterFlag(t *testing.T) {
	t.Parallel()

	t.Run("ReadsJSON", func(t *testing.T) {
		t.Parallel()
		var f filterFlag
		require.NoError(t, f.Set(`{"subject": {"$startsWith": "wiki://"}, "data.op": "published"}`))
		require.JSONEq(t, `{"data.op":"published","subject":{"$startsWith":"wiki://"}}`, filterText(f.st))
	})

	t.Run("ReadsAFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "filter.json")
		require.NoError(t, os.WriteFile(path, []byte("{\n  \"data.op\": {\"$in\": [\"published\"]}\n}\n"), 0o600))
		var f filterFlag
		require.NoError(t, f.Set("@"+path))
		require.JSONEq(t, `{"data.op":{"$in":["published"]}}`, filterText(f.st))
	})

	t.Run("EmptyIsNone", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"", "  ", "{}"} {
			var f filterFlag
			require.NoError(t, f.Set(v))
			require.Nil(t, f.st, "%q", v)
		}
	})

	t.Run("MistakesNameTheirSpot", func(t *testing.T) {
		t.Parallel()
		var f filterFlag
		require.ErrorContains(t, f.Set(`{"data.op": {"$in": ["published"]}`), "filter: is not valid JSON: it ends at byte 34 (line 1, column 35)")
		require.ErrorContains(t, f.Set(`{"data.op": {"$exists": true}}`), "filter.data.op.$exists: is not an operator (did you mean $exist?)")
		require.ErrorContains(t, f.Set("@/nonexistent/filter.json"), "cannot read the filter")
	})
}
