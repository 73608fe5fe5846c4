// Package suggest finds the name probably meant by a mistyped one: for the
// did-you-mean of unknown CLI commands, HTTP body fields and update_mask
// paths (event types have their own, pkg/catalog's Closest).
package suggest

import "strings"

// Nearest is the name of known fewest edits from s (case aside), at most 2
// (1 for names of up to 4 bytes, where 2 edits make anything of anything);
// "" when none is that near.
func Nearest(s string, known []string) string {
	best, bestDist := "", 3
	if len(s) <= 4 {
		bestDist = 2
	}
	s = strings.ToLower(s)
	for _, k := range known {
		if d := Distance(s, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// Distance is the optimal string alignment distance of a and b
// (Levenshtein's edits plus swapping two neighbours, the commonest typo),
// over bytes: the names compared are ASCII.
func Distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
