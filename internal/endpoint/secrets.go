package endpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// What is sealed is the HMAC key itself (the 32 decoded bytes), not its
// "whsec_…" text: OpenKeys hands the delivery worker ready-to-use keys, and no
// encoding of the secret sits anywhere at rest.
//
// The associated data binds the sealed key to its endpoint, scheme and
// column (sealing.go), so a sealed secret copied onto another endpoint's
// row, or into the other key column, fails to open instead of signing.

// newSecret generates a secret and seals its key for endpoint id. It returns
// the text shown to the owner once and the sealed value to store.
func newSecret(kr *seal.Keyring, id uuid.UUID) (secret string, sealed []byte, err error) {
	secret, err = webhook.GenerateSecret()
	if err != nil {
		return "", nil, fmt.Errorf("generate secret: %w", err)
	}
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		return "", nil, fmt.Errorf("decode generated secret: %w", err)
	}
	defer clear(key)
	sealed, err = sealFor(kr, key, keyBinding(id, SchemeV1, ColumnSecret))
	if err != nil {
		return "", nil, fmt.Errorf("seal secret: %w", err)
	}
	return secret, sealed, nil
}

// OpenKeys unseals the keys endpoint id signs with at now, whatever its
// scheme: the current key first, then the previous one while its rotation
// grace period lasts (PreviousExpiresAt after now). The delivery worker reads
// k in its lease query and calls this (through OpenSigningKeys), so the hot
// path costs no extra query.
//
// Errors name the endpoint and the seal failure (unknown key id, failed
// authentication), never any key material.
func OpenKeys(kr *seal.Keyring, id uuid.UUID, k seal.SigningKeys, now time.Time) ([][]byte, error) {
	cur, err := openFor(kr, k.Current, keyBinding(id, k.Scheme, ColumnSecret))
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: open current secret: %w", id, err)
	}
	keys := [][]byte{cur}
	if k.Previous != nil && k.PreviousExpiresAt != nil && now.Before(*k.PreviousExpiresAt) {
		prev, err := openFor(kr, k.Previous, keyBinding(id, k.Scheme, ColumnPreviousSecret))
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: open previous secret: %w", id, err)
		}
		keys = append(keys, prev)
	}
	return keys, nil
}

// KeyOpener opens endpoints' sealed secrets for signing, with the keyring it
// was built around: what the delivery worker needs of this package, and all.
type KeyOpener struct{ kr *seal.Keyring }

// NewKeyOpener returns a KeyOpener using kr.
func NewKeyOpener(kr *seal.Keyring) KeyOpener { return KeyOpener{kr: kr} }

// OpenKeys is the package's OpenKeys with the opener's keyring.
func (o KeyOpener) OpenKeys(id uuid.UUID, k seal.SigningKeys, now time.Time) ([][]byte, error) {
	return OpenKeys(o.kr, id, k, now)
}

// resealBatch bounds the rows locked by one Reseal transaction, so a
// re-seal of a large table never holds many row locks (and so never blocks
// many delivery leases) at once.
const resealBatch = 100

// Reseal re-seals, under kr's primary key, every stored secret (and sealed
// custom header set) that is not already sealed with it (seal.Keyring.NeedsReseal), for a master-key
// rotation: after it returns without error, the old master key can be removed
// from the keyring. It works in batches of rows, one transaction per batch
// with the rows locked, so it can run while the dispatcher serves; it is
// idempotent, and an interrupted run is finished by running it again.
// Previous secrets whose grace period has ended are dropped rather than
// re-sealed. It returns how many endpoints it rewrote.
func Reseal(ctx context.Context, pool *pgxpool.Pool, kr *seal.Keyring) (int, error) {
	if kr == nil {
		return 0, seal.ErrNoKeyring
	}
	var (
		n     int
		after uuid.UUID // uuid.Nil sorts before every v7 id
	)
	for {
		var (
			last  uuid.UUID
			count int
		)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
SELECT id, signing_scheme, secret_enc, previous_secret_enc, previous_secret_expires_at <= now(), headers_enc
  FROM webhook_endpoints
 WHERE id > $1
 ORDER BY id
 LIMIT $2
   FOR UPDATE`, after, resealBatch)
			if err != nil {
				return fmt.Errorf("read batch: %w", err)
			}
			type row struct {
				id              uuid.UUID
				scheme          string
				cur, prev       []byte
				previousExpired *bool
				headers         []byte
			}
			batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				return x, r.Scan(&x.id, &x.scheme, &x.cur, &x.prev, &x.previousExpired, &x.headers)
			})
			if err != nil {
				return fmt.Errorf("read batch: %w", err)
			}
			count = len(batch)
			for _, r := range batch {
				last = r.id
				dropPrev := r.prev != nil && (r.previousExpired == nil || *r.previousExpired)
				needCur := kr.NeedsReseal(r.cur)
				needPrev := r.prev != nil && !dropPrev && kr.NeedsReseal(r.prev)
				needHeaders := r.headers != nil && kr.NeedsReseal(r.headers)
				if !needCur && !needPrev && !dropPrev && !needHeaders {
					continue
				}
				newCur, err := reseal(kr, keyBinding(r.id, r.scheme, ColumnSecret), r.cur, needCur)
				if err != nil {
					return fmt.Errorf("endpoint %s: current secret: %w", r.id, err)
				}
				var newPrev []byte
				if !dropPrev {
					if newPrev, err = reseal(kr, keyBinding(r.id, r.scheme, ColumnPreviousSecret), r.prev, needPrev); err != nil {
						return fmt.Errorf("endpoint %s: previous secret: %w", r.id, err)
					}
				}
				newHeaders, err := reseal(kr, headersBinding(r.id), r.headers, needHeaders)
				if err != nil {
					return fmt.Errorf("endpoint %s: custom headers: %w", r.id, err)
				}
				// updated_at is left alone: re-sealing changes nothing the
				// owner can see.
				_, err = tx.Exec(ctx, `
UPDATE webhook_endpoints
   SET secret_enc = $2,
       previous_secret_enc = $3,
       previous_secret_expires_at = CASE WHEN $3::bytea IS NULL THEN NULL ELSE previous_secret_expires_at END,
       headers_enc = $4
 WHERE id = $1`, r.id, newCur, newPrev, newHeaders)
				if err != nil {
					return fmt.Errorf("endpoint %s: write: %w", r.id, err)
				}
				n++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("reseal secrets: %w", err)
		}
		if count < resealBatch {
			return n, nil
		}
		after = last
	}
}

// reseal opens sealed (bound to b, in either format) and seals it again
// for b under the primary key in the current format when need is set;
// otherwise it returns sealed unchanged.
func reseal(kr *seal.Keyring, b binding, sealed []byte, need bool) ([]byte, error) {
	if sealed == nil || !need {
		return sealed, nil
	}
	key, err := openFor(kr, sealed, b)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer clear(key)
	out, err := sealFor(kr, key, b)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return out, nil
}

// errNoKeyring guards the service against a nil keyring at construction.
var errNoKeyring = errors.New("endpoint: a seal.Keyring is required")
