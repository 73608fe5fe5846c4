package endpoint

import (
	"context"
	"strconv"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
)

// MaxHourlyHours bounds EndpointHourly: the hour buckets are kept eight
// days.
const MaxHourlyHours = 7 * 24

// EndpointHourly returns one of owner's endpoints' attempts per hour over
// the last n hours (the current one included; n is hours), oldest first. Another
// owner's endpoint is ErrNotFound.
func (s *Service) EndpointHourly(ctx context.Context, owner, rawID string, hours int) ([]attempt.Hour, error) {
	var v violations
	s.val.ownerID(&v, owner)
	id := parseID(&v, rawID)
	if hours < 1 || hours > MaxHourlyHours {
		v.add("hours", "must be between 1 and "+strconv.Itoa(MaxHourlyHours))
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	if _, err := s.store.Get(ctx, owner, id); err != nil {
		return nil, err
	}
	return attempt.Hourly(ctx, s.store.pool, id, hours, time.Now())
}
