package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

type testBundle struct {
	now   time.Time
	event *Event // valid; each test gets its own copy to mutate
}

func setup(t *testing.T) *testBundle {
	t.Helper()

	now := time.Date(2026, 9, 27, 12, 0, 0, 0, time.UTC)
	return &testBundle{
		now: now,
		event: &Event{
			ID:         "0190f3a4-6b7c-7d8e-9f00-112233445566",
			OwnerID:    "owner_1",
			Type:       "corpus.note.changed",
			Subject:    "wiki://software/project/standmeet/architecture",
			OccurredAt: now.Add(-time.Minute),
			Data:       json.RawMessage(`{"op":"updated","note_id":"n1","published":true,"was_published":true}`),
		},
	}
}

// requireFieldError asserts err is a *FieldError for field and returns it.
func requireFieldError(t *testing.T, err error, field string) *FieldError {
	t.Helper()

	require.Error(t, err)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field, "error: %v", err)
	require.ErrorIs(t, err, ErrInvalidEvent)
	return fe
}

// dataOfSize returns a JSON object of exactly n bytes (n >= 8).
func dataOfSize(n int) json.RawMessage {
	return json.RawMessage(`{"k":"` + strings.Repeat("a", n-8) + `"}`)
}

func TestValidate(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsValidEvent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsUnclassifiedType", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Type = "internal.thing.happened"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsRawSubject", func(t *testing.T) {
		t.Parallel()
		// raw:// is valid input; keeping it in is the dispatcher catalog's job, not Validate's.
		bundle := setup(t)
		bundle.event.Subject = "raw://upload/123"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("ReportsFirstFieldInPayloadOrder", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = ""
		bundle.event.Data = nil
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldID)
	})

	t.Run("ErrorMessageNamesFieldAndRule", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = "wiki://" + strings.Repeat("x", MaxSubjectLen)
		err := bundle.event.Validate(bundle.now)
		requireFieldError(t, err, FieldSubject)
		require.EqualError(t, err, "invalid event.subject: must be at most 1024 bytes")
	})

	t.Run("ErrorMessageDoesNotEchoValue", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = json.RawMessage(`{"secretish":SECRET_VALUE}`)
		err := bundle.event.Validate(bundle.now)
		requireFieldError(t, err, FieldData)
		require.NotContains(t, err.Error(), "SECRET_VALUE")
		require.NotContains(t, err.Error(), "secretish")
	})
}

func TestValidateID(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsUUID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = "f47ac10b-58cc-4372-a567-0e02b2c3d479"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsOpaqueID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = "msg_2Kx-9_Z"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsSingleCharacter", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = "x"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = strings.Repeat("a", MaxIDLen)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsOverMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = strings.Repeat("a", MaxIDLen+1)
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldID)
	})

	t.Run("RejectsEmpty", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = ""
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldID)
	})

	t.Run("RejectsDot", func(t *testing.T) {
		t.Parallel()
		// Standard Webhooks signs "<id>.<timestamp>.<body>".
		bundle := setup(t)
		bundle.event.ID = "msg.1"
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldID)
	})

	t.Run("RejectsBracedUUID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.ID = "{f47ac10b-58cc-4372-a567-0e02b2c3d479}"
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldID)
	})

	t.Run("RejectsOtherCharacters", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{"a b", "a/b", "a:b", "a+b", "a\nb", "é", "a=b"} {
			bundle := setup(t)
			bundle.event.ID = id
			requireFieldError(t, bundle.event.Validate(bundle.now), FieldID)
		}
	})
}

func TestValidateOwnerID(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsPrintableASCII", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OwnerID = `owner:42/x~!"#$%&'()*+,-.;<=>?@[\]^_{|}` + "`"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OwnerID = strings.Repeat("o", MaxOwnerIDLen)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsOverMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OwnerID = strings.Repeat("o", MaxOwnerIDLen+1)
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldOwnerID)
	})

	t.Run("RejectsEmpty", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OwnerID = ""
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldOwnerID)
	})

	t.Run("RejectsSpaceControlAndNonASCII", func(t *testing.T) {
		t.Parallel()
		for _, owner := range []string{"a b", " a", "a\t", "a\x00", "a\x7f", "ä", "a\u00a0"} {
			bundle := setup(t)
			bundle.event.OwnerID = owner
			requireFieldError(t, bundle.event.Validate(bundle.now), FieldOwnerID)
		}
	})
}

func TestValidateType(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsGrammar", func(t *testing.T) {
		t.Parallel()
		for _, typ := range []string{"a.b", "corpus.note.changed", "ip_ban.added", "a1_.b2_", "x.y.z.w"} {
			bundle := setup(t)
			bundle.event.Type = typ
			require.NoError(t, bundle.event.Validate(bundle.now), typ)
		}
	})

	t.Run("AcceptsMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Type = "a." + strings.Repeat("b", MaxTypeLen-2)
		require.Len(t, bundle.event.Type, MaxTypeLen)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsOverMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Type = "a." + strings.Repeat("b", MaxTypeLen-1)
		fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldType)
		require.Contains(t, fe.Reason, "at most")
	})

	t.Run("RejectsEmpty", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Type = ""
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldType)
	})

	t.Run("RejectsBadGrammar", func(t *testing.T) {
		t.Parallel()
		for _, typ := range []string{
			"corpus",               // one segment
			"Corpus.note",          // upper case
			"corpus.Note",          // upper case later
			"corpus.1note",         // segment starts with a digit
			"_corpus.note",         // segment starts with underscore
			"corpus.",              // trailing dot
			".corpus.note",         // leading dot
			"corpus..note",         // empty segment
			"corpus-note.changed",  // hyphen
			"corpus.note.changed ", // trailing space
			"corpus.*",             // a glob is not a type
			"corpus.nöte",          // non-ASCII
		} {
			bundle := setup(t)
			bundle.event.Type = typ
			requireFieldError(t, bundle.event.Validate(bundle.now), FieldType)
		}
	})
}

func TestValidateSubject(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsShortestURI", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = "a://b"
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = "wiki://" + strings.Repeat("x", MaxSubjectLen-len("wiki://"))
		require.Len(t, bundle.event.Subject, MaxSubjectLen)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsOverMaxLength", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = "wiki://" + strings.Repeat("x", MaxSubjectLen-len("wiki://")+1)
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldSubject)
	})

	t.Run("CountsBytesNotRunes", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// 7 + 3*340 = 1027 bytes but only 347 runes.
		bundle.event.Subject = "wiki://" + strings.Repeat("笔", 340)
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldSubject)
	})

	t.Run("AcceptsUnicodeAndSchemeCharacters", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{"wiki://笔记/架构", "git+ssh://host/repo", "x-y.z://a b", "WIKI://X"} {
			bundle := setup(t)
			bundle.event.Subject = s
			require.NoError(t, bundle.event.Validate(bundle.now), s)
		}
	})

	t.Run("RejectsEmpty", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = ""
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldSubject)
	})

	t.Run("RejectsInvalidUTF8", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = "wiki://a\xffb"
		fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldSubject)
		require.Contains(t, fe.Reason, "UTF-8")
	})

	t.Run("RejectsControlCharacters", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{"wiki://a\nb", "wiki://a\x00", "wiki://\tx", "wiki://a\x7f", "wiki://a\u0085", "wiki://a\r"} {
			bundle := setup(t)
			bundle.event.Subject = s
			fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldSubject)
			require.Contains(t, fe.Reason, "control")
		}
	})

	t.Run("RejectsMissingOrBadScheme", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{
			"software/project/x", // no scheme
			"wiki:software",      // no "//"
			"wiki://",            // nothing after the scheme
			"://x",               // empty scheme
			"1wiki://x",          // scheme must start with a letter
			"wi ki://x",          // space in scheme
			"wiki_x://x",         // '_' is not a scheme character
			" wiki://x",          // leading space
			"\u200bwiki://x",     // invisible leading character
		} {
			bundle := setup(t)
			bundle.event.Subject = s
			requireFieldError(t, bundle.event.Validate(bundle.now), FieldSubject)
		}
	})
}

func TestValidateOccurredAt(t *testing.T) {
	t.Parallel()

	t.Run("RejectsZero", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = time.Time{}
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldOccurredAt)
	})

	t.Run("AcceptsEarliest", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		require.Equal(t, MinOccurredAtUnix, bundle.event.OccurredAt.Unix())
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsBeforeEarliest", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond)
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldOccurredAt)
	})

	t.Run("AcceptsMaxFutureSkew", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = bundle.now.Add(MaxFutureSkew)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsBeyondMaxFutureSkew", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = bundle.now.Add(MaxFutureSkew + time.Nanosecond)
		fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldOccurredAt)
		require.Contains(t, fe.Reason, "1h0m0s")
	})

	t.Run("AcceptsAnyTimeZone", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = bundle.now.In(time.FixedZone("UTC+14", 14*3600)).Add(30 * time.Minute)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})
}

func TestValidateData(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsEmptyObject", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = json.RawMessage(`{}`)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsNestedValuesAndWhitespace", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = json.RawMessage(" \n{\"a\": [1, {\"a\": 2}, [], {}], \"b\": {\"a\": null}, \"c\": \"\\u00e9\"}\t\n")
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("AcceptsMaxSize", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = dataOfSize(MaxDataBytes)
		require.Len(t, bundle.event.Data, MaxDataBytes)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})

	t.Run("RejectsOversizeData", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = dataOfSize(MaxDataBytes + 1)
		err := bundle.event.Validate(bundle.now)
		requireFieldError(t, err, FieldData)
		require.EqualError(t, err, "invalid event.data: must be at most 4096 bytes")
	})

	t.Run("RejectsNonObjects", func(t *testing.T) {
		t.Parallel()
		for _, d := range []string{"", "   ", "null", "[]", `[{}]`, "1", `"s"`, "true"} {
			bundle := setup(t)
			bundle.event.Data = json.RawMessage(d)
			fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldData)
			require.Contains(t, fe.Reason, "JSON object", "data %q", d)
		}
	})

	t.Run("RejectsNilData", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = nil
		requireFieldError(t, bundle.event.Validate(bundle.now), FieldData)
	})

	t.Run("RejectsMalformedJSON", func(t *testing.T) {
		t.Parallel()
		for _, d := range []string{
			`{"a":}`,
			`{"a":1`,
			`{"a":1,}`,
			`{a:1}`,
			`{"a":[1,2}`,
			`{"a":"\x"}`,
			`{'a':1}`,
		} {
			bundle := setup(t)
			bundle.event.Data = json.RawMessage(d)
			fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldData)
			require.Contains(t, fe.Reason, "valid JSON", "data %q", d)
		}
	})

	t.Run("RejectsTrailingValues", func(t *testing.T) {
		t.Parallel()
		for _, d := range []string{`{}{}`, `{} 1`, `{} []`, `{"a":1}}`, `{} x`} {
			bundle := setup(t)
			bundle.event.Data = json.RawMessage(d)
			requireFieldError(t, bundle.event.Validate(bundle.now), FieldData)
		}
	})

	t.Run("RejectsInvalidUTF8", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = json.RawMessage("{\"a\":\"\xff\"}")
		fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldData)
		require.Contains(t, fe.Reason, "UTF-8")
	})

	t.Run("RejectsDuplicateKeys", func(t *testing.T) {
		t.Parallel()
		for _, d := range []string{
			`{"published":false,"published":true}`,
			`{"published":false,"\u0070ublished":true}`, // same key, escaped
			`{"a":{"b":1,"b":2}}`,
			`{"a":[{"b":1,"b":2}]}`,
		} {
			bundle := setup(t)
			bundle.event.Data = json.RawMessage(d)
			fe := requireFieldError(t, bundle.event.Validate(bundle.now), FieldData)
			require.Contains(t, fe.Reason, "repeat", "data %q", d)
		}
	})

	t.Run("AcceptsSameKeyInSiblingObjects", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = json.RawMessage(`{"a":{"k":1},"b":{"k":2},"c":[{"k":1},{"k":2}],"k":0}`)
		require.NoError(t, bundle.event.Validate(bundle.now))
	})
}

func TestPayload(t *testing.T) {
	t.Parallel()

	t.Run("ExactThinBody", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = time.Date(2026, 9, 27, 11, 59, 0, 123456789, time.UTC)
		body, err := bundle.event.Payload()
		require.NoError(t, err)
		require.Equal(t, //nolint:testifylint // the exact bytes, key order included, are the point
			`{"id":"0190f3a4-6b7c-7d8e-9f00-112233445566","type":"corpus.note.changed",`+
				`"subject":"wiki://software/project/standmeet/architecture",`+
				`"occurred_at":"2026-09-27T11:59:00.123456789Z",`+
				`"data":{"op":"updated","note_id":"n1","published":true,"was_published":true}}`,
			string(body))
	})

	t.Run("OmitsOwnerID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OwnerID = "owner_very_distinctive"
		body, err := bundle.event.Payload()
		require.NoError(t, err)
		require.NotContains(t, string(body), "owner")

		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &fields))
		require.Len(t, fields, 5)
	})

	t.Run("FormatsOccurredAtInUTC", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.OccurredAt = time.Date(2026, 9, 27, 20, 0, 0, 500, time.FixedZone("CST", 8*3600))
		body, err := bundle.event.Payload()
		require.NoError(t, err)
		require.Contains(t, string(body), `"occurred_at":"2026-09-27T12:00:00.0000005Z"`)
	})

	t.Run("IgnoresMonotonicClock", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		now := time.Now()
		bundle.event.OccurredAt = now
		a, err := bundle.event.Payload()
		require.NoError(t, err)
		bundle.event.OccurredAt = now.Round(0) // strips the monotonic reading
		b, err := bundle.event.Payload()
		require.NoError(t, err)
		require.Equal(t, a, b)
	})

	t.Run("IsDeterministic", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		first, err := bundle.event.Payload()
		require.NoError(t, err)
		for range 10 {
			again, err := bundle.event.Payload()
			require.NoError(t, err)
			require.Equal(t, first, again)
		}
	})

	t.Run("CompactsData", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Data = json.RawMessage("{ \"a\" : [ 1 , 2 ],\n \"b\": \"x y\" }")
		body, err := bundle.event.Payload()
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(string(body), `"data":{"a":[1,2],"b":"x y"}}`), string(body))
	})

	t.Run("DoesNotEscapeHTML", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Subject = "wiki://a?b=1&c=<d>"
		bundle.event.Data = json.RawMessage(`{"q":"a&b"}`)
		body, err := bundle.event.Payload()
		require.NoError(t, err)
		require.Contains(t, string(body), `"subject":"wiki://a?b=1&c=<d>"`)
		require.Contains(t, string(body), `"data":{"q":"a&b"}`)
	})

	t.Run("HasNoTrailingNewline", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		body, err := bundle.event.Payload()
		require.NoError(t, err)
		require.Equal(t, byte('}'), body[len(body)-1])
	})

	t.Run("RoundTripsThroughJSON", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		body, err := bundle.event.Payload()
		require.NoError(t, err)

		var got struct {
			ID         string          `json:"id"`
			Type       string          `json:"type"`
			Subject    string          `json:"subject"`
			OccurredAt time.Time       `json:"occurred_at"`
			Data       json.RawMessage `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &got))
		require.Equal(t, bundle.event.ID, got.ID)
		require.Equal(t, bundle.event.Type, got.Type)
		require.Equal(t, bundle.event.Subject, got.Subject)
		require.True(t, bundle.event.OccurredAt.Equal(got.OccurredAt))
		require.JSONEq(t, string(bundle.event.Data), string(got.Data))
	})

	t.Run("RejectsNonObjectData", func(t *testing.T) {
		t.Parallel()
		for _, d := range []string{"", "null", "[]", `{"a":`} {
			bundle := setup(t)
			bundle.event.Data = json.RawMessage(d)
			_, err := bundle.event.Payload()
			requireFieldError(t, err, FieldData)
		}
	})
}

func TestFieldError(t *testing.T) {
	t.Parallel()

	t.Run("MatchesThroughWrapping", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.event.Type = "Bad"
		err := fmt.Errorf("publish event: %w", bundle.event.Validate(bundle.now))
		requireFieldError(t, err, FieldType)
		require.True(t, strings.HasPrefix(err.Error(), "publish event: invalid event.type: "))
	})
}

// FuzzData cross-checks the hand-written duplicate-key walker against
// encoding/json: it may only ever add the "repeat" rule on top of json.Valid,
// and whatever it accepts must come out of Payload unchanged in meaning.
func FuzzData(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":1}`, `{"a":{"b":[1,{"c":null}]},"d":"e"}`, `{"a":1,"a":2}`,
		`{"a":[{"b":1},{"b":1}]}`, `{"a":1}}`, `{} {}`, `[]`, `{"a":"\u0061"}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkDataObject(data)
		trimmed := bytes.TrimLeft(data, " \t\r\n")
		isObject := len(trimmed) > 0 && trimmed[0] == '{'

		if err == nil {
			require.True(t, json.Valid(data))
			require.True(t, utf8.Valid(data))
			require.True(t, isObject)

			e := &Event{ID: "x", Type: "a.b", Subject: "a://b", OccurredAt: time.Unix(MinOccurredAtUnix, 0), Data: data}
			body, err := e.Payload()
			require.NoError(t, err)
			var got struct {
				Data json.RawMessage `json:"data"`
			}
			require.NoError(t, json.Unmarshal(body, &got))
			require.JSONEq(t, string(data), string(got.Data))
			return
		}

		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, FieldData, fe.Field)
		if json.Valid(data) && utf8.Valid(data) && isObject {
			require.Contains(t, fe.Reason, "repeat", "valid JSON object %q rejected: %v", data, err)
		}
	})
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		data    string
		wantErr string // "" for none
	}{
		"Empty":                   {`{}`, ""},
		"Nested":                  {`{"a":{"a":[{"a":1},{"a":2}]},"b":"a"}`, ""},
		"StringValuesLikeKeys":    {`{"a":"b","b":"a","c":["a","a"]}`, ""},
		"EscapedQuoteInKey":       {`{"a\"b":1,"a":2,"b":3}`, ""},
		"RepeatedKey":             {`{"a":1,"b":2,"a":3}`, "invalid event.data: must not repeat an object key"},
		"RepeatedNestedKey":       {`{"a":{"x":1,"x":2}}`, "invalid event.data: must not repeat an object key"},
		"RepeatedAfterNested":     {`{"a":{"b":1},"c":2,"a":3}`, "invalid event.data: must not repeat an object key"},
		"RepeatedEscapedKey":      {`{"a":1,"\u0061":2}`, "invalid event.data: must not repeat an object key"},
		"RepeatedAmongMany":       {`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k3":3}`, "invalid event.data: must not repeat an object key"},
		"ManyDistinct":            {`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":{"k0":0}}`, ""},
		"SameKeyInSiblingObjects": {`[{"a":1},{"a":1}]`, ""},
		"Invalid":                 {`{"a":1,}`, "invalid event.data: must be valid JSON (syntax error at offset 7)"},
		"TwoValues":               {`{} {}`, "invalid event.data: must be a single JSON value"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := checkJSON([]byte(tc.data))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

// FuzzCheckJSON holds checkJSON's quick path to the token walk it replaces
// for valid data: the same answer for every input, and a repeated key found
// exactly when the walk finds one.
func FuzzCheckJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":1}`, `{"a":{"b":[1,{"c":null}]},"d":"e"}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`,
		`{"a":[{"b":1},{"b":1}]}`, `{"a":1}}`, `{} {}`, `[]`, `{"a":"\u0061"}`, `{"\ud800":1,"\ufffd":2}`,
		`{"a\\":1,"a\\\\":2}`, `{"a":{"b":1},"b":{"a":1},"a":3}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		want := checkJSONTokens(data)
		got := checkJSON(data)
		if want == nil {
			require.NoError(t, got)
		} else {
			require.EqualError(t, got, want.Error())
		}
		if utf8.Valid(data) && json.Valid(data) {
			repeated := want != nil && strings.Contains(want.Error(), "repeat")
			require.Equal(t, repeated, repeatsKey(data), "repeatsKey(%q)", data)
		}
	})
}
