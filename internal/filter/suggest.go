package filter

import "strings"

// closest returns the candidate nearest s, for a "did you mean": at most
// one single-character edit (an insertion, a deletion, a substitution or
// two neighbours swapped) for up to 5 characters, one more for each further
// 6, at most 4; case differences count as no edit. Ties go to the first
// candidate. ok is false when s is a candidate or none is near.
func closest(s string, candidates []string) (best string, ok bool) {
	limit := min(1+len(s)/6, 4) + 1
	for _, c := range candidates {
		if c == s {
			return "", false
		}
		if strings.EqualFold(c, s) {
			return c, true
		}
		if d := editDistance(s, c, limit); d < limit {
			best, limit, ok = c, d, true
		}
	}
	return best, ok
}

// editDistance is the optimal string alignment distance between a and b
// (Levenshtein's edits plus swapping two neighbours), over bytes. It gives
// up once the distance reaches limit, returning limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
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
