package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Owner weights: an owner's share in the fairness across owners
// (internal/fair), settable for a paying tier. The range keeps one owner from
// counting as more than 100 of the others, or less than a hundredth of one.
const (
	MinOwnerWeight     = 0.01
	MaxOwnerWeight     = 100
	DefaultOwnerWeight = 1
	FieldWeight        = "weight"
)

// OwnerSettings is an owner's settings (owner_settings).
type OwnerSettings struct {
	OwnerID string
	Weight  float64
	// UpdatedAt is when they were last changed; nil when never (the
	// defaults).
	UpdatedAt *time.Time
}

// OwnerSettings returns owner's settings, the defaults when none were set.
func (s *Service) OwnerSettings(ctx context.Context, owner string) (OwnerSettings, error) {
	var v violations
	s.val.ownerID(&v, owner)
	if err := v.err(); err != nil {
		return OwnerSettings{}, err
	}
	out := OwnerSettings{OwnerID: owner, Weight: DefaultOwnerWeight}
	var at time.Time
	err := s.store.pool.QueryRow(ctx, `SELECT weight, updated_at FROM owner_settings WHERE owner_id = $1`, owner).Scan(&out.Weight, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return out, nil
	case err != nil:
		return OwnerSettings{}, fmt.Errorf("owner settings: %w", err)
	}
	out.UpdatedAt = &at
	return out, nil
}

// UpdateOwnerSettings sets owner's weight (MinOwnerWeight to
// MaxOwnerWeight). It applies to deliveries enqueued from then on.
func (s *Service) UpdateOwnerSettings(ctx context.Context, owner string, weight float64) (OwnerSettings, error) {
	var v violations
	s.val.ownerID(&v, owner)
	checkWeight(&v, weight, false)
	if err := v.err(); err != nil {
		return OwnerSettings{}, err
	}
	out := OwnerSettings{OwnerID: owner}
	var at time.Time
	err := s.store.pool.QueryRow(ctx, `
INSERT INTO owner_settings (owner_id, weight) VALUES ($1, $2)
ON CONFLICT (owner_id) DO UPDATE SET weight = excluded.weight, updated_at = now()
RETURNING weight, updated_at`, owner, weight).Scan(&out.Weight, &at)
	if err != nil {
		return OwnerSettings{}, fmt.Errorf("update owner settings: %w", err)
	}
	out.UpdatedAt = &at
	s.logger.InfoContext(ctx, "owner settings updated", slog.String("owner_id", owner), slog.Float64("weight", weight))
	return out, nil
}

// checkWeight adds a violation when weight is out of range; with unset
// allowed, 0 means none given.
func checkWeight(v *violations, weight float64, unset bool) {
	if unset && weight == 0 {
		return
	}
	if math.IsNaN(weight) || weight < MinOwnerWeight || weight > MaxOwnerWeight {
		desc := "must be from " + strconv.FormatFloat(MinOwnerWeight, 'g', -1, 64) + " to " + strconv.FormatFloat(MaxOwnerWeight, 'g', -1, 64)
		if unset {
			desc += ", or 0 for none"
		}
		v.add(FieldWeight, desc)
	}
}

// CheckCallWeight checks a call's optional weight (Publish, PublishBatch,
// Redeliver): 0 for none, else the owner weights' range.
func CheckCallWeight(weight float64) error {
	var v violations
	checkWeight(&v, weight, true)
	return v.err()
}
