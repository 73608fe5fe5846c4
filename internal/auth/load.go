package auth

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// LoadTokens reads one role's tokens from an environment value (a comma-
// separated list) and/or a file (one token per line, or several on a line
// comma-separated; blank lines and lines starting with '#' are ignored). Either source may be empty; tokens from both
// are combined, duplicates dropped. A token shorter than MinTokenLen, or weak
// (CheckStrength), is an error. Errors name the source and position, never the token, so they are
// safe to log.
func LoadTokens(envValue, filePath string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(tok, where string) error {
		if strings.ContainsAny(tok, " \t") {
			return fmt.Errorf("auth: %s: token contains whitespace", where)
		}
		if len(tok) < MinTokenLen {
			return fmt.Errorf("auth: %s: token is %d characters, need at least %d: %s", where, len(tok), MinTokenLen, HowToMakeToken)
		}
		if err := CheckStrength(tok); err != nil {
			return fmt.Errorf("auth: %s: %w", where, err)
		}
		if !seen[tok] {
			seen[tok] = true
			out = append(out, tok)
		}
		return nil
	}

	if envValue != "" {
		for i, part := range strings.Split(envValue, ",") {
			tok := strings.TrimSpace(part)
			if tok == "" {
				continue
			}
			if err := add(tok, fmt.Sprintf("environment list item %d", i+1)); err != nil {
				return nil, err
			}
		}
	}

	if filePath != "" {
		b, err := os.ReadFile(filePath)
		if err != nil {
			return nil, fmt.Errorf("auth: read token file: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			// A line may also list tokens comma-separated, as the
			// variable does, so one Secret key serves either way (a Helm
			// chart mounting "old,new" as a file).
			for part := range strings.SplitSeq(text, ",") {
				tok := strings.TrimSpace(part)
				if tok == "" {
					continue
				}
				if err := add(tok, fmt.Sprintf("%s line %d", filePath, line)); err != nil {
					return nil, err
				}
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("auth: read token file %s: %w", filePath, err)
		}
	}
	return out, nil
}
