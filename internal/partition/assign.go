package partition

import (
	"cmp"
	"slices"
)

// Peer is a member as a heartbeat sees it.
type Peer struct {
	ID string
	// Slot is the slot the member last recorded; -1 for none.
	Slot int
	// Live is false for a member that died recently: its slot waits for a
	// replacement (Config.Reserve) instead of being closed up at once.
	Live bool
}

// Assignment is who works which partition, as every member computes it from
// the same view of the members.
//
// Each live member holds a slot, and slot s works partition s. The active
// partitions (those taking new deliveries, job.DeliverQueue) are one per
// slot in use: the live members' slots plus the reserved slots of members
// that died recently, so that a process restarting after a crash takes its
// predecessor's slot and partition and nothing else moves. A reserved slot's
// partition is worked meanwhile by a live member (one beat after the death).
// A member keeps its slot while it is below the active count, so members
// coming and going move only what must move: a joiner takes a reserved slot
// or the next one; when a reservation lapses, the member with the highest
// slot moves into the gap (and the endpoints of the last partition spread
// over the others, by the jump hash).
//
// Partitions beyond the active count (up to the high-water mark, at least
// job.DeliverPartitionsMin) only drain: partition p goes with slot p mod
// active.
type Assignment struct {
	// Active is how many partitions take new deliveries.
	Active int
	slots  map[string]int
	holder map[int]string
	bySlot []string // live members in slot order
	// stale lists the dead members whose slot is not reserved for them (a
	// replacement took it, or it lapsed): their slot is cleared, so that it
	// does not come back as a reservation when the members change again.
	stale []string
}

// Assign computes the assignment of the members in peers (duplicates
// ignored; dead members without a slot do not count).
func Assign(peers []Peer) Assignment {
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b Peer) int {
		// The live first, so a live member's row wins over a stale dead one
		// of the same id.
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		if a.Live != b.Live {
			if a.Live {
				return -1
			}
			return 1
		}
		return 0
	})
	peers = slices.CompactFunc(peers, func(a, b Peer) bool { return a.ID == b.ID })

	var live, dead []Peer
	for _, p := range peers {
		switch {
		case p.Live:
			live = append(live, p)
		case p.Slot >= 0:
			dead = append(dead, p)
		}
	}
	holder := make(map[int]string, len(live))
	slots := make(map[string]int, len(live))
	// Live members keep their slots (the first by id wins a slot two
	// claim, as after views differed for a moment); gaps are closed below.
	var joiners, losers []string
	for _, p := range live {
		switch {
		case p.Slot < 0:
			joiners = append(joiners, p.ID)
		case holder[p.Slot] != "":
			losers = append(losers, p.ID)
		default:
			holder[p.Slot], slots[p.ID] = p.ID, p.Slot
		}
	}
	reserved := map[int]bool{}
	for _, d := range dead {
		if holder[d.Slot] == "" {
			reserved[d.Slot] = true
		}
	}
	free := func() int {
		s := 0
		for holder[s] != "" || reserved[s] {
			s++
		}
		return s
	}
	// A new member takes a dead one's slot first (a replacement takes over
	// its predecessor's partition), else the lowest free one.
	for _, id := range joiners {
		s := -1
		for r := range reserved {
			if s < 0 || r < s {
				s = r
			}
		}
		if s >= 0 {
			delete(reserved, s)
		} else {
			s = free()
		}
		holder[s], slots[id] = id, s
	}
	for _, id := range losers {
		s := free()
		holder[s], slots[id] = id, s
	}
	// Close gaps: every slot in use must be below the active count.
	for {
		n := len(live) + len(reserved)
		if hi := maxKey(reserved); hi >= n {
			// A lapsed member's reservation above the others: dropped.
			delete(reserved, hi)
			continue
		}
		top, hi := "", -1
		for s, id := range holder {
			if s > hi {
				top, hi = id, s
			}
		}
		if hi < n {
			break
		}
		hole := free()
		delete(holder, hi)
		holder[hole], slots[top] = top, hole
	}
	a := Assignment{Active: len(live) + len(reserved), slots: slots, holder: holder}
	for _, d := range dead {
		if reserved[d.Slot] {
			delete(reserved, d.Slot) // the first by id keeps a slot two claim
			continue
		}
		a.stale = append(a.stale, d.ID)
	}
	for _, p := range live {
		a.bySlot = append(a.bySlot, p.ID)
	}
	slices.SortFunc(a.bySlot, func(x, y string) int { return cmp.Compare(slots[x], slots[y]) })
	return a
}

func maxKey(m map[int]bool) int {
	hi := -1
	for k := range m {
		hi = max(hi, k)
	}
	return hi
}

// Stale returns the dead members whose slot is no longer reserved for them
// and should be cleared.
func (a Assignment) Stale() []string { return a.stale }

// Slot returns member id's slot, or -1 if it is not live.
func (a Assignment) Slot(id string) int {
	if s, ok := a.slots[id]; ok {
		return s
	}
	return -1
}

// Owner returns the live member that works partition p ("" when none is
// live).
func (a Assignment) Owner(p int) string {
	if len(a.bySlot) == 0 || a.Active == 0 {
		return ""
	}
	s := p % a.Active
	if id := a.holder[s]; id != "" {
		return id
	}
	// A reserved slot: the live member it falls to works it meanwhile.
	return a.bySlot[s%len(a.bySlot)]
}

// Owned returns the partitions among the first partitions that member id
// works, in order.
func (a Assignment) Owned(id string, partitions int) []int {
	var out []int
	for p := range max(partitions, a.Active) {
		if a.Owner(p) == id {
			out = append(out, p)
		}
	}
	return out
}
