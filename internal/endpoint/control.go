package endpoint

import "strconv"

// What a receiver may ask of its traffic besides Retry-After (which pauses
// the endpoint by itself, see PausedUntil): a rate limit, a concurrency limit
// and ordered delivery. internal/delivery enforces them.

// MaxRatePerSecond bounds max_per_second.
const MaxRatePerSecond = 1000

// MaxInFlightLimit bounds max_in_flight: beyond it one endpoint would hold a
// large share of a process's deliver workers.
const MaxInFlightLimit = 64

// Field names (and update mask paths) of the receiver controls.
const (
	FieldMaxPerSecond = "max_per_second"
	FieldMaxInFlight  = "max_in_flight"
	FieldOrdered      = "ordered"
)

// maxInFlight validates a concurrency limit and returns it with 0 meaning
// the default, 1; ordered endpoints take only 1.
func (val *validator) maxInFlight(v *violations, n int32, ordered bool) int32 {
	if n == 0 {
		n = 1
	}
	switch {
	case n < 1 || n > MaxInFlightLimit:
		v.add(FieldMaxInFlight, "must be between 1 and "+strconv.Itoa(MaxInFlightLimit)+" deliveries in flight at once, or 0 for the default (1)")
	case n > 1 && ordered:
		v.add(FieldMaxInFlight, errOrderedInFlight)
	}
	return n
}

const errOrderedInFlight = "must be 1 for an ordered endpoint: its deliveries go one after the other"

// maxPerSecond validates a rate limit; 0 means none.
func (val *validator) maxPerSecond(v *violations, n int32) {
	if n < 0 || n > MaxRatePerSecond {
		v.add(FieldMaxPerSecond, "must be between 1 and "+strconv.Itoa(MaxRatePerSecond)+" requests per second, or 0 for no limit")
	}
}
