package endpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// RequestRetention is how long a CreateEndpoint request id is remembered:
// long enough for any client's retries, short enough that the table stays
// small. Afterwards the same request id creates anew.
const RequestRetention = 24 * time.Hour

// MaxRequestIDLen bounds CreateEndpointRequest.request_id.
const MaxRequestIDLen = 128

// SecretReplayWindow is how long after a create a replay of it (the same
// request id and parameters) shows the secret again, and then only if the
// request id is random (SecretReplayable). A client whose reply was lost
// retries within seconds or minutes; after that, a replay returns the
// endpoint without its secret, and RotateSecret issues a new one. The
// request id is remembered longer (RequestRetention) so that a late retry
// still creates nothing twice.
const SecretReplayWindow = 10 * time.Minute

// SecretReplayable reports whether a replay with requestID may show the
// secret: only a UUID of version 4 or 7, whose random bits make it as hard
// to guess as a bearer of it is trusted. A predictable id ("create-42",
// an order number) may sit in logs and proxies, and whoever reads it there
// must not be able to read the secret with it.
func SecretReplayable(requestID string) bool {
	if len(requestID) != 36 {
		return false // the canonical form only: no braces, no urn: prefix
	}
	id, err := uuid.Parse(requestID)
	return err == nil && (id.Version() == 4 || id.Version() == 7) && id.Variant() == uuid.RFC4122
}

// ErrRequestIDReused: a create's request id was already used, by the same
// owner within RequestRetention, with other parameters.
var ErrRequestIDReused = errors.New("request_id was already used with different parameters")

var (
	// errClaimed: another create holds (or held) the request id; replay it.
	errClaimed = errors.New("request id already claimed")
	// errClaimGone: the claim vanished between the two reads; claim again.
	errClaimGone = errors.New("request id claim gone")
)

// claimRequest records p's request id in tx, or returns errClaimed when a
// create with it is already committed. A concurrent create with the same
// request id blocks on the insert until this transaction ends. The owner's
// expired request ids go first, which is all the pruning they need.
func claimRequest(ctx context.Context, tx pgx.Tx, p CreateParams) error {
	if err := PruneRequestIDs(ctx, tx, p.OwnerID); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO webhook_endpoint_requests (owner_id, request_id, params_hash) VALUES ($1, $2, $3)
ON CONFLICT (owner_id, request_id) DO NOTHING`, p.OwnerID, p.RequestID, paramsHash(p))
	if err != nil {
		return fmt.Errorf("claim request id: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errClaimed
	}
	return nil
}

// PruneRequestIDs forgets the request ids older than RequestRetention: the
// owner's, or every owner's when ownerID is "". A create prunes its owner's
// (claimRequest); the retention job prunes the rest, for owners who stopped
// creating.
func PruneRequestIDs(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, ownerID string,
) error {
	sql, args := `DELETE FROM webhook_endpoint_requests WHERE created_at < now() - make_interval(secs => $1)`, []any{RequestRetention.Seconds()}
	if ownerID != "" {
		sql, args = sql+` AND owner_id = $2`, append(args, ownerID)
	}
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("prune endpoint request ids: %w", err)
	}
	return nil
}

// recordRequest ties the claimed request id to the endpoint created, with a
// fingerprint of the secret shown (nil for a v1a endpoint: no secret).
func recordRequest(ctx context.Context, tx pgx.Tx, p CreateParams, id uuid.UUID, secret string) error {
	var secretHash []byte
	if secret != "" {
		key, err := webhook.ParseSecret(secret)
		if err != nil {
			return fmt.Errorf("record request id: %w", err)
		}
		secretHash = keyHash(key)
		clear(key)
	}
	_, err := tx.Exec(ctx, `UPDATE webhook_endpoint_requests SET endpoint_id = $3, secret_hash = $4 WHERE owner_id = $1 AND request_id = $2`,
		p.OwnerID, p.RequestID, id, secretHash)
	if err != nil {
		return fmt.Errorf("record request id: %w", err)
	}
	return nil
}

// replay answers a create whose request id is taken: the endpoint it made,
// and the secret it showed while that is still the current one, if the
// request id is random and the create is recent (SecretReplayWindow).
func (s *Store) replay(ctx context.Context, p CreateParams) (Created, error) {
	var (
		hash, secretHash []byte
		id               *uuid.UUID
		recent           bool
	)
	err := s.pool.QueryRow(ctx, `
SELECT params_hash, secret_hash, endpoint_id, created_at >= now() - make_interval(secs => $4)
  FROM webhook_endpoint_requests
 WHERE owner_id = $1 AND request_id = $2 AND created_at >= now() - $3::interval`,
		p.OwnerID, p.RequestID, RequestRetention.String(), SecretReplayWindow.Seconds()).Scan(&hash, &secretHash, &id, &recent)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && id == nil {
		return Created{}, errClaimGone
	}
	if err != nil {
		return Created{}, fmt.Errorf("replay create: %w", err)
	}
	if !bytes.Equal(hash, paramsHash(p)) {
		return Created{}, ErrRequestIDReused
	}
	e, err := s.Get(ctx, p.OwnerID, *id)
	if errors.Is(err, ErrNotFound) {
		return Created{}, errClaimGone
	}
	if err != nil {
		return Created{}, fmt.Errorf("replay create: %w", err)
	}
	c := Created{Endpoint: e, Replayed: true}
	if secretHash == nil || !recent || !SecretReplayable(p.RequestID) {
		return c, nil
	}
	var sealed []byte
	if err := s.pool.QueryRow(ctx, `SELECT secret_enc FROM webhook_endpoints WHERE id = $1 AND owner_id = $2`, *id, p.OwnerID).Scan(&sealed); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Created{}, errClaimGone
		}
		return Created{}, fmt.Errorf("replay create: %w", err)
	}
	keys, err := OpenKeys(s.keyring, *id, seal.SigningKeys{Current: sealed}, time.Now())
	if err != nil {
		return Created{}, fmt.Errorf("replay create: %w", err)
	}
	key := keys[0]
	defer clear(key)
	if bytes.Equal(keyHash(key), secretHash) {
		c.Secret = webhook.FormatSecret(key)
	}
	return c, nil
}

// paramsHash fingerprints what a create asks for, so a request id reused
// for another endpoint is told apart from a retry. Header values take part
// only hashed, like everything else.
func paramsHash(p CreateParams) []byte {
	scheme := p.SigningScheme
	if scheme == "" {
		scheme = SchemeV1
	}
	b, _ := json.Marshal(struct { //nolint:errchkjson // strings, a slice and a map of strings always marshal
		URL         string            `json:"url"`
		Description string            `json:"description"`
		EventTypes  []string          `json:"event_types"`
		EmbedID     string            `json:"embed_id"`
		Headers     map[string]string `json:"headers"`
		Scheme      string            `json:"scheme"`
		PerSecond   int32             `json:"max_per_second"`
		Ordered     bool              `json:"ordered"`
		// omitempty: a create without them hashes as it did before they
		// existed.
		Name        string            `json:"name,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		MaxInFlight int32             `json:"max_in_flight,omitempty"`
		Filter      string            `json:"filter,omitempty"`
	}{p.URL, p.Description, p.EventTypes, p.EmbedID, p.Headers, scheme, p.MaxPerSecond, p.Ordered, p.Name, p.Labels, inFlightKey(p.MaxInFlight), string(p.Filter)})
	sum := sha256.Sum256(b)
	return sum[:]
}

// inFlightKey is max_in_flight as it takes part in the hash: 0 and 1 are
// the same request (the default), and hash as before the field existed.
func inFlightKey(n int32) int32 {
	if n <= 1 {
		return 0
	}
	return n
}

func keyHash(key []byte) []byte {
	sum := sha256.Sum256(key)
	return sum[:]
}
