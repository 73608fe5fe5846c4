package webhook

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzValidateData checks the whole data rule (size, one JSON object, valid
// UTF-8, no repeated key, and nothing Postgres' jsonb refuses) against an
// independent statement of the jsonb part: data is storable unless, once
// escaped backslashes are set aside, it holds \u0000 or a surrogate escape
// that is not a high one directly followed by a low one. Seeds live in
// testdata/fuzz/FuzzValidateData.
func FuzzValidateData(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":1}`, `{"k":"\u0000"}`, `{"k":"\\u0000"}`, `{"k":"\\\u0000"}`, `{"\u0000":1}`,
		`{"k":"\ud83d\ude00"}`, `{"k":"\ud800"}`, `{"k":"\udc00"}`, `{"k":"\ud800\ud800\udc00"}`,
		`{"k":"\ud800x"}`, `{"k":"\ud800\n"}`, `{"k":"\uD83D\uDE00"}`, `{"k":"\u0061"}`, `{"a":1,"a":2}`,
		`[]`, `{"k":"` + strings.Repeat("a", MaxDataBytes) + `"}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		t.Parallel()

		err := validateData(data)
		shapeOK := len(data) <= MaxDataBytes && checkDataObject(data) == nil
		if err == nil {
			require.True(t, shapeOK)
			require.True(t, json.Valid(data))
			require.True(t, utf8.Valid(data))
			require.True(t, jsonbStorable(data), "accepted what jsonb refuses: %q", data)
			return
		}
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, FieldData, fe.Field)
		if shapeOK {
			require.False(t, jsonbStorable(data), "refused storable data %q: %v", data, err)
			require.Contains(t, fe.Reason, `\u0000`)
		}
	})
}

var (
	nulEscape  = regexp.MustCompile(`\\u0000`)
	validPair  = regexp.MustCompile(`\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}`)
	anyHalfSur = regexp.MustCompile(`\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)
)

// jsonbStorable is the oracle: valid JSON data (so every backslash starts an
// escape) that Postgres' jsonb input accepts.
func jsonbStorable(data []byte) bool {
	s := bytes.ReplaceAll(data, []byte(`\\`), []byte("__")) // an escaped backslash never starts an escape
	if nulEscape.Match(s) {
		return false
	}
	s = validPair.ReplaceAll(s, nil)
	return !anyHalfSur.Match(s)
}
