package partition

import (
	"maps"
	"slices"
)

// Owned returns the partitions whose queues the member works now: what the
// tests check a member's share against (the dispatcher itself only adds and
// removes the queues).
func (m *Member) Owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.owned))
}

// Removing returns how many of the member's queues are being removed: given
// up in its assignment, but River's producer for each may still fetch until
// Remove has stopped it.
func (m *Member) Removing() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.removing)
}
