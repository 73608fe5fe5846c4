package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/filter"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

const filterFlagUsage = `a filter over the event's subject and data, as JSON, or @file to read it from a file: '{"data.status": {"$in": ["published"]}}' (docs/events.md, "Filters")`

// filterFlag is a filter given on the command line: JSON, or @path. It is
// read as the server reads it, so that a mistake in it (invalid JSON, an
// unknown operator) is named at once, at its spot; the catalog checks are
// the server's.
type filterFlag struct {
	text string
	// st is the filter to send; nil for none ("" or {}).
	st *structpb.Struct
}

func (f *filterFlag) String() string { return f.text }

func (f *filterFlag) Set(v string) error {
	f.text = v
	text := []byte(v)
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("cannot read the filter: %w", err)
		}
		text = b
	}
	if strings.TrimSpace(string(text)) == "" {
		f.st = nil
		return nil
	}
	parsed, err := filter.Parse(text)
	if err != nil {
		return err
	}
	if parsed.Empty() {
		f.st = nil
		return nil
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(parsed.JSON(), st); err != nil {
		return fmt.Errorf("filter: %w", err)
	}
	f.st = st
	return nil
}

// filterText is a filter as compact JSON, keys sorted.
func filterText(st *structpb.Struct) string {
	b, err := json.Marshal(st.AsMap())
	if err != nil {
		return "(unprintable)"
	}
	return string(b)
}

func testFilterFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	var flt filterFlag
	fs.Var(&flt, "filter", filterFlagUsage+"; default: --endpoint's filter")
	endpointID := fs.String("endpoint", "", "the endpoint whose filter to test (without --filter) and whose event types it is checked against")
	var types stringList
	fs.Var(&types, "event-types", `event type globs the filter is checked against, when no --endpoint is given (default "*")`)
	eventID := fs.String("event", "", "the id of one of the owner's stored events to evaluate it against")
	typ := fs.String("type", "", "a sample event's type, to evaluate it against instead of a stored event")
	subject := fs.String("subject", "", "the sample event's subject")
	data := fs.String("data", "{}", "the sample event's data, a JSON object (checked against the type's schema)")
	return func(ctx context.Context, c *endpointsCmd, _ string) error {
		req := &webhooksv1.TestFilterRequest{OwnerId: c.conn.owner, Filter: flt.st, EndpointId: *endpointID, EventTypes: types}
		if flt.text != "" && flt.st == nil {
			req.Filter = &structpb.Struct{}
		}
		switch {
		case *eventID != "" && *typ != "":
			return errors.New("give --event (a stored event) or --type, --subject and --data (a sample), not both")
		case *eventID != "":
			req.Target = &webhooksv1.TestFilterRequest_EventId{EventId: *eventID}
		case *typ != "":
			d := &structpb.Struct{}
			if err := protojson.Unmarshal([]byte(*data), d); err != nil {
				return fmt.Errorf("--data: must be a JSON object: %w", err)
			}
			req.Target = &webhooksv1.TestFilterRequest_Sample{Sample: &webhooksv1.Event{Type: *typ, Subject: *subject, Data: d}}
		default:
			return errors.New("give --event (a stored event's id) or --type, --subject and --data (a sample event)")
		}
		resp, err := c.client.TestFilter(ctx, req)
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "filter:\t%s\n", filterText(resp.GetFilter()))
		e := resp.GetEvent()
		what := "sample"
		if id := e.GetId(); id != "" {
			what = id
		}
		fmt.Fprintf(tw, "event:\t%s (%s, %s)\n", what, e.GetType(), oneLine(e.GetSubject(), 120))
		if resp.GetMatched() {
			fmt.Fprintf(tw, "result:\tmatched: the filter lets the event through\n")
		} else {
			fmt.Fprintf(tw, "result:\trefused: %s\n", printable(resp.GetExplanation()))
		}
		if !resp.GetApplies() {
			fmt.Fprintf(tw, "note:\tthe filter does not apply to this event's type (not among the event types, or a test event)\n")
		}
		return tw.Flush()
	}
}
