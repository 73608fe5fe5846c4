package auth

import (
	"fmt"
	"math"
	"strings"
	"unicode"
)

// MinTokenBits is the least estimated entropy a token must have. A random
// token of 32 characters (MinRandomTokenLen) from base64url has 192 bits,
// and by this estimate never under 150; a word repeated, a keyboard run or a
// counting sequence fall far below.
const MinTokenBits = 64

// MinRandomTokenLen is the shortest token accepted without a prefix: 32
// characters. A prefixed token ("dsp_" and 16 random bytes) may be shorter:
// see CheckStrength.
const MinRandomTokenLen = 32

// minRandomPartLen is the shortest random part of a prefixed token: 16
// bytes in unpadded base64url. In hex they take 32 characters.
const minRandomPartLen = 22

// HowToMakeToken says how to make a token that passes CheckStrength; every
// refusal ends with it.
const HowToMakeToken = "make one with `openssl rand -base64 32 | tr '+/' '-_' | tr -d =` (43 random characters), " +
	"or a prefix and 16 random bytes: `echo dsp_$(openssl rand -hex 16)`"

// WeakTokenError is returned for a token that is too short or whose
// estimated entropy is below MinTokenBits. It holds the length and the
// estimate, never the token.
type WeakTokenError struct {
	Bits float64
	Len  int
}

func (e *WeakTokenError) Error() string {
	return fmt.Sprintf("token is too weak (%d characters, about %.0f bits estimated): want at least %d random characters, "+
		"or a prefix and %d characters of 16+ random bytes; %s", e.Len, e.Bits, MinRandomTokenLen, minRandomPartLen, HowToMakeToken)
}

// CheckStrength refuses a guessable token (*WeakTokenError). A token passes
// in one of two forms:
//   - at least MinRandomTokenLen characters, estimated at MinTokenBits or
//     more as a whole;
//   - a prefix (letters and digits, up to 32 characters, ending in '_',
//     '-' or '.') followed by at least 16 random bytes: 32 or more hex
//     digits, or 22 or more base64url characters holding both upper and
//     lower case letters (random base64url lacks either about once in
//     50,000; a made-up phrase almost always does), estimated at 56 bits
//     or more.
//
// A character that repeats three earlier ones ("changeme" twice) counts for
// nothing; the estimate of the rest is the smaller of two, both generous to
// random tokens and harsh to made-up ones:
//   - the token's Shannon entropy: how many bits its own character
//     frequencies need (a word repeated, few distinct characters);
//   - its length times the bits of its alphabet (the character classes it
//     uses), counting nothing for a character that repeats the one before or
//     steps from it by one ("aaaa", "1234", "abcd").
func CheckStrength(tok string) error {
	bits := estimateBits(tok)
	if len(tok) >= MinRandomTokenLen && bits >= MinTokenBits {
		return nil
	}
	for i := 0; i < len(tok) && i <= 32; i++ {
		if c := tok[i]; c != '_' && c != '-' && c != '.' {
			continue
		}
		if i > 0 && randomPart(tok[i+1:]) {
			return nil
		}
	}
	return &WeakTokenError{Bits: bits, Len: len(tok)}
}

// randomPart reports whether r looks like 16 or more random bytes, hex or
// base64url encoded.
func randomPart(r string) bool {
	// 56 bits, under MinTokenBits: 22 random base64url characters are
	// estimated at 63 bits at the least in 100,000 draws.
	if len(r) < minRandomPartLen || estimateBits(r) < 56 {
		return false
	}
	if len(r) >= 32 && strings.Trim(strings.ToLower(r), "0123456789abcdef") == "" {
		return true
	}
	var upper, lower bool
	for _, c := range r {
		switch {
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return upper && lower
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
