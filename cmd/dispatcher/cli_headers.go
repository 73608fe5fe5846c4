package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// readHeadersFile reads an endpoint's custom headers for `endpoints create`
// and `update --headers-file`: one "Name: value" per line; blank lines and
// lines starting with # are skipped. Header values may be gateway keys, so
// they come from a file, never from a flag value (which other local users
// can read in the process list). Errors name the line, never its value.
func readHeadersFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--headers-file: %w", err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("--headers-file %s: line %d: want \"Name: value\"", path, n)
		}
		name = strings.TrimSpace(name)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--headers-file %s: line %d: header %q given twice", path, n, name)
		}
		out[name] = strings.TrimSpace(value)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--headers-file %s: %w", path, err)
	}
	return out, nil
}
