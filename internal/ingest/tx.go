package ingest

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/standmeet/webhook-dispatcher/internal/fanout"
)

// batchTx is a transaction begun by a "begin" sent in one pgx.Batch with
// the transaction's first statement, so that beginning it costs no round
// trip of its own: pgx's own transaction (pgx.Conn.BeginTx) sends BEGIN and
// waits for its answer before anything else can be sent. Otherwise it is
// that transaction (one connection, ended by commit or rollback, each
// statement sent as pgx sends it), without savepoints, which nothing in the
// ingest transaction uses.
//
// It can also send its COMMIT with its last statement, in one round trip
// (CommitWithNextQuery): the transaction's last statement is River's insert
// of the jobs, whose answer the ingest transaction waits for anyway.
type batchTx struct {
	conn   *pgx.Conn
	closed bool

	// commitNext: the next Query is the last statement; its COMMIT goes
	// with it.
	commitNext bool
	// committing is that Query's rows while they are read; the COMMIT's
	// answer is read once they are closed.
	committing *committingRows
	// sentCommit: the COMMIT went with the last statement and ended the
	// transaction; commitErr is how it went, which Commit reports.
	sentCommit bool
	commitErr  error
}

var (
	_ pgx.Tx                        = (*batchTx)(nil)
	_ fanout.LastStatementCommitter = (*batchTx)(nil)
)

// CommitWithNextQuery makes the next Query the transaction's last
// statement: the COMMIT is sent with it, in one round trip, and Commit then
// only reports how it went. Any other statement in between (Exec,
// SendBatch, …) cancels that, and the COMMIT goes alone as usual.
//
// Postgres runs that COMMIT whatever the client does with the statement's
// rows: if the statement fails, Postgres skips the COMMIT (the transaction
// is left aborted, and Rollback ends it); if it succeeds, the transaction
// is committed even should the caller fail afterwards while reading the
// answer, which it then reports as an error for something stored. For the
// ingest transaction that is a retried Publish answered as a duplicate.
func (tx *batchTx) CommitWithNextQuery() { tx.commitNext = true }

// errNoSavepoints: batchTx.Begin.
var errNoSavepoints = errors.New("ingest: the ingest transaction takes no savepoints")

// Begin would start a savepoint; the ingest transaction takes none.
func (tx *batchTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNoSavepoints }

// Commit commits as pgx's transaction does: a commit that Postgres answers
// with ROLLBACK (the transaction had failed) is ErrTxCommitRollback, and a
// connection left in a transaction by a failed commit is closed.
func (tx *batchTx) Commit(ctx context.Context) error {
	if tx.committing != nil {
		tx.committing.Close()
	}
	if tx.sentCommit {
		tx.sentCommit = false
		return tx.commitErr
	}
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
	if tx.committing != nil {
		tx.committing.Close()
	}
	tx.sentCommit = false
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
	tx.commitNext = false
	if tx.closed {
		return 0, pgx.ErrTxClosed
	}
	return tx.conn.CopyFrom(ctx, table, columns, src)
}

func (tx *batchTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx.commitNext = false
	return tx.conn.SendBatch(ctx, b)
}

// LargeObjects is not offered (nothing in the ingest transaction uses them).
func (tx *batchTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (tx *batchTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx.commitNext = false
	if tx.closed {
		return nil, pgx.ErrTxClosed
	}
	return tx.conn.Prepare(ctx, name, sql)
}

func (tx *batchTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx.commitNext = false
	if tx.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return tx.conn.Exec(ctx, sql, args...)
}

func (tx *batchTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if tx.closed {
		return nil, pgx.ErrTxClosed
	}
	if tx.commitNext {
		tx.commitNext = false
		return tx.queryAndCommit(ctx, sql, args...)
	}
	return tx.conn.Query(ctx, sql, args...)
}

// queryAndCommit sends sql and the COMMIT in one batch and returns sql's
// rows; the COMMIT's answer is read when they are closed (or at Commit).
func (tx *batchTx) queryAndCommit(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("commit")
	br := tx.conn.SendBatch(ctx, b)
	rows, err := br.Query()
	r := &committingRows{Rows: rows, tx: tx, br: br}
	tx.committing = r
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// committingRows are the rows of a statement sent with the COMMIT.
type committingRows struct {
	pgx.Rows
	tx     *batchTx
	br     pgx.BatchResults
	closed bool
}

// Close closes the rows and reads the COMMIT's answer. When the transaction
// has ended (the COMMIT ran, or answered ROLLBACK for a transaction that had
// failed), Commit reports how; when the statement failed, Postgres skipped
// the COMMIT, the transaction is aborted but open, and Rollback ends it.
func (r *committingRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.Rows != nil {
		r.Rows.Close()
	}
	tx := r.tx
	tx.committing = nil
	tag, err := r.br.Exec()
	closeErr := r.br.Close()
	if tx.conn.PgConn().TxStatus() != 'I' {
		return
	}
	tx.closed, tx.sentCommit = true, true
	switch {
	case err != nil:
		tx.commitErr = err
	case tag.String() == "ROLLBACK":
		tx.commitErr = pgx.ErrTxCommitRollback
	default:
		tx.commitErr = closeErr
	}
}

func (tx *batchTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx.commitNext = false
	if tx.closed {
		return errRow{pgx.ErrTxClosed}
	}
	return tx.conn.QueryRow(ctx, sql, args...)
}

// errRow is a row that only fails.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (tx *batchTx) Conn() *pgx.Conn { return tx.conn }
