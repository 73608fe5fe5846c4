package main

import (
	"fmt"

	"github.com/standmeet/webhook-dispatcher/internal/suggest"
)

// unknownCommand is the error for a command name that is none of known:
// with the nearest one when it is a few edits away ("did you mean
// \"endpoints\"?"), the usual typo. prefix names the group ("endpoints: "),
// empty at the top level.
func unknownCommand(prefix, name string, known []string) error {
	msg := fmt.Sprintf("%sunknown command %q", prefix, name)
	if near := suggest.Nearest(name, known); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return fmt.Errorf("%s", msg)
}
