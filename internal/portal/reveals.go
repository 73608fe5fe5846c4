package portal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

// RevealTTL is how long a secret the portal made waits, sealed, for the
// page that shows it once: the redirect after the form follows at once,
// so minutes are plenty. Past it the secret is erased unseen, and the page
// says to rotate.
const RevealTTL = 5 * time.Minute

// Kinds of reveal.
const (
	revealCreated = "created"
	revealRotated = "rotated"
)

// reveal is a secret made by a form of the portal, as its page reads it.
type reveal struct {
	Kind              string
	EndpointID        uuid.UUID
	Secret            string // "" once shown or expired, or for v1a
	PublicKey         string
	PreviousExpiresAt *time.Time
	// Shown: the page has shown it before (a reload, Back): it says so and
	// shows nothing. Expired: never shown, and erased (RevealTTL).
	Shown, Expired bool
}

// reveals stores the secrets the portal shows once (portal_reveals).
type reveals struct {
	sessions *sessions
	keyring  *seal.Keyring
}

// revealBinding is the associated data a reveal's secret is sealed with: a
// sealed secret opens only as the reveal of this session's request.
func revealBinding(sessionID int64, requestID uuid.UUID) []byte {
	return []byte("dispatcher portal reveal\x00" + strconv.FormatInt(sessionID, 10) + "\x00" + requestID.String())
}

// errRevealTaken: the request id already has its reveal: the form was
// submitted before, and its action is not repeated.
var errRevealTaken = errors.New("request already done")

// sealSecret seals a secret for a reveal; nil for none.
func (rv *reveals) sealSecret(sessionID int64, requestID uuid.UUID, secret string) ([]byte, error) {
	if secret == "" {
		return nil, nil
	}
	if rv.keyring == nil {
		return nil, errors.New("portal: no keyring to hold the new secret")
	}
	sealed, err := rv.keyring.Seal([]byte(secret), revealBinding(sessionID, requestID))
	if err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return sealed, nil
}

// put records the reveal of a create: once; a second put of the same
// request id (the create replayed) keeps the first.
func (rv *reveals) put(ctx context.Context, sessionID int64, requestID uuid.UUID, kind string, r reveal) error {
	sealed, err := rv.sealSecret(sessionID, requestID, r.Secret)
	if err != nil {
		return err
	}
	if err := rv.sweep(ctx); err != nil {
		return err
	}
	_, err = rv.sessions.pool.Exec(ctx, `INSERT INTO portal_reveals (session_id, request_id, kind, endpoint_id, secret_enc, public_key, previous_expires_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (session_id, request_id) DO NOTHING`,
		sessionID, requestID, kind, r.EndpointID, sealed, r.PublicKey, r.PreviousExpiresAt, rv.sessions.now())
	if err != nil {
		return fmt.Errorf("store reveal: %w", err)
	}
	return nil
}

// once runs do (a rotation) at most once for a request id: it claims the
// id in a transaction that stays open while do runs, so a second submit
// of the same form waits for the first and then finds it done
// (errRevealTaken). do's result is stored as the reveal in the same
// transaction; an error of do leaves no claim behind, so the form can be
// sent again.
func (rv *reveals) once(ctx context.Context, sessionID int64, requestID uuid.UUID, kind string, endpointID uuid.UUID, do func() (reveal, error)) error {
	if err := rv.sweep(ctx); err != nil {
		return err
	}
	tx, err := rv.sessions.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("claim request: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, `INSERT INTO portal_reveals (session_id, request_id, kind, endpoint_id, created_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_id, request_id) DO NOTHING`, sessionID, requestID, kind, endpointID, rv.sessions.now())
	if err != nil {
		return fmt.Errorf("claim request: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errRevealTaken
	}
	r, err := do()
	if err != nil {
		return err
	}
	sealed, err := rv.sealSecret(sessionID, requestID, r.Secret)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE portal_reveals SET secret_enc = $3, public_key = $4, previous_expires_at = $5 WHERE session_id = $1 AND request_id = $2`,
		sessionID, requestID, sealed, r.PublicKey, r.PreviousExpiresAt); err != nil {
		return fmt.Errorf("store reveal: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("store reveal: %w", err)
	}
	return nil
}

// take reads a reveal and erases its secret in the same statement: the
// first read shows the secret, every later one says it was shown.
func (rv *reveals) take(ctx context.Context, sessionID int64, requestID uuid.UUID) (*reveal, error) {
	var (
		r       reveal
		sealed  []byte
		shownAt *time.Time
		created time.Time
	)
	now := rv.sessions.now()
	err := rv.sessions.pool.QueryRow(ctx, `
UPDATE portal_reveals r SET secret_enc = NULL, shown_at = coalesce(r.shown_at, $3)
  FROM (SELECT session_id, request_id, secret_enc, shown_at FROM portal_reveals
         WHERE session_id = $1 AND request_id = $2 FOR UPDATE) old
 WHERE r.session_id = old.session_id AND r.request_id = old.request_id
RETURNING r.kind, r.endpoint_id, old.secret_enc, r.public_key, r.previous_expires_at, old.shown_at, r.created_at`,
		sessionID, requestID, now).Scan(&r.Kind, &r.EndpointID, &sealed, &r.PublicKey, &r.PreviousExpiresAt, &shownAt, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("read reveal: %w", err)
	}
	switch {
	case shownAt != nil:
		r.Shown = true
	case now.Sub(created) > RevealTTL:
		r.Expired = true
	case sealed != nil:
		plain, err := rv.keyring.Open(sealed, revealBinding(sessionID, requestID))
		if err != nil {
			return nil, fmt.Errorf("open reveal: %w", err)
		}
		r.Secret = string(plain)
		clear(plain)
	}
	return &r, nil
}

// sweep erases the secrets that waited longer than RevealTTL unseen.
func (rv *reveals) sweep(ctx context.Context) error {
	_, err := rv.sessions.pool.Exec(ctx, `UPDATE portal_reveals SET secret_enc = NULL WHERE secret_enc IS NOT NULL AND created_at < $1`,
		rv.sessions.now().Add(-RevealTTL))
	if err != nil {
		return fmt.Errorf("sweep reveals: %w", err)
	}
	return nil
}
