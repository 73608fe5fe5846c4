package filter

import (
	"strconv"
	"strings"
)

// Markdown is the "Filters" section of docs/events.md: the language, its
// limits (from this package's constants, so the page cannot drift from
// them) and examples. `make generate` writes it after the catalog's types.
func Markdown() []byte {
	r := strings.NewReplacer(
		"{MaxBytes}", strconv.Itoa(MaxBytes),
		"{MaxDepth}", strconv.Itoa(MaxDepth),
		"{MaxClauses}", strconv.Itoa(MaxClauses),
		"{MaxValues}", strconv.Itoa(MaxValues),
		"{MaxPathSegments}", strconv.Itoa(MaxPathSegments),
		"{MaxPathLen}", strconv.Itoa(MaxPathLen),
		"{MaxExplanation}", strconv.Itoa(MaxExplanation),
		"{MaxErrors}", strconv.Itoa(MaxErrors),
		"§", "`",
	)
	return []byte(r.Replace(markdown))
}

const markdown = `
## Filters

An endpoint chooses its events by type with its §event_types§ globs. A **filter** narrows that
down to the events whose subject and data matter to it: only §booking.created§ for one venue, only
notes whose §op§ became §published§. The dispatcher evaluates it at fanout, after the event's type
and scope have admitted the endpoint, so an event the filter refuses is never sent, signed, retried
or paid for, and the event's page says which condition refused it.

A filter is a JSON object, in the form users of Convoy and Svix filters know:

§§§json
{
  "data.op": {"$in": ["published", "unpublished"]},
  "subject": {"$startsWith": "wiki://software/"}
}
§§§

- Each key is a **field**, §"subject"§ or §"data."§ and a path into the event's §data§
  (§"data.op"§, §"data.venue.city"§: property names joined by dots), or a **group**, §"$and"§ or
  §"$or"§.
- A field's value is an **operator object**, §{"$gte": 1, "$lt": 10}§, whose operators must all
  hold, or a bare string, number, boolean or §null§, which means §$eq§: §{"data.op": "published"}§.
- §"$and"§ and §"$or"§ take a non-empty array of such objects: all of them, or at least one of
  them, must hold.
- Every condition of an object must hold: §{"data.op": "published", "subject": {...}}§ is an and.
- §{}§ is no filter: every event its §event_types§ and scope admit.

| operator | applies to | holds when the field… |
|---|---|---|
| §$eq§ | strings, numbers, booleans, null | equals the value |
| §$neq§ | strings, numbers, booleans, null | does not equal it, or is absent |
| §$gt§, §$gte§, §$lt§, §$lte§ | numbers; date-times (RFC 3339 strings, compared as instants) | is greater (or equal), less (or equal) |
| §$in§ | strings, numbers, booleans, null | equals one of the array's values |
| §$nin§ | strings, numbers, booleans, null | equals none of them, or is absent |
| §$startsWith§, §$endsWith§ | strings | starts (ends) with the string |
| §$exist§ | any field | is present (§true§) or absent (§false§); a §null§ value is present |

A value of another type than the operand is not equal to it (§"3"§ is not §3§). Objects and arrays
are not compared: test their properties (§"data.venue.city"§). Numbers compare as 64-bit floats,
exact up to 2^53. A filter does not apply to §webhook.test§: a test goes to the endpoint it names,
whatever that endpoint's filter says.

### Examples

§§§json
{"data.op": "published"}
§§§

Only notes that were published.

§§§json
{"data.starts_at": {"$gte": "2026-12-01T00:00:00Z", "$lt": "2027-01-01T00:00:00Z"}}
§§§

Bookings starting in December 2026.

§§§json
{"$or": [{"data.published": true}, {"data.was_published": true}],
 "data.op": {"$nin": ["created"]},
 "subject": {"$startsWith": "wiki://software/"}}
§§§

Changes to notes under §wiki://software/§ that are or were published, but not their creation.

§§§json
{"data.code_id": {"$exist": true}}
§§§

With §event_types§ §["access_request.approved"]§: the approvals that issued a code.

### Checked against the catalog

Creating or updating an endpoint checks its filter against the data schemas (above) of every type
its §event_types§ subscribe to, and refuses, with §InvalidArgument§ naming the spot of each
mistake (at most {MaxErrors}), a filter that could only ever match nothing by mistake:

- a field that no subscribed type has, with the field probably meant:
  §filter.data.statuss: no event type this endpoint subscribes to has data.statuss
  (access_request.approved, access_request.created, access_request.status_changed); did you mean
  "data.status"?§, or the types that have it when the endpoint does not subscribe to them;
- an operator that cannot apply to the field's type (§filter.data.op.$gt: cannot apply to
  data.op, a string in corpus.note.changed: $gt orders numbers and date-times …§, §$startsWith§ on
  a number);
- a value of the wrong type (§filter.data.published: must be a boolean …§) or outside the field's
  §enum§ (§filter.data.op.$in[1]: is not a value data.op takes (in corpus.note.changed): it is
  one of "created", "updated", "published", "unpublished", "deleted"§).

A field that several subscribed types have passes if it fits one of them. Changing an endpoint's
§event_types§ checks its filter against the new subscription too. Malformed filters are refused
the same way, naming the spot: invalid JSON (with its byte, line and column), an unknown operator
(§filter.data.op.$exists: is not an operator (did you mean $exist?)§), an operator object mixed
with other keys, an array or object where a value belongs, a key given twice.
§dispatcher catalog check§ holds every stored filter against a new catalog before it is rolled
out ([operations](operations.md#endpoint-filters)).

### Limits

| limit | value |
|---|---|
| size, as compact JSON | {MaxBytes} bytes |
| comparisons (one per operator on a field) | {MaxClauses} |
| §$and§ / §$or§ nesting | {MaxDepth} levels |
| values of one §$in§ / §$nin§, members of one §$and§ / §$or§ | {MaxValues} |
| a field path | {MaxPathSegments} segments, {MaxPathLen} bytes |

A filter over a limit is refused naming the spot where it was crossed.

### When a filter says no

The event's fanout decision (§GetEvent§, §dispatcher events get§, the event's page in the
portal) lists the endpoint under §FANOUT_REASON_FILTERED§ with the condition that failed and the
value it met:

§§§
filter: data.status was "draft", wanted one of ["published"]
§§§

(for an §$or§, each member's reason; at most {MaxExplanation} bytes, for the first 16 endpoints
refused, as the decision samples every reason). §TestFilter§ (§POST /v1/filters:test§,
§dispatcher endpoints test-filter§, the portal form's Test filter button) evaluates a filter, or
an endpoint's, against a stored event or a sample and answers the same, delivering nothing. The
portal's endpoint form edits the filter as JSON and checks it as it is typed, with the check a
save makes. Each endpoint's stats count the events its
filter kept back (§GetEndpointStats§, §filtered§); §dispatcher_fanout_filtered_total§ counts them
all.
`
