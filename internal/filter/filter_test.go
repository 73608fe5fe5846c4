package filter

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

func TestParse(t *testing.T) {
	t.Parallel()

	t.Run("CanonicalForm", func(t *testing.T) {
		t.Parallel()
		f, err := Parse([]byte(`{ "subject": {"$startsWith": "wiki://"},
		                          "data.op": {"$in": ["published", "deleted"]}, "$or": [{"data.published": true}] }`))
		require.NoError(t, err)
		require.JSONEq(t, `{"$or":[{"data.published":true}],"data.op":{"$in":["published","deleted"]},"subject":{"$startsWith":"wiki://"}}`, string(f.JSON()))
		got := string(f.JSON())
		require.NotContains(t, got, " ", "compact")
		require.Less(t, strings.Index(got, `"$or"`), strings.Index(got, `"data.op"`), "keys sorted")
		require.Less(t, strings.Index(got, `"data.op"`), strings.Index(got, `"subject"`), "keys sorted")
		require.Equal(t, 3, f.Clauses())
		require.False(t, f.Empty())
	})

	t.Run("EmptyObjectIsNoFilter", func(t *testing.T) {
		t.Parallel()
		f, err := Parse([]byte(` {} `))
		require.NoError(t, err)
		require.True(t, f.Empty())
		require.Equal(t, "{}", string(f.JSON()))
		require.True(t, f.Matches(NewDoc("x://y", []byte(`{}`))))
	})

	t.Run("FromStructValues", func(t *testing.T) {
		t.Parallel()
		// A protobuf Struct's AsMap: numbers are float64.
		f, err := FromValue(map[string]any{"data.count": map[string]any{"$gte": float64(3)}})
		require.NoError(t, err)
		require.JSONEq(t, `{"data.count":{"$gte":3}}`, string(f.JSON()))
	})

	for _, tc := range []struct {
		name, filter, field, reason string
	}{
		{"InvalidJSON", `{"data.status": {"$in": ["published"]]}`, "filter", "is not valid JSON at byte 38 (line 1, column 38)"},
		{"TruncatedJSON", `{"data.status": {"$in": ["published"]}`, "filter", "it ends at byte 38"},
		{"EmptyText", ``, "filter", "is empty"},
		{"TwoValues", `{} {}`, "filter", "more than one JSON value"},
		{"NotAnObject", `["data.status"]`, "filter", "must be a JSON object of conditions"},
		{"DuplicateKey", `{"data.a": 1, "data.a": 2}`, "filter.data.a", "is given twice"},
		{"NestedDuplicateKey", `{"$or": [{"data.a": {"$gt": 1, "$gt": 2}}]}`, "filter.$or[0].data.a.$gt", "is given twice"},
		{"UnknownOperator", `{"data.status": {"$exists": true}}`, "filter.data.status.$exists", "is not an operator (did you mean $exist?)"},
		{"OperatorCase", `{"data.status": {"$startswith": "a"}}`, "filter.data.status.$startswith", "did you mean $startsWith?"},
		{"UnknownGroup", `{"$nor": [{"data.a": 1}]}`, "filter.$nor", "only $and and $or combine conditions (did you mean $or?)"},
		{"ComparisonWithoutField", `{"$eq": 1}`, "filter.$eq", "$eq compares a field"},
		{"MixedShape", `{"data.status": {"$eq": "a", "sub": 1}}`, "filter.data.status", "mixes operators ($eq) with other keys (sub)"},
		{"ObjectValue", `{"data.venue": {"id": 1}}`, "filter.data.venue", `write the nested field as one path ("data.venue.id")`},
		{"ArrayValue", `{"data.status": ["a", "b"]}`, "filter.data.status", `{"$in": [...]}`},
		{"NoOperator", `{"data.status": {}}`, "filter.data.status", "at least one operator"},
		{"FieldOutsideData", `{"status": "a"}`, "filter.status", `(did you mean "data.status"?)`},
		{"WholeData", `{"data": {"$exist": true}}`, "filter.data", "names the whole data object"},
		{"EmptySegment", `{"data..a": 1}`, "filter.data..a", "has an empty segment"},
		{"OddKeyNamed", `{"da ta": 1}`, `filter["da ta"]`, "is not a field"},
		{"OrNotArray", `{"$or": {"data.a": 1}}`, "filter.$or", "must be an array of condition objects"},
		{"OrEmpty", `{"$or": []}`, "filter.$or", "at least one condition object"},
		{"OrMemberNotObject", `{"$or": [{"data.a": 1}, 2]}`, "filter.$or[1]", "must be an object of conditions"},
		{"OrMemberEmpty", `{"$or": [{}]}`, "filter.$or[0]", "at least one condition"},
		{"InNotArray", `{"data.a": {"$in": "x"}}`, "filter.data.a.$in", "must be an array of values"},
		{"InEmpty", `{"data.a": {"$in": []}}`, "filter.data.a.$in", "at least one value"},
		{"InMemberObject", `{"data.a": {"$in": ["x", {}]}}`, "filter.data.a.$in[1]", "must be a string, a number, true, false or null"},
		{"GtString", `{"data.a": {"$gt": "abc"}}`, "filter.data.a.$gt", "must be a number, or a date-time string"},
		{"StartsWithNumber", `{"data.a": {"$startsWith": 3}}`, "filter.data.a.$startsWith", "must be a string"},
		{"StartsWithEmpty", `{"data.a": {"$startsWith": ""}}`, "filter.data.a.$startsWith", "must not be empty"},
		{"ExistNotBool", `{"data.a": {"$exist": 1}}`, "filter.data.a.$exist", "must be true"},
		{"NumberOutOfRange", `{"data.a": 1e999}`, "filter.data.a", "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.filter))
			fe, ok := errors.AsType[*Error](err)
			require.True(t, ok, "%v", err)
			require.Equal(t, tc.field, fe.Field)
			require.Contains(t, fe.Reason, tc.reason)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}

	t.Run("Limits", func(t *testing.T) {
		t.Parallel()

		t.Run("Bytes", func(t *testing.T) {
			t.Parallel()
			big := `{"data.a": {"$in": ["` + strings.Repeat("x", MaxBytes) + `"]}}`
			_, err := Parse([]byte(big))
			require.ErrorContains(t, err, "filter: is 4119 bytes of JSON, more than the limit of 4096")
			_, err = Parse([]byte(strings.Repeat(" ", 4*MaxBytes+1)))
			require.ErrorContains(t, err, "filter: must be at most 4096 bytes")
		})

		t.Run("Depth", func(t *testing.T) {
			t.Parallel()
			nest := func(levels int) string {
				s := `{"data.a": 1}`
				for range levels {
					s = `{"$or": [` + s + `]}`
				}
				return s
			}
			_, err := Parse([]byte(nest(MaxDepth)))
			require.NoError(t, err)
			_, err = Parse([]byte(nest(MaxDepth + 1)))
			require.ErrorContains(t, err, "filter.$or[0].$or[0].$or[0].$or[0].$or: nests $and and $or more than 4 levels deep")
		})

		t.Run("Clauses", func(t *testing.T) {
			t.Parallel()
			m := map[string]any{}
			for i := range MaxClauses {
				m["data.f"+string(rune('a'+i%26))+string(rune('a'+i/26))] = float64(1)
			}
			_, err := FromValue(m)
			require.NoError(t, err)
			m["data.zz"] = float64(1)
			_, err = FromValue(m)
			require.ErrorContains(t, err, "filter.data.zz: is one comparison too many: a filter makes at most 32")
		})

		t.Run("Values", func(t *testing.T) {
			t.Parallel()
			vals := make([]any, MaxValues+1)
			for i := range vals {
				vals[i] = float64(i)
			}
			_, err := FromValue(map[string]any{"data.a": map[string]any{"$in": vals}})
			require.ErrorContains(t, err, "filter.data.a.$in: must hold at most 64 values")
		})

		t.Run("PathSegments", func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(`{"data.a.b.c.d.e.f.g": 1}`))
			require.NoError(t, err)
			_, err = Parse([]byte(`{"data.a.b.c.d.e.f.g.h": 1}`))
			require.ErrorContains(t, err, "more than 8 segments")
		})
	})
}

func TestMatches(t *testing.T) {
	t.Parallel()

	const data = `{"op":"published","count":3,"ratio":0.5,"published":true,"none":null,
	               "starts_at":"2026-12-03T15:00:00Z","venue":{"id":"v1","tags":["a"]}}`
	const subject = "wiki://software/project/x"

	for _, tc := range []struct {
		name, filter string
		want         bool
	}{
		{"EqShorthand", `{"data.op": "published"}`, true},
		{"EqShorthandMiss", `{"data.op": "draft"}`, false},
		{"EqNumber", `{"data.count": {"$eq": 3}}`, true},
		{"EqTypeMismatch", `{"data.count": "3"}`, false},
		{"EqBool", `{"data.published": true}`, true},
		{"EqNull", `{"data.none": null}`, true},
		{"EqNullAbsent", `{"data.missing": null}`, false},
		{"EqAbsent", `{"data.missing": "x"}`, false},
		{"NeqDifferent", `{"data.op": {"$neq": "draft"}}`, true},
		{"NeqSame", `{"data.op": {"$neq": "published"}}`, false},
		{"NeqAbsent", `{"data.missing": {"$neq": "x"}}`, true},
		{"Gt", `{"data.count": {"$gt": 2}}`, true},
		{"GtEqual", `{"data.count": {"$gt": 3}}`, false},
		{"Gte", `{"data.count": {"$gte": 3}}`, true},
		{"Lt", `{"data.ratio": {"$lt": 1}}`, true},
		{"Lte", `{"data.ratio": {"$lte": 0.4}}`, false},
		{"GtAbsent", `{"data.missing": {"$gt": 0}}`, false},
		{"GtOnString", `{"data.op": {"$gt": 0}}`, false},
		{"Range", `{"data.count": {"$gte": 1, "$lt": 10}}`, true},
		{"RangeMiss", `{"data.count": {"$gte": 4, "$lt": 10}}`, false},
		{"DateTimeAfter", `{"data.starts_at": {"$gt": "2026-12-01T00:00:00Z"}}`, true},
		{"DateTimeOffsets", `{"data.starts_at": {"$lte": "2026-12-03T16:00:00+01:00"}}`, true},
		{"DateTimeBefore", `{"data.starts_at": {"$lt": "2026-12-03T15:00:00Z"}}`, false},
		{"In", `{"data.op": {"$in": ["draft", "published"]}}`, true},
		{"InMiss", `{"data.op": {"$in": ["draft"]}}`, false},
		{"InAbsent", `{"data.missing": {"$in": ["x"]}}`, false},
		{"Nin", `{"data.op": {"$nin": ["draft"]}}`, true},
		{"NinMiss", `{"data.op": {"$nin": ["published"]}}`, false},
		{"NinAbsent", `{"data.missing": {"$nin": ["x"]}}`, true},
		{"StartsWith", `{"subject": {"$startsWith": "wiki://software/"}}`, true},
		{"StartsWithMiss", `{"subject": {"$startsWith": "wiki://public/"}}`, false},
		{"EndsWith", `{"subject": {"$endsWith": "/x"}}`, true},
		{"StartsWithOnNumber", `{"data.count": {"$startsWith": "3"}}`, false},
		{"ExistTrue", `{"data.none": {"$exist": true}}`, true},
		{"ExistFalse", `{"data.missing": {"$exist": false}}`, true},
		{"ExistFalseMiss", `{"data.op": {"$exist": false}}`, false},
		{"NestedPath", `{"data.venue.id": "v1"}`, true},
		{"PathThroughScalar", `{"data.op.x": {"$exist": true}}`, false},
		{"ObjectEqualsNoScalar", `{"data.venue": {"$eq": "v1"}}`, false},
		{"AllMustHold", `{"data.op": "published", "data.count": 4}`, false},
		{"Or", `{"$or": [{"data.count": 4}, {"data.op": "published"}]}`, true},
		{"OrNone", `{"$or": [{"data.count": 4}, {"data.op": "draft"}]}`, false},
		{"And", `{"$and": [{"data.count": 3}, {"data.op": "published"}]}`, true},
		{"AndOneFails", `{"$and": [{"data.count": 3}, {"data.op": "draft"}]}`, false},
		{"OrOfAnds", `{"$or": [{"data.count": 3, "data.op": "draft"}, {"$and": [{"data.published": true}, {"subject": {"$endsWith": "/x"}}]}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse([]byte(tc.filter))
			require.NoError(t, err)
			d := NewDoc(subject, []byte(data))
			require.Equal(t, tc.want, f.Matches(d))
			// Explain agrees with Matches.
			require.Equal(t, tc.want, f.Explain(d) == "", f.Explain(d))
		})
	}

	t.Run("DataNotAnObject", func(t *testing.T) {
		t.Parallel()
		f, err := Parse([]byte(`{"data.a": {"$neq": 1}}`))
		require.NoError(t, err)
		require.True(t, f.Matches(NewDoc("x://y", []byte(`[1]`))), "no property: absent")
		require.True(t, f.Matches(NewDoc("x://y", nil)))
	})

	t.Run("NilFilterMatches", func(t *testing.T) {
		t.Parallel()
		var f *Filter
		require.True(t, f.Matches(NewDoc("x://y", nil)))
		require.Empty(t, f.Explain(NewDoc("x://y", nil)))
	})
}

func TestExplain(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, filter, subject, data, want string
	}{
		{"In", `{"data.status": {"$in": ["published"]}}`, "x://a", `{"status":"draft"}`,
			`filter: data.status was "draft", wanted one of ["published"]`},
		{"Eq", `{"data.op": "published"}`, "x://a", `{"op":"draft"}`, `filter: data.op was "draft", wanted "published"`},
		{"Absent", `{"data.op": "published"}`, "x://a", `{}`, `filter: data.op was absent, wanted "published"`},
		{"Neq", `{"data.op": {"$neq": "draft"}}`, "x://a", `{"op":"draft"}`, `filter: data.op was "draft", wanted anything but "draft"`},
		{"Numbers", `{"data.n": {"$gte": 10}}`, "x://a", `{"n":2.5}`, `filter: data.n was 2.5, wanted 10 or more`},
		{"DateTime", `{"data.at": {"$gt": "2027-01-01T00:00:00Z"}}`, "x://a", `{"at":"2026-01-01T00:00:00Z"}`,
			`filter: data.at was "2026-01-01T00:00:00Z", wanted later than "2027-01-01T00:00:00Z"`},
		{"Nin", `{"data.op": {"$nin": ["a", "b"]}}`, "x://a", `{"op":"b"}`, `filter: data.op was "b", wanted none of ["a", "b"]`},
		{"StartsWith", `{"subject": {"$startsWith": "wiki://public/"}}`, "wiki://private/x", `{}`,
			`filter: subject was "wiki://private/x", wanted a string starting with "wiki://public/"`},
		{"Exist", `{"data.code": {"$exist": false}}`, "x://a", `{"code":{"a":1}}`, `filter: data.code was an object, wanted it absent`},
		{"FirstFailingInKeyOrder", `{"data.b": 1, "data.a": 1}`, "x://a", `{"a":2,"b":2}`, `filter: data.a was 2, wanted 1`},
		{"Or", `{"$or": [{"data.a": 1}, {"data.b": true, "data.c": null}]}`, "x://a", `{"a":2,"b":true,"c":"x"}`,
			`filter: none of $or held (data.a was 2, wanted 1; data.c was "x", wanted null)`},
		{"LongValueCut", `{"data.s": "x"}`, "x://a", `{"s":"` + strings.Repeat("é", 100) + `"}`,
			`filter: data.s was "` + strings.Repeat("é", 30) + `…", wanted "x"`},
		{"LongList", `{"data.s": {"$in": [1,2,3,4,5,6,7]}}`, "x://a", `{"s":0}`, `filter: data.s was 0, wanted one of [1, 2, 3, 4, 5, …]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse([]byte(tc.filter))
			require.NoError(t, err)
			require.Equal(t, tc.want, f.Explain(NewDoc(tc.subject, []byte(tc.data))))
		})
	}

	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		var members []string
		for i := range MaxClauses {
			members = append(members, `{"data.a`+strings.Repeat("x", 20+i)+`": 1}`)
		}
		f, err := Parse([]byte(`{"$or": [` + strings.Join(members, ",") + `]}`))
		require.NoError(t, err)
		got := f.Explain(NewDoc("x://a", []byte(`{}`)))
		require.LessOrEqual(t, len(got), MaxExplanation)
		require.True(t, strings.HasSuffix(got, "…"))
	})
}

// testCatalog is the default catalog's types plus a custom one whose data
// nests objects, refers to $defs and leaves one object open.
func testCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, catalog.Default().WriteDir(dir))
	custom := `{
  "name": "venue.booked",
  "description": "A venue was booked.",
  "exposure": "webhook",
  "scope": "all",
  "schema": {
    "type": "object",
    "properties": {
      "venue": {"$ref": "#/$defs/venue"},
      "seats": {"type": "integer", "minimum": 0},
      "price": {"type": ["number", "null"]},
      "state": {"anyOf": [{"const": "held"}, {"const": "confirmed"}]},
      "meta": {"type": "object"}
    },
    "$defs": {
      "venue": {"type": "object", "properties": {"id": {"type": "string"}, "city": {"type": "string", "enum": ["berlin", "paris"]}}, "additionalProperties": false}
    },
    "additionalProperties": false
  },
  "example": {"venue": {"id": "v1", "city": "paris"}, "seats": 2, "price": null, "state": "held", "meta": {"x": 1}}
}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "venue.booked.json"), []byte(custom), 0o600))
	c, err := catalog.Load(dir)
	require.NoError(t, err)
	return c
}

func TestCheck(t *testing.T) {
	t.Parallel()
	cat := testCatalog(t)

	check := func(t *testing.T, globs []string, filter string) error {
		t.Helper()
		f, err := Parse([]byte(filter))
		require.NoError(t, err)
		return f.Check(FieldsFor(cat, globs))
	}

	for _, tc := range []struct {
		name   string
		globs  []string
		filter string
	}{
		{"Enum", []string{"corpus.*"}, `{"data.op": {"$in": ["published", "deleted"]}}`},
		{"Subject", []string{"*"}, `{"subject": {"$startsWith": "wiki://"}, "$or": [{"subject": {"$endsWith": "/x"}}]}`},
		{"Boolean", []string{"corpus.note.changed"}, `{"data.published": true, "data.was_published": {"$neq": false}}`},
		{"Exist", []string{"access_request.*"}, `{"data.code_id": {"$exist": true}}`},
		{"DateTimeOrdering", []string{"booking.*"}, `{"data.starts_at": {"$gte": "2026-12-01T00:00:00Z"}}`},
		{"PathInOneOfTheTypes", []string{"corpus.*", "access_request.*"}, `{"data.status": "approved"}`},
		{"RefNested", []string{"venue.booked"}, `{"data.venue.id": {"$startsWith": "v"}, "data.venue.city": "paris"}`},
		{"IntegerRange", []string{"venue.booked"}, `{"data.seats": {"$gt": 1, "$lte": 10}}`},
		{"Nullable", []string{"venue.booked"}, `{"data.price": {"$in": [null, 3.5]}}`},
		{"ConstsInAnyOf", []string{"venue.booked"}, `{"data.state": "confirmed"}`},
		{"OpenObject", []string{"venue.booked"}, `{"data.meta.anything.below": {"$gt": 1}}`},
		{"Operational", []string{"endpoint.*"}, `{"data.name": {"$startsWith": "prod-"}}`},
	} {
		t.Run("Accepts"+tc.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, check(t, tc.globs, tc.filter))
		})
	}

	for _, tc := range []struct {
		name, filter, field, reason string
		globs                       []string
	}{
		{"MisspeltField", `{"data.statuss": {"$in": ["approved"]}}`, "filter.data.statuss",
			`no event type this endpoint subscribes to has data.statuss (access_request.approved, access_request.created, access_request.status_changed); did you mean "data.status"?`,
			[]string{"access_request.*"}},
		{"FieldOfAnotherType", `{"data.starts_at": {"$exist": true}}`, "filter.data.starts_at",
			"booking.cancelled, booking.created, booking.rescheduled have it, and the endpoint's event_types do not include them", []string{"corpus.*"}},
		{"UnknownFieldListsTheFields", `{"data.zzz": 1}`, "filter.data.zzz",
			"the fields are: subject, data.note_id, data.op, data.published, data.was_published", []string{"corpus.*"}},
		{"GtOnString", `{"data.op": {"$gt": 3}}`, "filter.data.op.$gt",
			"cannot apply to data.op, a string in corpus.note.changed: $gt orders numbers and date-times", []string{"corpus.*"}},
		{"StartsWithOnBoolean", `{"data.published": {"$startsWith": "t"}}`, "filter.data.published.$startsWith",
			"$startsWith applies to strings only", []string{"corpus.*"}},
		{"StartsWithOnInteger", `{"data.seats": {"$startsWith": "1"}}`, "filter.data.seats.$startsWith",
			"cannot apply to data.seats, an integer in venue.booked", []string{"venue.booked"}},
		{"EqOnObject", `{"data.venue": {"$eq": "v1"}}`, "filter.data.venue.$eq",
			"compares strings, numbers, booleans and null, not objects or arrays", []string{"venue.booked"}},
		{"WrongType", `{"data.published": "true"}`, "filter.data.published", "must be a boolean: data.published is one", []string{"corpus.*"}},
		{"NotWhole", `{"data.seats": 2.5}`, "filter.data.seats", "must be a whole number", []string{"venue.booked"}},
		{"OutsideEnum", `{"data.op": {"$in": ["published", "draft"]}}`, "filter.data.op.$in[1]",
			`is not a value data.op takes (in corpus.note.changed): it is one of "created", "updated", "published", "unpublished", "deleted"`, []string{"corpus.*"}},
		{"OutsideEnumOfRef", `{"data.venue.city": {"$neq": "rome"}}`, "filter.data.venue.city.$neq", `it is one of "berlin", "paris"`, []string{"venue.booked"}},
		{"OutsideConsts", `{"data.state": "cancelled"}`, "filter.data.state", `it is one of "held"`, []string{"venue.booked"}},
		{"OrderingWrongOperand", `{"data.starts_at": {"$lt": 5}}`, "filter.data.starts_at.$lt", "must be a date-time string", []string{"booking.*"}},
		{"OrderingDateOnNumber", `{"data.seats": {"$lt": "2026-01-01T00:00:00Z"}}`, "filter.data.seats.$lt", "must be a number: data.seats is an integer", []string{"venue.booked"}},
		{"ClosedNested", `{"data.venue.street": "x"}`, "filter.data.venue.street", "no event type this endpoint subscribes to has data.venue.street (venue.booked)", []string{"venue.booked"}},
		{"MisspeltNested", `{"data.venue.cty": "paris"}`, "filter.data.venue.cty", `did you mean "data.venue.city"?`, []string{"venue.booked"}},
		{"SubjectExist", `{"subject": {"$exist": false}}`, "filter.subject.$exist", "every event has a subject", []string{"*"}},
		{"SubjectOrdering", `{"subject": {"$gt": 1}}`, "filter.subject.$gt", "cannot apply to subject", []string{"*"}},
		{"InsideOr", `{"$or": [{"data.op": "published"}, {"data.opp": "deleted"}]}`, "filter.$or[1].data.opp", `did you mean "data.op"?`, []string{"corpus.*"}},
		{"TestTypeLeftOut", `{"data.endpoint_id": "x"}`, "filter.data.endpoint_id", "no event type", []string{"webhook.test"}},
	} {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			err := check(t, tc.globs, tc.filter)
			var es Errors
			require.ErrorAs(t, err, &es)
			require.Equal(t, tc.field, es[0].Field, "%v", err)
			require.Contains(t, es[0].Reason, tc.reason)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}

	t.Run("EveryMistakeOnce", func(t *testing.T) {
		t.Parallel()
		err := check(t, []string{"corpus.*"}, `{"data.opp": {"$neq": "a", "$nin": ["b"]}, "data.published": "yes", "data.note_id": 3}`)
		var es Errors
		require.ErrorAs(t, err, &es)
		var fields []string
		for _, e := range es {
			fields = append(fields, e.Field)
		}
		require.Equal(t, []string{"filter.data.note_id", "filter.data.opp", "filter.data.published"}, fields)
	})

	t.Run("FieldsList", func(t *testing.T) {
		t.Parallel()
		fields := FieldsFor(cat, []string{"venue.booked"})
		require.Equal(t, []string{"venue.booked"}, fields.Types())
		require.Equal(t, []string{"data.meta", "data.price", "data.seats", "data.state", "data.venue", "data.venue.city", "data.venue.id"}, fields.Paths())
	})
}

func TestCache(t *testing.T) {
	t.Parallel()

	t.Run("ParsesOncePerText", func(t *testing.T) {
		t.Parallel()
		c := NewCache(0)
		a, err := c.Get([]byte(`{"data.a":1}`))
		require.NoError(t, err)
		b, err := c.Get([]byte(`{"data.a":1}`))
		require.NoError(t, err)
		require.Same(t, a, b)
		other, err := c.Get([]byte(`{"data.a":2}`))
		require.NoError(t, err)
		require.NotSame(t, a, other)
		require.Equal(t, 2, c.Len())
	})

	t.Run("KeepsErrors", func(t *testing.T) {
		t.Parallel()
		c := NewCache(0)
		_, err := c.Get([]byte(`{"data.a":{"$bogus":1}}`))
		require.ErrorIs(t, err, ErrInvalid)
		_, err = c.Get([]byte(`{"data.a":{"$bogus":1}}`))
		require.ErrorIs(t, err, ErrInvalid)
	})

	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		c := NewCache(3)
		for i := range 10 {
			_, err := c.Get([]byte(`{"data.a":` + string(rune('0'+i)) + `}`))
			require.NoError(t, err)
			require.LessOrEqual(t, c.Len(), 3)
		}
	})
}

func TestMarkdown(t *testing.T) {
	t.Parallel()

	t.Run("ExamplesParseAndFitTheDefaultCatalog", func(t *testing.T) {
		t.Parallel()
		text := string(Markdown())
		blocks := strings.Split(text, "```json\n")[1:]
		require.Len(t, blocks, 5)
		for _, b := range blocks {
			example, _, ok := strings.Cut(b, "```")
			require.True(t, ok)
			f, err := Parse([]byte(example))
			require.NoError(t, err, example)
			require.NoError(t, f.Check(FieldsFor(catalog.Default(), []string{"*"})), example)
		}
	})

	t.Run("QuotesTheErrorsAsTheyAre", func(t *testing.T) {
		t.Parallel()
		text := strings.Join(strings.Fields(string(Markdown())), " ")
		for _, c := range []struct {
			globs  []string
			filter string
		}{
			{[]string{"access_request.*"}, `{"data.statuss": 1}`},
			{[]string{"corpus.*"}, `{"data.op": {"$gt": 1}}`},
			{[]string{"corpus.*"}, `{"data.op": {"$in": ["published", "draft"]}}`},
		} {
			f, err := Parse([]byte(c.filter))
			require.NoError(t, err)
			err = f.Check(FieldsFor(catalog.Default(), c.globs))
			require.Error(t, err)
			quoted := strings.TrimSuffix(err.Error(), " …")
			if i := strings.Index(quoted, " …"); i > 0 {
				quoted = quoted[:i]
			}
			require.Contains(t, text, quoted[:min(len(quoted), 60)], "the page quotes %q", err)
		}
		_, err := Parse([]byte(`{"data.op": {"$exists": true}}`))
		require.Contains(t, text, strings.SplitN(err.Error(), ";", 2)[0])
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"data.status": {"$in": ["published"]}}`,
		`{"$or": [{"data.a": 1}, {"subject": {"$startsWith": "x"}}], "data.b": {"$gte": 1, "$lt": 2}}`,
		`{"data.at": {"$gt": "2026-01-01T00:00:00Z"}, "data.x": {"$exist": false}}`,
		`{"data.a": null}`, `{}`, `[`, `{"a":`,
	} {
		f.Add([]byte(s), []byte(`{"status":"draft","a":1,"at":"2026-06-01T00:00:00Z"}`))
	}
	f.Fuzz(func(t *testing.T, text, data []byte) {
		flt, err := Parse(text)
		if err != nil {
			var fe *Error
			require.ErrorAs(t, err, &fe)
			require.True(t, strings.HasPrefix(fe.Field, Root), fe.Field)
			return
		}
		// The canonical form is a filter of its own, the same one.
		again, err := Parse(flt.JSON())
		require.NoError(t, err)
		require.Equal(t, flt.JSON(), again.JSON())
		require.True(t, json.Valid(flt.JSON()))
		d := NewDoc("x://y", data)
		require.Equal(t, flt.Matches(d), flt.Explain(d) == "")
		require.LessOrEqual(t, len(flt.Explain(d)), MaxExplanation)
		_ = flt.Check(FieldsFor(catalog.Default(), []string{"*"}))
	})
}

func BenchmarkMatches(b *testing.B) {
	f, err := Parse([]byte(`{"data.op": {"$in": ["published", "unpublished"]}, "subject": {"$startsWith": "wiki://software/"}}`))
	require.NoError(b, err)
	d := NewDoc("wiki://software/project/x", []byte(`{"op":"published","note_id":"n_1","published":true}`))
	b.ReportAllocs()
	for b.Loop() {
		if !f.Matches(d) {
			b.Fatal("no match")
		}
	}
}
