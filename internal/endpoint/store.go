package endpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

var (
	// ErrNotFound: no endpoint with that id for that owner. It is also what
	// another owner's endpoint looks like.
	ErrNotFound = errors.New("endpoint not found")
	// ErrDeliveryNotFound: no delivery with that id to an endpoint of that
	// owner, which is also what another owner's delivery looks like.
	ErrDeliveryNotFound = errors.New("delivery not found")
	// ErrDisabled: the operation needs an enabled endpoint.
	ErrDisabled = errors.New("endpoint is disabled")
	// ErrTooManyEndpoints: the owner is at the per-owner cap.
	ErrTooManyEndpoints = errors.New("too many endpoints for this owner")
)

// DisabledByOwner is the disabled_reason recorded when the owner disables an
// endpoint with an update.
const DisabledByOwner = "disabled by owner"

// Endpoint is one stored receiver, without its secrets.
type Endpoint struct {
	ID             uuid.UUID
	OwnerID        string
	URL            string
	Description    string
	EventTypes     []string
	EmbedID        string // "" when standalone
	Enabled        bool
	DisabledReason string
	FailingSince   *time.Time
	// NextProbeAt: while failing, when the next recovery probe is due
	// (internal/delivery's probe.go).
	NextProbeAt             *time.Time
	PreviousSecretExpiresAt *time.Time
	// SigningScheme is SchemeV1 (shared secret) or SchemeV1a (key pair).
	SigningScheme string
	// PublicKey is a v1a endpoint's public key ("whpk_…"), and
	// PreviousPublicKey the previous one while PreviousSecretExpiresAt is
	// ahead; both "" for v1.
	PublicKey         string
	PreviousPublicKey string
	// HeaderNames are the names of the custom headers sent on every
	// delivery, in a stable order; their values are sealed and never read
	// back here.
	HeaderNames []string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// PausedUntil is set while the receiver has paused deliveries (it
	// answered Retry-After, or 429 several times in a row); PauseReason
	// says which. Both are empty once the pause is over.
	PausedUntil *time.Time
	PauseReason string
	// MaxPerSecond > 0 limits the endpoint to that many requests a second.
	MaxPerSecond int32
	// MaxInFlight is how many deliveries may be in flight to the endpoint at
	// once (1 to MaxInFlightLimit; 1 for an ordered endpoint).
	MaxInFlight int32
	// Ordered endpoints get their deliveries in ingest order.
	Ordered bool
	// Name is for people, not unique; Labels are the owner's key/value
	// pairs (never nil).
	Name   string
	Labels map[string]string
	// Filter is the endpoint's filter in canonical JSON (internal/filter),
	// nil for none.
	Filter []byte
}

// Store reads and writes webhook_endpoints. Every method is scoped to an
// owner id. It assumes the pool's search_path points at the dispatcher schema.
type Store struct {
	keyring *seal.Keyring
	pool    *pgxpool.Pool
}

// NewStore returns a Store; kr seals the secrets Create and RotateSecret make.
func NewStore(pool *pgxpool.Pool, kr *seal.Keyring) *Store {
	return &Store{keyring: kr, pool: pool}
}

const endpointColumns = `id, owner_id, url, description, event_types, coalesce(embed_id, ''), enabled,
       coalesce(disabled_reason, ''), failing_since, previous_secret_expires_at, header_names,
       signing_scheme, coalesce(public_key, ''),
       CASE WHEN previous_secret_expires_at > now() THEN coalesce(previous_public_key, '') ELSE '' END,
       created_at, updated_at,
       CASE WHEN paused_until > now() THEN paused_until END,
       CASE WHEN paused_until > now() THEN coalesce(pause_reason, '') ELSE '' END,
       coalesce(max_per_second, 0), ordered, name, labels, max_in_flight,
       CASE WHEN failing_since IS NOT NULL AND enabled THEN probe_at END, filter`

func scanEndpoint(row pgx.Row) (*Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.OwnerID, &e.URL, &e.Description, &e.EventTypes, &e.EmbedID, &e.Enabled,
		&e.DisabledReason, &e.FailingSince, &e.PreviousSecretExpiresAt, &e.HeaderNames,
		&e.SigningScheme, &e.PublicKey, &e.PreviousPublicKey, &e.CreatedAt, &e.UpdatedAt,
		&e.PausedUntil, &e.PauseReason, &e.MaxPerSecond, &e.Ordered, &e.Name, &e.Labels, &e.MaxInFlight,
		&e.NextProbeAt, &e.Filter)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// ListCursor is the position after the last endpoint of a page.
type ListCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// List returns up to limit of owner's endpoints after cursor (nil for the
// first page), in creation order with the id breaking ties, so pages are
// stable while endpoints are added or removed.
// labels, when not empty, keeps only endpoints carrying each of them with
// that value.
func (s *Store) List(ctx context.Context, owner string, labels map[string]string, after *ListCursor, limit int) ([]*Endpoint, error) {
	var (
		afterTime *time.Time
		afterID   uuid.UUID
	)
	if after != nil {
		afterTime, afterID = &after.CreatedAt, after.ID
	}
	rows, err := s.pool.Query(ctx, `
SELECT `+endpointColumns+`
  FROM webhook_endpoints
 WHERE owner_id = $1
   AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3))
   AND labels @> $5::jsonb
 ORDER BY created_at, id
 LIMIT $4`, owner, afterTime, afterID, limit, labelsOrEmpty(labels))
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Endpoint, error) { return scanEndpoint(r) })
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	return out, nil
}

// Get returns owner's endpoint id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, owner string, id uuid.UUID) (*Endpoint, error) {
	e, err := scanEndpoint(s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1 AND owner_id = $2`, id, owner))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("get endpoint: %w", err)
	}
	return e, err
}

// CreateParams are a new endpoint's fields, already validated.
type CreateParams struct {
	OwnerID     string
	URL         string
	Description string
	EventTypes  []string
	EmbedID     string
	// Headers are the custom headers as given (name → value); Service.Create
	// validates them, and the store keeps them in a stable order.
	Headers map[string]string
	// SigningScheme is SchemeV1 ("" too) or SchemeV1a.
	SigningScheme string
	// MaxPerSecond: 0 for no limit.
	MaxPerSecond int32
	// MaxInFlight: 0 for the default, 1.
	MaxInFlight int32
	Ordered     bool
	// RequestID, when set, makes the create idempotent (CreateOnce).
	RequestID string
	Name      string
	// Labels: nil for none.
	Labels map[string]string
	// Filter: the filter in canonical JSON (Service.Create checks it); nil
	// for none.
	Filter []byte
}

// Create stores a new enabled endpoint with a fresh secret and returns it with
// the secret's text, which is shown to the owner this once and never again.
// A v1a endpoint gets a fresh key pair instead: its secret text is "" and
// its public key is on the endpoint. maxPerOwner > 0 caps the owner's
// endpoints (ErrTooManyEndpoints).
func (s *Store) Create(ctx context.Context, p CreateParams, maxPerOwner int) (*Endpoint, string, error) {
	c, err := s.CreateOnce(ctx, p, maxPerOwner)
	return c.Endpoint, c.Secret, err
}

// Created is what a create returns. Replayed: the create's request id had
// already created Endpoint (within RequestRetention), so nothing new was
// made; Secret is then the secret that create showed if it is still the
// endpoint's current one, and "" otherwise (rotated since, or a v1a
// endpoint).
type Created struct {
	Endpoint *Endpoint
	Secret   string
	Replayed bool
}

// CreateOnce is Create, idempotent on p.RequestID when it is set: the first
// create with a request id makes the endpoint; a retry with the same owner,
// request id and parameters, concurrent or later (up to RequestRetention),
// returns that endpoint (Replayed) instead of a twin. The same request id
// with other parameters is ErrRequestIDReused.
func (s *Store) CreateOnce(ctx context.Context, p CreateParams, maxPerOwner int) (Created, error) {
	// A claimed request id whose endpoint vanished before it could be read
	// (deleted a moment later, or expired) is claimed afresh: bounded.
	for range 3 {
		c, err := s.createOnce(ctx, p, maxPerOwner)
		if errors.Is(err, errClaimed) {
			c, err = s.replay(ctx, p)
		}
		if !errors.Is(err, errClaimGone) {
			return c, err
		}
	}
	return Created{}, fmt.Errorf("create endpoint: request id keeps changing hands: %w", errClaimGone)
}

func (s *Store) createOnce(ctx context.Context, p CreateParams, maxPerOwner int) (Created, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Created{}, fmt.Errorf("create endpoint: new id: %w", err)
	}
	scheme, secret, publicKey := SchemeV1, "", ""
	var sealed []byte
	if p.SigningScheme == SchemeV1a {
		scheme = SchemeV1a
		publicKey, sealed, err = newKeyPair(s.keyring, id)
	} else {
		secret, sealed, err = newSecret(s.keyring, id)
	}
	if err != nil {
		return Created{}, fmt.Errorf("create endpoint: %w", err)
	}
	hs := sortedHeaders(p.Headers)
	sealedHeaders, err := sealHeaders(s.keyring, id, hs)
	if err != nil {
		return Created{}, fmt.Errorf("create endpoint: %w", err)
	}
	var e *Endpoint
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if p.RequestID != "" {
			// Before the owner's lock: a concurrent create with the same
			// request id waits here for this one to commit, then replays.
			if err := claimRequest(ctx, tx, p); err != nil {
				return err
			}
		}
		if maxPerOwner > 0 {
			// Serialise creates per owner so that two concurrent creates
			// cannot both see room under the cap. The lock is transaction-
			// scoped and keyed by owner, so other owners never wait.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('dispatcher.endpoint.create.' || $1, 0))`, p.OwnerID); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE owner_id = $1`, p.OwnerID).Scan(&n); err != nil {
				return err
			}
			if n >= maxPerOwner {
				return ErrTooManyEndpoints
			}
		}
		var err error
		e, err = scanEndpoint(tx.QueryRow(ctx, `
INSERT INTO webhook_endpoints (id, owner_id, url, description, event_types, secret_enc, embed_id, header_names, headers_enc,
                               signing_scheme, public_key, max_per_second, ordered, name, labels, max_in_flight, filter)
VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), $8, $9, $10, nullif($11, ''), nullif($12, 0), $13, $14, $15, greatest($16::integer, 1), nullif($17::text, ''))
RETURNING `+endpointColumns, id, p.OwnerID, p.URL, p.Description, p.EventTypes, sealed, p.EmbedID,
			headerNames(hs), sealedHeaders, scheme, publicKey, p.MaxPerSecond, p.Ordered, p.Name, labelsOrEmpty(p.Labels), p.MaxInFlight, string(p.Filter)))
		if err != nil || p.RequestID == "" {
			return err
		}
		return recordRequest(ctx, tx, p, id, secret)
	})
	if errors.Is(err, errClaimed) || errors.Is(err, ErrTooManyEndpoints) {
		return Created{}, err
	}
	if err != nil {
		return Created{}, fmt.Errorf("create endpoint: %w", err)
	}
	return Created{Endpoint: e, Secret: secret}, nil
}

// UpdateParams names the fields to change: a nil field is left alone.
type UpdateParams struct {
	URL         *string
	Description *string
	EventTypes  []string // nil: unchanged
	EmbedID     *string  // "" clears it
	Enabled     *bool
	Headers     []Header // nil: unchanged; empty: none
	// MaxPerSecond: 0 removes the limit.
	MaxPerSecond *int32
	// MaxInFlight: 1 to MaxInFlightLimit.
	MaxInFlight *int32
	Ordered     *bool
	Name        *string
	Labels      map[string]string // nil: unchanged; empty: none
	// Filter: the new filter in canonical JSON; "" removes it.
	Filter *string

	// check, when set, is called in the update's transaction with the
	// endpoint's event types and filter as stored ("" for none), locked
	// against concurrent updates; an error from it is the update's.
	check func(globs []string, filter string) error
}

// Update changes the given fields of owner's endpoint id. Enabling clears the
// failure state (failing_since, disabled_reason), so a re-enabled endpoint
// starts afresh; disabling records DisabledByOwner unless the endpoint was
// already disabled for another reason, which is kept.
func (s *Store) Update(ctx context.Context, owner string, id uuid.UUID, p UpdateParams) (*Endpoint, error) {
	var enable, disable bool
	if p.Enabled != nil {
		enable, disable = *p.Enabled, !*p.Enabled
	}
	sealedHeaders, err := sealHeaders(s.keyring, id, p.Headers)
	if err != nil {
		return nil, fmt.Errorf("update endpoint: %w", err)
	}
	update := func(q querier) (*Endpoint, error) {
		return s.update(ctx, q, owner, id, p, enable, disable, sealedHeaders)
	}
	var e *Endpoint
	if p.check == nil {
		e, err = update(s.pool)
	} else {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			globs, stored, err := currentSubscription(ctx, tx, owner, id)
			if err != nil {
				return err
			}
			if err := p.check(globs, deref(stored)); err != nil {
				return err
			}
			e, err = update(tx)
			return err
		})
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.ConstraintName == orderedInFlightConstraint {
		// The change would leave an ordered endpoint with more than one
		// delivery in flight: name the field the caller changed.
		field := FieldMaxInFlight
		if p.MaxInFlight == nil {
			field = FieldOrdered
		}
		return nil, &ValidationError{Violations: []FieldViolation{{Field: field, Description: errOrderedInFlight}}}
	}
	if _, ok := errors.AsType[*ValidationError](err); ok {
		return nil, err
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("update endpoint: %w", err)
	}
	return e, err
}

// update runs Update's statement on q.
func (s *Store) update(ctx context.Context, q querier, owner string, id uuid.UUID, p UpdateParams, enable, disable bool, sealedHeaders []byte) (*Endpoint, error) {
	// One statement with flags rather than SQL built per mask: every path is
	// the same plan, and a field not in the mask can never be touched by it.
	return scanEndpoint(q.QueryRow(ctx, `
UPDATE webhook_endpoints
   SET url             = CASE WHEN $3::boolean THEN $4::text ELSE url END,
       description     = CASE WHEN $5::boolean THEN $6::text ELSE description END,
       event_types     = CASE WHEN $7::boolean THEN $8::text[] ELSE event_types END,
       embed_id        = CASE WHEN $9::boolean THEN nullif($10::text, '') ELSE embed_id END,
       enabled         = CASE WHEN $11::boolean THEN true WHEN $12::boolean THEN false ELSE enabled END,
       failing_since   = CASE WHEN $11 THEN NULL ELSE failing_since END,
       -- Clearing the failing state releases the deliveries it held
       -- (internal/delivery's probe.go); disabling stops the probing.
       probe_at        = CASE WHEN $11 AND failing_since IS NOT NULL THEN now() WHEN $12 THEN NULL ELSE probe_at END,
       probes          = CASE WHEN $11 THEN 0 ELSE probes END,
       disabled_reason = CASE WHEN $11 THEN NULL
                              WHEN $12 THEN CASE WHEN enabled THEN $13::text ELSE coalesce(disabled_reason, $13::text) END
                              ELSE disabled_reason END,
       header_names    = CASE WHEN $14::boolean THEN $15::text[] ELSE header_names END,
       headers_enc     = CASE WHEN $14::boolean THEN $16::bytea ELSE headers_enc END,
       max_per_second  = CASE WHEN $17::boolean THEN nullif($18::integer, 0) ELSE max_per_second END,
       ordered         = CASE WHEN $19::boolean THEN $20::boolean ELSE ordered END,
       name            = CASE WHEN $21::boolean THEN $22::text ELSE name END,
       labels          = CASE WHEN $23::boolean THEN $24::jsonb ELSE labels END,
       max_in_flight   = CASE WHEN $25::boolean THEN $26::integer ELSE max_in_flight END,
       filter          = CASE WHEN $27::boolean THEN nullif($28::text, '') ELSE filter END,
       updated_at      = now()
 WHERE id = $1 AND owner_id = $2
RETURNING `+endpointColumns,
		id, owner,
		p.URL != nil, deref(p.URL),
		p.Description != nil, deref(p.Description),
		p.EventTypes != nil, p.EventTypes,
		p.EmbedID != nil, deref(p.EmbedID),
		enable, disable, DisabledByOwner,
		p.Headers != nil, headerNames(p.Headers), sealedHeaders,
		p.MaxPerSecond != nil, derefOr(p.MaxPerSecond, 0),
		p.Ordered != nil, derefOr(p.Ordered, false),
		p.Name != nil, deref(p.Name),
		p.Labels != nil, labelsOrEmpty(p.Labels),
		p.MaxInFlight != nil, derefOr(p.MaxInFlight, 1),
		p.Filter != nil, deref(p.Filter)))
}

// orderedInFlightConstraint refuses an ordered endpoint with max_in_flight
// above 1 (migration 015), whichever of the two an update changes.
const orderedInFlightConstraint = "webhook_endpoints_ordered_one_in_flight"

func derefOr[T any](p *T, zero T) T {
	if p == nil {
		return zero
	}
	return *p
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Delete removes owner's endpoint id. Its queued deliveries find it gone when
// they run and end cancelled.
func (s *Store) Delete(ctx context.Context, owner string, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1 AND owner_id = $2`, id, owner)
	if err != nil {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Rotation is what RotateSecret made.
type Rotation struct {
	// Secret is a v1 endpoint's new secret (shown this once); "" for v1a.
	Secret string
	// PublicKey is a v1a endpoint's new public key; "" for v1.
	PublicKey string
	// PreviousExpiresAt is when the previous secret or key stops signing
	// (nil: it already has).
	PreviousExpiresAt *time.Time
}

// RotateSecret gives owner's endpoint id a new secret, or for a v1a endpoint
// a new key pair. The current one becomes the previous one and keeps signing
// beside the new one until grace has passed; grace 0 drops it at once. Only
// one previous secret is kept: rotating again during a grace period ends the
// older one's grace.
func (s *Store) RotateSecret(ctx context.Context, owner string, id uuid.UUID, grace time.Duration) (*Rotation, error) {
	var r Rotation
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			scheme  string
			current []byte
		)
		err := tx.QueryRow(ctx, `SELECT signing_scheme, secret_enc FROM webhook_endpoints WHERE id = $1 AND owner_id = $2 FOR NO KEY UPDATE`,
			id, owner).Scan(&scheme, &current)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var sealed []byte
		if scheme == SchemeV1a {
			r.PublicKey, sealed, err = newKeyPair(s.keyring, id)
		} else {
			r.Secret, sealed, err = newSecret(s.keyring, id)
		}
		if err != nil {
			return err
		}
		// The current key becomes the previous one, sealed again for its new
		// column (a sealed key is bound to its column, sealing.go).
		var previous []byte
		if grace > 0 {
			if previous, err = moveSealed(s.keyring, current, keyBinding(id, scheme, ColumnSecret), keyBinding(id, scheme, ColumnPreviousSecret)); err != nil {
				return fmt.Errorf("current secret: %w", err)
			}
		}
		// The right-hand sides read the row as it was, so previous_public_key
		// receives the old public key.
		return tx.QueryRow(ctx, `
UPDATE webhook_endpoints
   SET previous_secret_enc        = CASE WHEN $4::bigint > 0 THEN $6::bytea END,
       previous_secret_expires_at = CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 microsecond' END,
       previous_public_key        = CASE WHEN $4::bigint > 0 THEN public_key END,
       secret_enc                 = $3,
       public_key                 = nullif($5, ''),
       updated_at                 = now()
 WHERE id = $1 AND owner_id = $2
RETURNING previous_secret_expires_at`, id, owner, sealed, grace.Microseconds(), r.PublicKey, previous).Scan(&r.PreviousExpiresAt)
	})
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("rotate secret: %w", err)
	}
	return &r, nil
}

// deliveryColumns are what a jobRow is scanned from (scanJobRow), over
// river_job j and events e.
const deliveryColumns = `j.id, coalesce(j.args->>'endpoint_id', ''), coalesce(j.args->>'event_id', ''), coalesce(e.type, ''),
       j.state::text, j.attempt, j.max_attempts,
       coalesce(j.errors[cardinality(j.errors)]->>'error', ''),
       j.created_at, j.attempted_at, j.scheduled_at, j.finalized_at, j.metadata->'output',
       jsonb_build_object('probes', j.metadata->'probes', 'probe_attempts', j.metadata->'probe_attempts')`

func scanJobRow(r pgx.Row, extra ...any) (jobRow, error) {
	var jr jobRow
	err := r.Scan(append([]any{&jr.ID, &jr.EndpointID, &jr.EventID, &jr.EventType, &jr.State, &jr.Attempt, &jr.MaxAttempts, &jr.LastError,
		&jr.CreatedAt, &jr.AttemptedAt, &jr.ScheduledAt, &jr.FinalizedAt, &jr.Output, &jr.Probes}, extra...)...)
	return jr, err
}

// retrySlotSQL gives delivery $1, retried by an operator, its endpoint's
// probe slot if the endpoint is failing (job.ProbeSlotKey): probe_at moves
// to at least $2 seconds from now, and the job records it.
var retrySlotSQL = `
WITH ep AS (
    UPDATE webhook_endpoints w
       SET probe_at = greatest(w.probe_at, now() + make_interval(secs => $2::float8))
      FROM river_job j
     WHERE j.id = $1 AND w.id::text = j.args->>'endpoint_id'
       AND w.failing_since IS NOT NULL AND w.enabled AND w.probe_at IS NOT NULL
 RETURNING w.probe_at
)
UPDATE river_job j
   SET metadata = j.metadata || jsonb_build_object('` + job.ProbeSlotKey + `', (extract(epoch FROM ep.probe_at) * 1000000)::bigint)
  FROM ep
 WHERE j.id = $1`

// RetryDelivery makes owner's delivery jobID, which waits (DeliveryScheduled),
// available now, and returns it as it is then. A delivery in another state
// is a *NotWaitingError: a finished one is Redeliver's business, a pending
// or running one is already on its way. The endpoint must be enabled
// (ErrDisabled).
//
// With resend, a DELIVERED one is queued again too (the same job, so the
// same event and webhook-id), and one already PENDING or DELIVERING is
// returned as it is: a second click while the first resend is on its way
// does not send it twice.
func (s *Store) RetryDelivery(ctx context.Context, client *river.Client[pgx.Tx], owner string, jobID int64, resend bool) (*Delivery, error) {
	const q = `
SELECT ` + deliveryColumns + `, w.enabled
  FROM river_job j
  JOIN webhook_endpoints w ON w.id::text = j.args->>'endpoint_id' AND w.owner_id = $2
  LEFT JOIN events e ON e.id = j.args->>'event_id' AND e.owner_id = $2
 WHERE j.id = $1 AND j.kind = '` + job.KindDeliver + `'`
	var d *Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A failing endpoint's row first, as recovery probing locks it
		// before the jobs it probes: its probe slot is given below.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_endpoints
 WHERE id::text = (SELECT args->>'endpoint_id' FROM river_job WHERE id = $1 AND kind = '`+job.KindDeliver+`') AND owner_id = $2
   AND failing_since IS NOT NULL
   FOR NO KEY UPDATE`, jobID, owner); err != nil {
			return err
		}
		var enabled bool
		// The row lock keeps a worker from fetching the job (River fetches
		// with SKIP LOCKED) between the check and the retry.
		jr, err := scanJobRow(tx.QueryRow(ctx, q+` FOR UPDATE OF j`, jobID, owner), &enabled)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDeliveryNotFound
		}
		if err != nil {
			return err
		}
		before := jr.delivery(time.Now())
		switch {
		case before.State == DeliveryScheduled:
		case resend && before.State == DeliveryDelivered:
		case resend && (before.State == DeliveryPending || before.State == DeliveryDelivering):
			// Already on its way (a resend a moment ago, or its first
			// attempt): queuing it again would send it twice.
			d = before
			return nil
		default:
			return &NotWaitingError{State: before.State, Resend: resend}
		}
		if !enabled {
			return ErrDisabled
		}
		if _, err := client.JobRetryTx(ctx, tx, jobID); err != nil {
			return err
		}
		if before.State == DeliveryDelivered {
			var stored bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE id = $1 AND owner_id = $2)`, jr.EventID, owner).Scan(&stored); err != nil {
				return err
			}
			if !stored {
				// The worker would find nothing to send.
				return &NotWaitingError{State: before.State, Resend: true, EventGone: true}
			}
			// Stamped like Redeliver's re-queues, for whoever reads the job.
			if _, err := tx.Exec(ctx, `UPDATE river_job SET metadata = metadata || jsonb_build_object('`+resentAtKey+`', now()) WHERE id = $1`, jobID); err != nil {
				return err
			}
		}
		// A failing endpoint's receiver hears only the delivery that holds
		// its probe slot: this one takes the next probe's place, and the
		// probe after it waits a probe gap.
		if _, err := tx.Exec(ctx, retrySlotSQL, jobID, job.ProbeEvery.Seconds()); err != nil {
			return err
		}
		jr, err = scanJobRow(tx.QueryRow(ctx, `SELECT `+deliveryColumns+`
  FROM river_job j LEFT JOIN events e ON e.id = j.args->>'event_id' AND e.owner_id = $2 WHERE j.id = $1`, jobID, owner))
		if err != nil {
			return err
		}
		// River set scheduled_at to the database's now, which may run a
		// moment ahead of this clock: it is due, not waiting.
		now := time.Now()
		if jr.ScheduledAt.After(now) {
			now = jr.ScheduledAt
		}
		d = jr.delivery(now)
		return nil
	})
	if err != nil {
		if _, ok := errors.AsType[*NotWaitingError](err); ok || errors.Is(err, ErrDeliveryNotFound) || errors.Is(err, ErrDisabled) {
			return nil, err
		}
		return nil, fmt.Errorf("retry delivery: %w", err)
	}
	return d, nil
}

// exists returns ErrNotFound unless owner has endpoint id.
func (s *Store) exists(ctx context.Context, q querier, owner string, id uuid.UUID) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM webhook_endpoints WHERE id = $1 AND owner_id = $2`, id, owner).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("find endpoint: %w", err)
	}
	return nil
}

// querier is what both a pool and a transaction offer.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// retryInSavepoint retries one job inside a savepoint of tx and stamps it
// redeliveredAtKey. It reports false (and rolls back only the savepoint)
// when the job has a live unique twin.
func retryInSavepoint(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, jobID int64) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	if _, err := client.JobRetryTx(ctx, sp, jobID); err != nil {
		_ = sp.Rollback(ctx)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return false, nil
		}
		return false, err
	}
	if _, err := sp.Exec(ctx, `UPDATE river_job SET metadata = metadata || jsonb_build_object('`+redeliveredAtKey+`', now()) WHERE id = $1`, jobID); err != nil {
		_ = sp.Rollback(ctx)
		return false, err
	}
	return true, sp.Commit(ctx)
}

// labelsOrEmpty is labels for a jsonb parameter: {} rather than null.
func labelsOrEmpty(labels map[string]string) map[string]string {
	if labels == nil {
		return map[string]string{}
	}
	return labels
}
