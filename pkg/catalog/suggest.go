package catalog

import (
	"strconv"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Closest returns the publishable type of the catalog whose name is nearest
// typ, for a "did you mean" when typ is in no catalog: most often it is a
// misspelling. Near means few single-character edits (an insertion, a
// deletion, a substitution or two neighbours swapped): at most one for a
// name of up to 5 characters, one more for each further 6, at most 4.
// Ties go to the name first in order. ok is false when typ is in the catalog
// or no name is near.
func (c *Catalog) Closest(typ string) (name string, ok bool) {
	if c.Known(typ) || typ == "" {
		return "", false
	}
	best := min(1+len(typ)/6, 4) + 1
	for _, t := range c.types {
		if t.Exposure == ExposureOperational {
			continue
		}
		if d := editDistance(typ, t.Name, best); d < best {
			name, best, ok = t.Name, d, true
		}
	}
	return name, ok
}

// UnknownType describes typ, a type in no catalog, for a person: that it
// goes nowhere and, when one is near (Closest), the type probably meant:
// `is in no event catalog; did you mean "booking.created"?`.
func (c *Catalog) UnknownType(typ string) string {
	s := "is in no event catalog"
	if name, ok := c.Closest(typ); ok {
		s += "; did you mean " + strconv.Quote(name) + "?"
	}
	return s
}

// RequireKnown returns a *webhook.FieldError naming the type field, with a
// "did you mean", when typ is in no catalog: for a publisher that knows the
// dispatcher's catalog, such a type is a mistake rather than an internal
// event.
func (c *Catalog) RequireKnown(typ string) error {
	if c.Known(typ) {
		return nil
	}
	return &webhook.FieldError{Field: webhook.FieldType, Reason: c.UnknownType(typ)}
}

// editDistance is the optimal string alignment distance between a and b
// (Levenshtein's edits plus swapping two neighbours), over bytes: type
// names are ASCII. It gives up once the distance reaches limit, returning
// limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	// Three rows: the one before the previous (for swaps), the previous
	// and the current.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit)
}
