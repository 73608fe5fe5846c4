package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

const catalogUsage = `usage: dispatcher catalog <command> [arguments]

Works on an event catalog (see docs/operations.md, "Adding an event type")
without a running dispatcher.

commands:
  check <path>    load the catalog at path (a directory of <type>.json files, or
                  one JSON file) as serve -catalog would, and print its types and
                  digest; exits 1 naming the file and the field of a mistake
  export <dir>    write the default catalog into dir, one <type>.json per type:
                  the start of a catalog of your own (never overwrites a file)
`

// catalogUsageLines are the subcommands for dispatcher --help.
func catalogUsageLines() []usageLine {
	return []usageLine{
		{"check <path>", "load a catalog as serve -catalog would; print its types and digest"},
		{"export <dir>", "write the default catalog into dir, one <type>.json per type"},
	}
}

// runCatalogCLI implements `dispatcher catalog …`.
func runCatalogCLI(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, catalogUsage)
		return errors.New("catalog: no command given")
	}
	sub, rest := args[0], args[1:]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, catalogUsage)
		return nil
	}
	fs := newFlagSet("catalog "+sub, stderr)
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, catalogUsage)
		return fmt.Errorf("catalog %s: want exactly one path, got %d arguments", sub, fs.NArg())
	}
	path := fs.Arg(0)
	switch sub {
	case "check":
		c, err := catalog.Load(path)
		if err != nil {
			return fmt.Errorf("catalog check: %w", err)
		}
		for _, t := range c.Types() {
			scope := ""
			if t.Scope != catalog.ScopeNone {
				scope = " scope=" + t.Scope.String()
			}
			builtin := ""
			if t.Builtin {
				builtin = " (built in)"
			}
			fmt.Fprintf(stdout, "%-40s %s%s%s\n", t.Name, t.Exposure, scope, builtin)
		}
		fmt.Fprintf(stdout, "\n%s: %d types, digest %s\n", c.Source(), len(c.Types()), c.Digest())
		return nil
	case "export":
		if err := catalog.Default().WriteDir(path); err != nil {
			return fmt.Errorf("catalog export: %w", err)
		}
		fmt.Fprintf(stdout, "wrote the default catalog's %d types to %s; check it with: dispatcher catalog check %s\n",
			len(catalog.Default().Types())-len(builtinTypes()), path, path)
		return nil
	default:
		fmt.Fprint(stderr, catalogUsage)
		return fmt.Errorf("catalog: unknown command %q", sub)
	}
}

func builtinTypes() []*catalog.Type {
	var out []*catalog.Type
	for _, t := range catalog.Default().Types() {
		if t.Builtin {
			out = append(out, t)
		}
	}
	return out
}
