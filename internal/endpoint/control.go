package endpoint

import "strconv"

// What a receiver may ask of its traffic besides Retry-After (which pauses
// the endpoint by itself, see PausedUntil): a rate limit and ordered
// delivery. internal/delivery enforces both.

// MaxRatePerSecond bounds max_per_second: beyond it a limit means nothing,
// as one endpoint never has more than one request in flight.
const MaxRatePerSecond = 1000

// Field names (and update mask paths) of the receiver controls.
const (
	FieldMaxPerSecond = "max_per_second"
	FieldOrdered      = "ordered"
)

// maxPerSecond validates a rate limit; 0 means none.
func (val *validator) maxPerSecond(v *violations, n int32) {
	if n < 0 || n > MaxRatePerSecond {
		v.add(FieldMaxPerSecond, "must be between 1 and "+strconv.Itoa(MaxRatePerSecond)+" requests per second, or 0 for no limit")
	}
}
