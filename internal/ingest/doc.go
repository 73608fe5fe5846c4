// Package ingest is where events enter the dispatcher. Both ways in, the gRPC
// EventService (served by internal/grpcapi) and the outbox Relay tailing the
// main application's webhook_outbox table, end in the same place: Store,
// which validates every event and, in one transaction, inserts the events
// into the events table with their deliveries (or their webhook.fanout job,
// where the access service must be asked).
//
// # Idempotency
//
// The event id is the events table's primary key, and the fanout job is unique
// by event id, so ingesting the same event twice (a publisher retrying after a
// timeout, the relay re-relaying rows after a crash between its two commits)
// stores it and fans it out once. The same id with different content is never
// a silent overwrite: it is a *ConflictError (ErrConflict), surfaced as
// AlreadyExists over gRPC and as a set-aside row by the relay.
//
// # What never leaves
//
// Types outside the catalog are Internal and raw:// subjects never leave (see
// event.Leaves). Such events are accepted and counted but not stored, so no
// delivery can ever be made of them.
//
// # The relay
//
// The relay claims outbox rows with FOR UPDATE SKIP LOCKED, never a cursor, so
// any number of replicas can run it at once without doubling work. It commits
// the dispatcher side first and then marks (or deletes) the claimed rows; a
// crash in between re-relays the rows, which idempotent ingest absorbs. Rows
// that can never be valid are marked with their error and never block the rows
// behind them. It wakes on LISTEN webhook_outbox and falls back to polling.
package ingest
