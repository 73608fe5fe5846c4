package ingest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

func TestBatchTx(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db   *dbtest.DB
		conn *pgxpool.Conn
		tx   *batchTx
	}

	// setup begins a batchTx on a connection of its own, with a table to
	// write to.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		_, err := db.Pool.Exec(ctx, `CREATE TABLE tx_test (n int PRIMARY KEY)`)
		require.NoError(t, err)
		c, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(c.Release)
		b := &pgx.Batch{}
		b.Queue("begin")
		require.NoError(t, c.SendBatch(ctx, b).Close())
		return &testBundle{db: db, conn: c, tx: &batchTx{conn: c.Conn()}}
	}

	count := func(t *testing.T, b *testBundle) int {
		t.Helper()
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_test`).Scan(&n))
		return n
	}

	// insert runs the INSERT as a caller reading its rows would (River's
	// insert of jobs does).
	insert := func(t *testing.T, b *testBundle, n int) error {
		t.Helper()
		rows, err := b.tx.Query(ctx, `INSERT INTO tx_test VALUES ($1) RETURNING n`, n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var got int
			require.NoError(t, rows.Scan(&got))
			require.Equal(t, n, got)
		}
		rows.Close()
		return rows.Err()
	}

	t.Run("CommitsWithTheNextQuery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.tx.CommitWithNextQuery()
		require.NoError(t, insert(t, b, 1))
		require.Equal(t, byte('I'), b.conn.Conn().PgConn().TxStatus(), "the COMMIT went with the INSERT")
		require.Equal(t, 1, count(t, b), "committed: another connection sees the row")
		require.NoError(t, b.tx.Commit(ctx), "Commit reports how that COMMIT went")
		require.ErrorIs(t, b.tx.Rollback(ctx), pgx.ErrTxClosed, "nothing left to roll back")
		require.ErrorIs(t, b.tx.Commit(ctx), pgx.ErrTxClosed)
		_, err := b.tx.Exec(ctx, `SELECT 1`)
		require.ErrorIs(t, err, pgx.ErrTxClosed, "a statement after the last one is refused, not run outside the transaction")
	})

	t.Run("AFailedStatementLeavesTheTransactionToRollBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.tx.Exec(ctx, `INSERT INTO tx_test VALUES (2)`)
		require.NoError(t, err)
		b.tx.CommitWithNextQuery()
		require.Error(t, insert(t, b, 2), "a duplicate key: the INSERT fails and Postgres skips the COMMIT")
		require.NoError(t, b.tx.Rollback(ctx))
		require.Zero(t, count(t, b), "nothing of the transaction is stored")
		require.Equal(t, byte('I'), b.conn.Conn().PgConn().TxStatus(), "the connection is fit for reuse")
		var one int
		require.NoError(t, b.conn.QueryRow(ctx, `SELECT 1`).Scan(&one))
	})

	t.Run("ACommitWhoseTransactionFailedIsReported", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(ctx, `CREATE TABLE tx_parent (n int PRIMARY KEY); ALTER TABLE tx_test ADD CONSTRAINT parent FOREIGN KEY (n) REFERENCES tx_parent DEFERRABLE INITIALLY DEFERRED`)
		require.NoError(t, err)
		b.tx.CommitWithNextQuery()
		require.NoError(t, insert(t, b, 3), "the INSERT succeeds; its foreign key is checked at COMMIT")
		require.Error(t, b.tx.Commit(ctx), "the COMMIT failed, and Commit says so")
		require.Zero(t, count(t, b))
		require.ErrorIs(t, b.tx.Rollback(ctx), pgx.ErrTxClosed)
	})

	t.Run("AnotherStatementFirstCancelsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.tx.CommitWithNextQuery()
		_, err := b.tx.Exec(ctx, `INSERT INTO tx_test VALUES (4)`)
		require.NoError(t, err)
		require.NoError(t, insert(t, b, 5))
		require.Equal(t, byte('T'), b.conn.Conn().PgConn().TxStatus(), "still in the transaction")
		require.Zero(t, count(t, b), "nothing committed yet")
		require.NoError(t, b.tx.Commit(ctx))
		require.Equal(t, 2, count(t, b))
	})
}
