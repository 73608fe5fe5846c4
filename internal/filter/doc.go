// Package filter is the language of endpoint filters: a JSON object of
// conditions on an event's subject and data that an endpoint's deliveries
// must meet, in the form Svix and Convoy users know:
//
//	{
//	  "data.op": {"$in": ["published", "unpublished"]},
//	  "subject": {"$startsWith": "wiki://software/"},
//	  "$or": [{"data.published": true}, {"data.was_published": true}]
//	}
//
// Keys are field paths ("subject", or "data." and a property path such as
// "data.booking.venue_id") or the groups "$and" and "$or", whose value is a
// non-empty array of such objects. The conditions of one object must all
// hold. A field's value is an operator object ({"$gte": 3, "$lt": 10}: all
// must hold) or a bare string, number, boolean or null, which means $eq.
// The operators are $eq $neq $gt $gte $lt $lte $in $nin $startsWith
// $endsWith and $exist; docs/events.md says what each does, with the limits
// (MaxBytes, MaxDepth, MaxClauses, MaxValues) and examples.
//
// Three steps, each at its own time:
//
//   - Parse reads a filter and refuses what no filter can mean (invalid
//     JSON, an unknown operator, an operator object mixed with other keys,
//     a filter over a limit) with an *Error naming the spot
//     ("filter.data.status.$in[2]").
//   - Check, when an endpoint is created or updated, holds it against the
//     catalog's schemas of the types the endpoint subscribes to (Fields): a
//     path none of them has (with a did-you-mean), an operator that cannot
//     apply to the field's type, a value of the wrong type or outside its
//     enum.
//   - Matches, at fanout, evaluates it against one event, with no
//     allocation once the event's data is read (Doc); Explain says which
//     condition failed and with what value, for the event's decision record.
//
// A Filter is immutable and safe for concurrent use; the fanout compiles
// each stored filter once (Cache), not per event. The package knows the
// catalog only as a value handed in: it never reads a process-wide one.
package filter
