// Package migrations holds the dispatcher's SQL schema and the outbox contract
// that the main application applies to its own database.
//
// Files are embedded so the binary migrates itself ("dispatcher migrate").
// Dispatcher migrations are named NNN_name.up.sql and applied in order, each in
// its own transaction, after River's own migrations (they may reference River's
// tables). The outbox contract lives in outbox/ and is idempotent DDL.
package migrations

import "embed"

// Dispatcher holds the dispatcher's own migrations.
//
//go:embed *.up.sql
var Dispatcher embed.FS

// Outbox holds the outbox-table contract for the main application's database.
//
//go:embed outbox/*.up.sql
var Outbox embed.FS
