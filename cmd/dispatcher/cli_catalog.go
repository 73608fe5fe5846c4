package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

const catalogUsage = `usage: dispatcher catalog <command> [arguments]

Works on an event catalog (see docs/operations.md, "Adding an event type")
without a running dispatcher.

commands:
  check <path>    load the catalog at path (a directory of <type>.json files, or
                  one JSON file) as serve -catalog would, and print its types and
                  digest; exits 1 naming the file and the field of a mistake.
                  With -database-url (or DATABASE_URL), also hold every
                  endpoint's filter against it: exits 1 naming the endpoints
                  whose filters test fields the catalog no longer has, unless
                  -allow-filter-breaks
  export <dir>    write the default catalog into dir, one <type>.json per type:
                  the start of a catalog of your own (never overwrites a file)
`

// catalogUsageLines are the subcommands for dispatcher --help.
func catalogUsageLines() []usageLine {
	return []usageLine{
		{"check <path>", "load a catalog as serve -catalog would; print its types and digest; check the endpoints' filters against it (-database-url)"},
		{"export <dir>", "write the default catalog into dir, one <type>.json per type"},
	}
}

// runCatalogCLI implements `dispatcher catalog …`.
func runCatalogCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, catalogUsage)
		return errors.New("catalog: no command given")
	}
	sub, rest := args[0], args[1:]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, catalogUsage)
		return nil
	}
	if sub != "check" && sub != "export" {
		fmt.Fprint(stderr, catalogUsage)
		return unknownCommand("catalog: ", sub, []string{"check", "export"})
	}
	fs := newFlagSet("catalog "+sub, stderr)
	var filters filterCheck
	if sub == "check" {
		filters.bind(fs, osEnviron())
	}
	positional, err := parseInterspersed(fs, rest)
	if err != nil {
		return err
	}
	if filters.env != nil && filters.env.err() != nil {
		err := filters.env.err()
		return fmt.Errorf("catalog check: %w", err)
	}
	if len(positional) != 1 {
		fmt.Fprint(stderr, catalogUsage)
		return fmt.Errorf("catalog %s: want exactly one path, got %d arguments", sub, len(positional))
	}
	path := positional[0]
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
		return filters.run(ctx, c, stdout)
	case "export":
		if err := catalog.Default().WriteDir(path); err != nil {
			return fmt.Errorf("catalog export: %w", err)
		}
		fmt.Fprintf(stdout, "wrote the default catalog's %d types to %s; check it with: dispatcher catalog check %s\n",
			len(catalog.Default().Types())-len(builtinTypes()), path, path)
		return nil
	default:
		fmt.Fprint(stderr, catalogUsage)
		return unknownCommand("catalog: ", sub, []string{"check", "export"})
	}
}

// filterCheck is catalog check's look at the endpoints' filters: the
// endpoints whose filters test what a new catalog's types do not have.
type filterCheck struct {
	env *environ
	// url is the database whose endpoints to check; "" skips the check.
	url, schema string
	allow       bool
}

func (f *filterCheck) bind(fs interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}, env *environ,
) {
	f.env = env
	fs.StringVar(&f.url, "database-url", env.str("DATABASE_URL", env.get("DISPATCHER_DATABASE_URL")),
		"the dispatcher's database, whose endpoints' filters are checked against the catalog; unset: not checked (env DATABASE_URL or DISPATCHER_DATABASE_URL)")
	fs.StringVar(&f.schema, "schema", env.str("DISPATCHER_SCHEMA", database.DefaultSchema),
		"Postgres schema holding the dispatcher's tables (env DISPATCHER_SCHEMA)")
	fs.BoolVar(&f.allow, "allow-filter-breaks", env.boolean("DISPATCHER_ALLOW_FILTER_BREAKS", false),
		"accept a catalog that leaves endpoints' filters testing fields it does not have: list them, exit 0 (env DISPATCHER_ALLOW_FILTER_BREAKS)")
}

// run checks every stored filter against c, printing what it found.
func (f *filterCheck) run(ctx context.Context, c *catalog.Catalog, stdout io.Writer) error {
	if f.url == "" {
		fmt.Fprintln(stdout, "endpoint filters: not checked (give -database-url or DATABASE_URL to check them against this catalog)")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pool, err := database.Open(ctx, f.url, f.schema, 2)
	if err != nil {
		return fmt.Errorf("catalog check: -database-url: %w", err)
	}
	defer pool.Close()
	problems, checked, err := endpoint.CheckFilters(ctx, pool, c)
	if err != nil {
		return fmt.Errorf("catalog check: %w", err)
	}
	if len(problems) == 0 {
		fmt.Fprintf(stdout, "endpoint filters: %d checked, every one fits this catalog\n", checked)
		return nil
	}
	fmt.Fprintf(stdout, "endpoint filters: %d checked, %d test what this catalog does not have:\n", checked, len(problems))
	for _, p := range problems {
		for _, m := range p.Mistakes {
			fmt.Fprintf(stdout, "  endpoint %s (owner %s): %s: %s\n", p.EndpointID, p.OwnerID, m.Field, m.Reason)
		}
	}
	if len(problems) == endpoint.MaxFilterProblems {
		fmt.Fprintf(stdout, "  (the first %d; there may be more)\n", endpoint.MaxFilterProblems)
	}
	if f.allow {
		fmt.Fprintln(stdout, "accepted (-allow-filter-breaks): those filters will refuse the events that lack what they test")
		return nil
	}
	return fmt.Errorf("catalog check: the catalog would leave %d endpoints' filters testing fields it does not have "+
		"(their events would be refused): update or remove those filters first, or accept it with -allow-filter-breaks", len(problems))
}

// warnBrokenFilters logs, at start-up, the endpoints whose filters test what
// the catalog does not have (a catalog rolled out without catalog check):
// they refuse every event that lacks what they test.
func warnBrokenFilters(ctx context.Context, pool *pgxpool.Pool, c *catalog.Catalog, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	problems, _, err := endpoint.CheckFilters(ctx, pool, c)
	if err != nil {
		logger.WarnContext(ctx, "endpoint filters not checked against the event catalog", slog.Any("error", err))
		return
	}
	const most = 10
	for i, p := range problems {
		if i == most {
			break
		}
		logger.WarnContext(ctx, "an endpoint's filter tests what the event catalog does not have: it refuses the events that lack it",
			slog.String("endpoint_id", p.EndpointID), slog.String("owner_id", p.OwnerID),
			slog.String("field", p.Mistakes[0].Field), slog.String("reason", p.Mistakes[0].Reason))
	}
	if len(problems) > most {
		logger.WarnContext(ctx, "more endpoints' filters test what the event catalog does not have: dispatcher catalog check lists them",
			slog.String("more", strconv.Itoa(len(problems)-most)))
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
