// Package event defines the thin event the dispatcher carries to webhook
// receivers: its shape and validation limits, the exact JSON body a receiver
// gets, the catalog of types that may leave the instance (their Exposure), and
// the glob language endpoints use to subscribe to types.
//
// It is the bottom of the dependency graph: ingest, fanout and delivery import
// it, and it imports no other project package and no domain, so the rules of
// "what is an event and what may leave" live in exactly one place.
//
// # Thin events
//
// An Event carries only an id, a dotted type, a subject URI, the time it
// happened and a small JSON object of data; receivers call the application's
// own API back for content. The owner of an event travels beside it
// (Event.OwnerID) to scope fanout, and is never part of the payload. The
// limits Validate enforces are exported as constants so that other layers (the
// gRPC API, the outbox contract) can quote them rather than restate them.
//
// # Exposure
//
// Every type has an Exposure. Only the 39 types in the catalog (docs/spec.md) are
// ExposureWebhook; everything else is ExposureInternal, which is the zero value
// on purpose: a type nobody classified can never leave by accident. Subjects
// with the raw:// scheme never leave whatever their type; see Leaves.
//
// # Type globs
//
// Endpoints subscribe with a list of globs over dotted type names:
//
//   - "*" matches every type.
//   - "prefix.*" matches every type whose name starts with "prefix." at any
//     depth: "corpus.*" and "corpus.note.*" both match "corpus.note.changed".
//     It does not match the bare name "prefix" itself.
//   - Anything else is an exact type name.
//
// A "*" anywhere else ("corpus.*.changed", "corp*", "*.changed") is invalid, as
// is a glob that could never match a catalog type (an exact name outside the
// catalog, or a prefix no catalog type starts with): such a subscription is
// almost certainly a typo, and accepting it would silently deliver nothing.
// Matching is case-sensitive, like type names themselves.
package event
