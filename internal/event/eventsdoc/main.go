// Command eventsdoc writes docs/events.md from the event catalog and its data
// schemas, followed by the endpoint filters' section (internal/filter);
// `make generate` runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/filter"
)

// page is docs/events.md: the catalog's types, then the filters.
func page() ([]byte, error) {
	text, err := event.Markdown()
	if err != nil {
		return nil, err
	}
	return append(text, filter.Markdown()...), nil
}

func main() {
	out := flag.String("o", "docs/events.md", "file to write")
	flag.Parse()
	text, err := page()
	if err != nil {
		fmt.Fprintln(os.Stderr, "eventsdoc:", err)
		os.Exit(1)
	}
	// Rendered in full before the file is touched, so a failure leaves the
	// committed page as it was.
	//nolint:gosec // a documentation page in the work tree, readable like the rest of it
	if err := os.WriteFile(*out, text, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "eventsdoc:", err)
		os.Exit(1)
	}
}
