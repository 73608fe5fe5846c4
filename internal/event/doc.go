// Package event knows which event types exist and which may leave the
// instance: the catalog of webhook types (their Exposure and data schemas),
// the raw:// rule, and the glob language endpoints use to subscribe to types.
//
// The thin event itself (its fields, the rules every event must pass and its
// wire encoding) is pkg/webhook's Event, shared with the main application's
// outbox writer and with receivers; this package adds what only the
// dispatcher decides. It imports no other internal package and no domain
// (only a JSON Schema validator), so "what may leave" lives in exactly one
// place.
//
// # Exposure
//
// Every type has an Exposure. Only the 39 types in the catalog (docs/spec.md) are
// ExposureWebhook, and the dispatcher's own operational events
// (endpoint.failing, endpoint.disabled, endpoint.recovered) ExposureOperational:
// they leave like webhook types, but only the dispatcher may emit them
// (Publishable). Everything else is ExposureInternal, which is the zero value
// on purpose: a type nobody classified can never leave by accident. Subjects
// with the raw:// scheme never leave whatever their type; see Leaves.
//
// # Data schemas
//
// Each catalog type declares the shape of its data object as a JSON Schema,
// schemas/<type>.json, embedded and compiled when the package is loaded. They
// are closed (a property not listed is refused), so nothing undeclared can
// leave; ingest applies them with ValidateData, which names the offending
// JSON path. Each file carries an example, and docs/events.md is rendered
// from them (Markdown, run by `make generate`).
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
