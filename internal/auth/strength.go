package auth

import (
	"fmt"
	"math"
	"unicode"
)

// MinTokenBits is the least estimated entropy a token must have. A random
// token of 16 characters from 62 (MinTokenLen) has about 95 bits, and by
// this estimate rarely under 55; a word repeated, a keyboard run or a
// counting sequence fall far below.
const MinTokenBits = 48

// WeakTokenError is returned for a token whose estimated entropy is below
// MinTokenBits. It holds the estimate, never the token.
type WeakTokenError struct{ Bits float64 }

func (e *WeakTokenError) Error() string {
	return fmt.Sprintf("token is too weak (about %.0f bits estimated, need %d): use a random one, e.g. `openssl rand -base64 32`",
		e.Bits, MinTokenBits)
}

// CheckStrength refuses a guessable token (*WeakTokenError). A character
// that repeats three earlier ones ("changeme" twice) counts for nothing;
// the estimate of the rest is the smaller of two, both generous to random
// tokens and harsh to made-up ones:
//   - the token's Shannon entropy: how many bits its own character
//     frequencies need (a word repeated, few distinct characters);
//   - its length times the bits of its alphabet (the character classes it
//     uses), counting nothing for a character that repeats the one before or
//     steps from it by one ("aaaa", "1234", "abcd").
func CheckStrength(tok string) error {
	if bits := estimateBits(tok); bits < MinTokenBits {
		return &WeakTokenError{Bits: bits}
	}
	return nil
}

func estimateBits(tok string) float64 {
	all := []rune(tok)
	repeated := make([]bool, len(all))
	seen := map[string]bool{}
	for i := 0; i+3 <= len(all); i++ {
		k := string(all[i : i+3])
		if seen[k] {
			repeated[i], repeated[i+1], repeated[i+2] = true, true, true
		}
		seen[k] = true
	}
	var runes []rune
	for i, r := range all {
		if !repeated[i] {
			runes = append(runes, r)
		}
	}
	if len(runes) == 0 {
		return 0
	}
	counts := map[rune]int{}
	for _, r := range runes {
		counts[r]++
	}
	var shannon float64
	n := float64(len(runes))
	for _, c := range counts {
		p := float64(c) / n
		shannon -= p * math.Log2(p)
	}
	shannon *= n

	var lower, upper, digit, other bool
	for _, r := range runes {
		switch {
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case unicode.IsDigit(r):
			digit = true
		default:
			other = true
		}
	}
	alphabet := 0
	for _, c := range []struct {
		used bool
		size int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if c.used {
			alphabet += c.size
		}
	}
	fresh := 1
	for i := 1; i < len(runes); i++ {
		if d := runes[i] - runes[i-1]; d < -1 || d > 1 {
			fresh++
		}
	}
	return min(shannon, float64(fresh)*math.Log2(float64(alphabet)))
}
