package ingest

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchTx is a transaction begun by a "begin" sent in one pgx.Batch with
// the transaction's first statement, so that beginning it costs no round
// trip of its own: pgx's own transaction (pgx.Conn.BeginTx) sends BEGIN and
// waits for its answer before anything else can be sent. Otherwise it is
// that transaction (one connection, ended by commit or rollback, each
// statement sent as pgx sends it), without savepoints, which nothing in the
// ingest transaction uses.
type batchTx struct {
	conn   *pgx.Conn
	closed bool
}

var _ pgx.Tx = (*batchTx)(nil)

// errNoSavepoints: batchTx.Begin.
var errNoSavepoints = errors.New("ingest: the ingest transaction takes no savepoints")

// Begin would start a savepoint; the ingest transaction takes none.
func (tx *batchTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNoSavepoints }

// Commit commits as pgx's transaction does: a commit that Postgres answers
// with ROLLBACK (the transaction had failed) is ErrTxCommitRollback, and a
// connection left in a transaction by a failed commit is closed.
func (tx *batchTx) Commit(ctx context.Context) error {
	if tx.closed {
		return pgx.ErrTxClosed
	}
	tag, err := tx.conn.Exec(ctx, "commit")
	tx.closed = true
	if err != nil {
		if tx.conn.PgConn().TxStatus() != 'I' {
			_ = tx.conn.Close(ctx) // already have an error to return
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back; a connection a failed rollback leaves in a
// transaction is closed (the pool would destroy it anyway).
func (tx *batchTx) Rollback(ctx context.Context) error {
	if tx.closed {
		return pgx.ErrTxClosed
	}
	_, err := tx.conn.Exec(ctx, "rollback")
	tx.closed = true
	if err != nil {
		_ = tx.conn.Close(ctx)
		return err
	}
	return nil
}

func (tx *batchTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if tx.closed {
		return 0, pgx.ErrTxClosed
	}
	return tx.conn.CopyFrom(ctx, table, columns, src)
}

func (tx *batchTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return tx.conn.SendBatch(ctx, b)
}

// LargeObjects is not offered (nothing in the ingest transaction uses them).
func (tx *batchTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (tx *batchTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if tx.closed {
		return nil, pgx.ErrTxClosed
	}
	return tx.conn.Prepare(ctx, name, sql)
}

func (tx *batchTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if tx.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return tx.conn.Exec(ctx, sql, args...)
}

func (tx *batchTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if tx.closed {
		return nil, pgx.ErrTxClosed
	}
	return tx.conn.Query(ctx, sql, args...)
}

func (tx *batchTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if tx.closed {
		return errRow{pgx.ErrTxClosed}
	}
	return tx.conn.QueryRow(ctx, sql, args...)
}

// errRow is a row that only fails.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (tx *batchTx) Conn() *pgx.Conn { return tx.conn }
