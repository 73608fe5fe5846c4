// Package catalog is the dispatcher's event catalog as data: which event
// types exist, whether each may leave the instance (its Exposure), who may
// see it (its Scope rule) and what its data object holds (a JSON Schema, with
// an example). The dispatcher loads it at start-up (-catalog /
// DISPATCHER_CATALOG; the types of [Default] when unset), and the main
// application uses the same package to check an event before writing it to
// the outbox (pkg/outbox) or sending it (pkg/client): one implementation of
// the rules, on both sides.
//
// # Files
//
// A catalog is a directory holding one JSON file per type, named
// <type>.json, or one JSON file {"types": [ … ]} holding them all. A type:
//
//		{
//		  "name": "invoice.paid",
//		  "description": "An invoice was paid.",
//		  "exposure": "webhook",
//		  "scope": "all",
//		  "schema": {"type": "object", "properties": {…}, "additionalProperties": false},
//		  "example": {"invoice_id": "inv_1"}
//		}
//
//	  - name: dotted lower-case segments ("corpus.note.changed"), unique.
//	  - exposure: "webhook" (it may be delivered) or "internal" (it is
//	    accepted and never delivered).
//	  - scope, for webhook types: "all" (every endpoint subscribed to it),
//	    "published_slice" (a standalone endpoint hears it only when
//	    data.published or data.was_published is true; an endpoint bound to an
//	    embed when the access service says the embed admits it) or "test_only"
//	    (only the endpoint named by data.endpoint_id).
//	  - schema: a JSON Schema (draft 2020-12) of the data object, closed
//	    ("additionalProperties": false) so that nothing undeclared can leave;
//	    required for webhook types. It may not refer to other documents.
//	  - example: a data object the schema accepts, shown to owners.
//
// A mistake is an error naming the file and the field ("catalog/invoice.paid.json:
// scope: must be one of all, published_slice, test_only"), and the
// dispatcher does not start with it.
//
// # Built-in types
//
// Every catalog also holds the types the dispatcher itself relies on, which
// a catalog may not redefine: webhook.test (what SendTest sends) and the
// operational events endpoint.failing, endpoint.disabled and
// endpoint.recovered (Exposure Operational: delivered like webhook types,
// only ever emitted by the dispatcher).
//
// # Types in no catalog
//
// A type in no catalog is Internal too (it never leaves), but it is most
// often a misspelling: [Catalog.Known] tells it apart from a type declared
// internal.
package catalog
