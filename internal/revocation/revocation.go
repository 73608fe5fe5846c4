// Package revocation keeps the sessions ended before their expiry, in
// Postgres, so that every replica refuses a session one of them logged out:
// it implements auth.Revocations.
package revocation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the session_revocations table.
type Store struct{ pool *pgxpool.Pool }

// New returns the Store of the pool's schema.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Revoke records that session id ended; it is remembered until expires (the
// session's own expiry), and rows past theirs are pruned on the way.
func (s *Store) Revoke(ctx context.Context, id string, expires time.Time) error {
	_, err := s.pool.Exec(ctx, `
WITH pruned AS (DELETE FROM session_revocations WHERE expires_at < now())
INSERT INTO session_revocations (session_id, expires_at) VALUES ($1, $2)
ON CONFLICT (session_id) DO NOTHING`, id, expires)
	if err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// Revoked reports whether session id was revoked.
func (s *Store) Revoked(ctx context.Context, id string) (bool, error) {
	var revoked bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_revocations WHERE session_id = $1)`, id).Scan(&revoked); err != nil {
		return false, fmt.Errorf("check session revocation: %w", err)
	}
	return revoked, nil
}
