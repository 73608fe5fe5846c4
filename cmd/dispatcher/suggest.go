package main

import (
	"fmt"
	"strings"
)

// unknownCommand is the error for a command name that is none of known:
// with the nearest one when it is a few edits away ("did you mean
// \"endpoints\"?"), the usual typo. prefix names the group ("endpoints: "),
// empty at the top level.
func unknownCommand(prefix, name string, known []string) error {
	msg := fmt.Sprintf("%sunknown command %q", prefix, name)
	if near := nearest(name, known); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return fmt.Errorf("%s", msg)
}

// nearest is the name of known fewest edits from s, at most 2 (1 for names
// of up to 4 bytes); "" when none is that near.
func nearest(s string, known []string) string {
	best, bestDist := "", 3
	if len(s) <= 4 {
		bestDist = 2
	}
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b
// (Levenshtein's edits plus swapping two neighbours, the commonest typo),
// over bytes: command names are ASCII.
func editDistance(a, b string) int {
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
