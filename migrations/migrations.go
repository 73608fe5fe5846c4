// Package migrations holds the dispatcher's SQL schema and the outbox contract
// that the main application applies to its own database.
//
// Files are embedded so the binary migrates itself ("dispatcher migrate").
// Dispatcher migrations are named NNN_name.up.sql and applied in order, each in
// its own transaction, after River's own migrations (they may reference River's
// tables). The outbox contract lives in outbox/ and is idempotent DDL.
//
// A migration takes its number when the work that needs it starts, so that
// work on several features can go on at once; a number whose work never
// shipped stays unused (today 006-008 and 011), and no number is ever reused
// or given to another file. The dispatcher_migration table records each
// applied version with its file name, and migrate and serve refuse a schema
// whose record names another file than this build's for that number:
// renumbering would make a database migrated before it skip a migration.
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
