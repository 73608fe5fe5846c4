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
