package endpoint

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

func TestCheckFilter(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		svc *Service
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		key, err := seal.GenerateMasterKey()
		require.NoError(t, err)
		kr, err := seal.ParseKeyring(key)
		require.NoError(t, err)
		return &testBundle{svc: NewService(ServiceConfig{}, db.Pool, db.InsertOnlyClient(t), kr, nil, slog.New(slog.DiscardHandler))}
	}

	violationsOf := func(t *testing.T, err error) []FieldViolation {
		t.Helper()
		ve, ok := errors.AsType[*ValidationError](err)
		require.True(t, ok, "a validation error: %v", err)
		return ve.Violations
	}

	// What a form says while the filter is typed is what a save says.
	t.Run("SaysWhatCreateSays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, text := range []string{
			`{"data.opp": {"$in": ["published"]}}`,
			`{"data.op": {"$gt": 3}}`,
			`{"data.op": {"$in": ["published"]`,
			`{"data.op": {"$nope": 1}}`,
		} {
			_, checked := b.svc.CheckFilter(CheckFilterRequest{OwnerID: "o", Filter: []byte(text), EventTypes: []string{"corpus.*"}})
			_, created := b.svc.Create(t.Context(), CreateParams{OwnerID: "o", URL: "https://example.com/h", EventTypes: []string{"corpus.*"}, Filter: []byte(text)})
			require.Equal(t, violationsOf(t, created), violationsOf(t, checked), text)
		}
		list, err := b.svc.List(t.Context(), "o", 0, "", nil)
		require.NoError(t, err)
		require.Empty(t, list.Items)
	})

	t.Run("CanonicalWhenValid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := b.svc.CheckFilter(CheckFilterRequest{OwnerID: "o", Filter: []byte(`{ "subject": {"$startsWith": "wiki://"}, "data.op": {"$eq": "published"} }`), EventTypes: []string{"corpus.*"}})
		require.NoError(t, err)
		require.JSONEq(t, `{"data.op": {"$eq": "published"}, "subject": {"$startsWith": "wiki://"}}`, string(got))
		got, err = b.svc.CheckFilter(CheckFilterRequest{OwnerID: "o"})
		require.NoError(t, err)
		require.Equal(t, "{}", string(got), "no filter")
	})

	t.Run("NoTypesChosenChecksAgainstEveryType", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.svc.CheckFilter(CheckFilterRequest{OwnerID: "o", Filter: []byte(`{"data.op": {"$eq": "published"}}`)})
		require.NoError(t, err)
		_, err = b.svc.CheckFilter(CheckFilterRequest{OwnerID: "o", Filter: []byte(`{"data.no_type_has_this": {"$eq": 1}}`)})
		require.Equal(t, "filter.data.no_type_has_this", violationsOf(t, err)[0].Field)
	})
}
