// Package event is the dispatcher's view of the event catalog: the running
// catalog (pkg/catalog, loaded from -catalog or the embedded default), the
// raw:// rule, and the glob language endpoints use to subscribe to types.
//
// The thin event itself (its fields, the rules every event must pass and its
// wire encoding) is pkg/webhook's Event, and the catalog (types, Exposure,
// scope rules, data schemas and their checks) is pkg/catalog, both shared
// with the main application; this package adds what only the dispatcher
// decides. It imports no other internal package and no domain, so "what may
// leave" lives in exactly one place.
//
// # The running catalog
//
// The composition root loads the catalog (-catalog, else the embedded
// default) into a Running and hands it to every stage of the pipeline, so all
// of them decide with the same catalog and a swap reaches all of them at
// once; there is no process-wide catalog. The package-level functions
// (ExposureOf, Leaves, ValidateData, …) are the default catalog's, for tools
// and tests.
//
// # Exposure
//
// Every type has an Exposure. The catalog's webhook types are
// ExposureWebhook, and the dispatcher's own operational events
// (endpoint.failing, endpoint.disabled, endpoint.recovered)
// ExposureOperational: they leave like webhook types, but only the dispatcher
// may emit them (Publishable). Everything else is ExposureInternal, which is
// the zero value on purpose: a type nobody classified can never leave by
// accident. Known tells a type declared internal from one in no catalog.
// Subjects with the raw:// scheme never leave whatever their type; see
// Leaves.
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
