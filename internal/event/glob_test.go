package event

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// requireGlobError asserts err is a *GlobError whose reason mentions want.
func requireGlobError(t *testing.T, err error, want string) *GlobError {
	t.Helper()

	require.Error(t, err)
	var ge *GlobError
	require.ErrorAs(t, err, &ge)
	require.ErrorIs(t, err, ErrInvalidGlob)
	require.Contains(t, ge.Reason, want)
	return ge
}

func TestValidateGlob(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsStar", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, ValidateGlob("*"))
	})

	t.Run("AcceptsPrefixAtAnyDepth", func(t *testing.T) {
		t.Parallel()
		for _, g := range []string{"corpus.*", "corpus.note.*", "microsite.*", "microsite.store.*", "ip_ban.*"} {
			require.NoError(t, ValidateGlob(g), g)
		}
	})

	t.Run("AcceptsCatalogType", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, ValidateGlob(TypeNoteChanged))
		require.NoError(t, ValidateGlob("microsite.store.doc_inserted"))
	})

	t.Run("AcceptsOperationalTypes", func(t *testing.T) {
		t.Parallel()
		// The operator's own endpoint subscribes to them.
		require.NoError(t, ValidateGlob("endpoint.*"))
		require.NoError(t, ValidateGlob(TypeEndpointDisabled))
	})

	t.Run("RejectsEmpty", func(t *testing.T) {
		t.Parallel()
		requireGlobError(t, ValidateGlob(""), "empty")
	})

	t.Run("LengthLimit", func(t *testing.T) {
		t.Parallel()
		// No catalog name is that long, so a 128-byte glob is rejected, but
		// for not matching, not for its length.
		atLimit := "corpus." + strings.Repeat("n", MaxGlobLen-len("corpus.")-2) + ".*"
		require.Len(t, atLimit, MaxGlobLen)
		requireGlobError(t, ValidateGlob(atLimit), "matches no")

		overLimit := "corpus." + strings.Repeat("n", MaxGlobLen-len("corpus.")-1) + ".*"
		ge := requireGlobError(t, ValidateGlob(overLimit), "at most 128 bytes")
		require.LessOrEqual(t, len(ge.Glob), MaxGlobLen+len("…"))
	})

	t.Run("RejectsMisplacedStar", func(t *testing.T) {
		t.Parallel()
		for _, g := range []string{
			"corpus.*.changed", "corp*", "*.changed", "**", "corpus.**", "*.*", ".*",
			"corpus*", "corpus.note*", "corpus.*.*", "* ", "corpus.note.changed*",
		} {
			requireGlobError(t, ValidateGlob(g), `"*" is allowed only`)
		}
	})

	t.Run("RejectsBadGrammar", func(t *testing.T) {
		t.Parallel()
		for _, g := range []string{
			"corpus", "Corpus.note.changed", "corpus.", "corpus..note", ".corpus.note",
			" corpus.note.changed", "corpus.note.changed ", "corpus-note.changed", "corpus.1note",
		} {
			requireGlobError(t, ValidateGlob(g), "must be")
		}
	})

	t.Run("RejectsExactNameOutsideCatalog", func(t *testing.T) {
		t.Parallel()
		requireGlobError(t, ValidateGlob("corpus.note.deleted"), "not a webhook event type")
	})

	t.Run("RejectsPrefixMatchingNothing", func(t *testing.T) {
		t.Parallel()
		for _, g := range []string{"nope.*", "corpus.note.changed.*", "corpus.n.*", "webhook.test.*", "internal.*"} {
			requireGlobError(t, ValidateGlob(g), "matches no")
		}
	})

	t.Run("ErrorQuotesGlob", func(t *testing.T) {
		t.Parallel()
		err := ValidateGlob("corp*")
		require.EqualError(t, err, `invalid event type glob "corp*": "*" is allowed only alone or as the whole last segment ("prefix.*")`)
		require.ErrorIs(t, err, ErrInvalidGlob)
	})

	t.Run("ErrorTruncatesLongGlob", func(t *testing.T) {
		t.Parallel()
		ge := requireGlobError(t, ValidateGlob(strings.Repeat("x", 10_000)), "at most")
		require.Len(t, ge.Glob, MaxGlobLen+len("…"))
	})

	t.Run("EveryValidGlobMatchesACatalogType", func(t *testing.T) {
		t.Parallel()
		for _, g := range []string{"*", "corpus.*", "code.*", "microsite.build.*", "owner.login"} {
			require.NoError(t, ValidateGlob(g))
			matched := false
			for _, ti := range WebhookTypes() {
				matched = matched || MatchGlob(g, ti.Name)
			}
			require.True(t, matched, g)
		}
	})
}

func TestMatchGlob(t *testing.T) {
	t.Parallel()

	t.Run("StarMatchesEveryCatalogType", func(t *testing.T) {
		t.Parallel()
		for _, ti := range WebhookTypes() {
			require.True(t, MatchGlob("*", ti.Name), ti.Name)
		}
	})

	t.Run("StarMatchesUnclassifiedTypes", func(t *testing.T) {
		t.Parallel()
		// Exposure keeps Internal types in, not the glob.
		require.True(t, MatchGlob("*", "internal.audit.logged"))
	})

	t.Run("PrefixMatchesAtAnyDepth", func(t *testing.T) {
		t.Parallel()
		require.True(t, MatchGlob("corpus.*", "corpus.note.changed"))
		require.True(t, MatchGlob("corpus.note.*", "corpus.note.changed"))
		require.True(t, MatchGlob("microsite.*", "microsite.store.doc_inserted"))
		require.True(t, MatchGlob("microsite.*", "microsite.build.settled"))
	})

	t.Run("PrefixRespectsSegmentBoundary", func(t *testing.T) {
		t.Parallel()
		require.False(t, MatchGlob("corpus.*", "corpusx.note"))
		require.False(t, MatchGlob("corpus.*", "corpus"))
		require.False(t, MatchGlob("corpus.note.*", "corpus.notes.changed"))
		require.False(t, MatchGlob("page.*", "microsite.page.x"))
	})

	t.Run("ExactMatchesOnlyItself", func(t *testing.T) {
		t.Parallel()
		require.True(t, MatchGlob("code.issued", "code.issued"))
		require.False(t, MatchGlob("code.issued", "code.issued.extra"))
		require.False(t, MatchGlob("code.issued", "code.revoked"))
		require.False(t, MatchGlob("code", "code.issued"))
	})

	t.Run("IsCaseSensitive", func(t *testing.T) {
		t.Parallel()
		require.False(t, MatchGlob("corpus.note.changed", "Corpus.note.changed"))
		require.False(t, MatchGlob("corpus.*", "CORPUS.note.changed"))
		require.False(t, MatchGlob("Corpus.*", "Corpus.note.changed"))
	})

	t.Run("InvalidGlobMatchesNothing", func(t *testing.T) {
		t.Parallel()
		for _, g := range []string{"", "corp*", "corpus.*.changed", "*.changed", "**", " *", "corpus", "Corpus.note.changed"} {
			require.False(t, MatchGlob(g, "corpus.note.changed"), "glob %q", g)
			require.False(t, MatchGlob(g, g), "glob %q", g)
		}
		long := "a." + strings.Repeat("b", MaxGlobLen)
		require.False(t, MatchGlob(long, long))
	})
}

func TestMatchAny(t *testing.T) {
	t.Parallel()

	t.Run("EmptyListMatchesNothing", func(t *testing.T) {
		t.Parallel()
		require.False(t, MatchAny(nil, TypeNoteChanged))
		require.False(t, MatchAny([]string{}, TypeNoteChanged))
	})

	t.Run("AnyOneGlobSuffices", func(t *testing.T) {
		t.Parallel()
		globs := []string{"code.*", "booking.created", "corpus.*"}
		require.True(t, MatchAny(globs, "corpus.note.changed"))
		require.True(t, MatchAny(globs, "code.revoked"))
		require.True(t, MatchAny(globs, "booking.created"))
		require.False(t, MatchAny(globs, "booking.cancelled"))
	})

	t.Run("InvalidGlobsDoNotWiden", func(t *testing.T) {
		t.Parallel()
		require.False(t, MatchAny([]string{"corp*", "", "*.changed"}, "corpus.note.changed"))
	})
}

func FuzzMatchGlob(f *testing.F) {
	for _, seed := range [][2]string{
		{"*", "corpus.note.changed"},
		{"corpus.*", "corpus.note.changed"},
		{"corpus.note.*", "corpus.note.changed"},
		{"corpus.note.changed", "corpus.note.changed"},
		{"corpus.*.changed", "corpus.note.changed"},
		{"corp*", "corpus.note.changed"},
		{"*.changed", "corpus.note.changed"},
		{"corpus.*", "corpus"},
		{"", ""},
		{".*", ".x"},
		{"webhook.test", "webhook.test"},
	} {
		f.Add(seed[0], seed[1])
	}

	f.Fuzz(func(t *testing.T, g, typ string) {
		validErr := ValidateGlob(g) // must not panic
		matched := MatchGlob(g, typ)

		if webhook.IsTypeName(typ) && len(typ) <= webhook.MaxTypeLen {
			require.True(t, MatchGlob("*", typ), "star must match valid type %q", typ)
		}
		if validErr != nil {
			var ge *GlobError
			require.ErrorAs(t, validErr, &ge)
			require.ErrorIs(t, validErr, ErrInvalidGlob)
			return
		}
		switch {
		case g == "*":
			require.True(t, matched)
		case strings.HasSuffix(g, ".*"):
			require.Equal(t, strings.HasPrefix(typ, strings.TrimSuffix(g, "*")), matched,
				"prefix glob %q vs %q", g, typ)
		default:
			require.NotContains(t, g, "*")
			require.Equal(t, g == typ, matched, "exact glob %q vs %q", g, typ)
		}
	})
}

// TestGlobLikePatternMatchesMatchGlob checks GlobLikePattern in
// Postgres against MatchGlob, '_' included.
func TestGlobLikePatternMatchesMatchGlob(t *testing.T) {
	t.Parallel()
	tx := dbtest.TestTx(t)

	types := []string{"corpus.note.changed", "corpus.notes.changed", "corpusx.note", "ip_ban.created", "ipxban.created", "booking.created", "webhook.test"}
	globs := []string{"*", "corpus.*", "corpus.note.*", "ip_ban.*", "ip_ban.created", "booking.created"}
	for _, g := range globs {
		pattern, ok := GlobLikePattern(g)
		require.True(t, ok, g)
		for _, typ := range types {
			var match bool
			require.NoError(t, tx.QueryRow(t.Context(), `SELECT $1::text LIKE $2::text`, typ, pattern).Scan(&match))
			require.Equal(t, MatchGlob(g, typ), match, "glob %q, type %q", g, typ)
		}
	}
	_, ok := GlobLikePattern("corpus*")
	require.False(t, ok)
}
