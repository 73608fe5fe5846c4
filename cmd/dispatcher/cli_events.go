package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// eventCommand is one `dispatcher events` subcommand.
type eventCommand struct {
	usageLine
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// eventCommands are the subcommands, in the order the help lists them (set
// in init: their help reads this table).
var eventCommands []eventCommand

func init() {
	eventCommands = []eventCommand{
		{usageLine{"publish", "publish one event as the main app does (--type, --subject, --data; id and occurred_at filled in by the server); exits 1 when the type is in no event catalog (the event is dropped)"}, runPublishCLI},
		{usageLine{"list", "list the owner's events, newest first (--type, --subject-prefix, --since, --until)"}, runEventsListCLI},
		{usageLine{"get <event id>", "show one event and its deliveries to every endpoint"}, runEventsGetCLI},
	}
}

func eventsUsageLines() []usageLine {
	lines := make([]usageLine, len(eventCommands))
	for i, c := range eventCommands {
		lines[i] = c.usageLine
	}
	return lines
}

func eventsUsage() string {
	return "usage: dispatcher events <command> [flags]\n\n" +
		"Publishes events through the gRPC API (publisher token), as the main\n" +
		"application does with EventService.Publish, and reads them back (admin token).\n\ncommands:\n" +
		formatUsageLines(eventsUsageLines()) + `
Every command takes --addr, --owner, --json, --token-file, --tls, --ca-file;
the owner comes from --owner or DISPATCHER_OWNER, the token from
DISPATCHER_TOKEN or --token-file.
Run 'dispatcher events <command> -h' for its flags.
`
}

// runEventsCLI implements `dispatcher events …`.
func runEventsCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, eventsUsage())
		return errors.New("events: no command given")
	}
	sub, rest := args[0], args[1:]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, eventsUsage())
		return nil
	}
	for _, c := range eventCommands {
		if name, _, _ := strings.Cut(c.cmd, " "); name == sub {
			return c.run(ctx, rest, stdout, stderr)
		}
	}
	fmt.Fprint(stderr, eventsUsage())
	names := make([]string, len(eventCommands))
	for i, c := range eventCommands {
		names[i], _, _ = strings.Cut(c.cmd, " ")
	}
	return unknownCommand("events: ", sub, names)
}

func runPublishCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events publish", stderr)
	var conn cliConn
	conn.bind(fs, true)
	typ := fs.String("type", "", `event type, e.g. "corpus.note.changed" (see dispatcher event-types)`)
	subject := fs.String("subject", "", `URI of what the event is about, e.g. "wiki://software/project/x"`)
	data := fs.String("data", "{}", `the event's data, a JSON object, e.g. '{"op":"updated","published":true}'`)
	id := fs.String("id", "", "event id, unique per event (default: the server assigns a UUIDv7, printed); the same event published again is a no-op, the same id with other content an error")
	occurred := fs.String("occurred-at", "", "when it happened, RFC 3339 (default: the server's time, printed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("events publish: unexpected argument %q", fs.Arg(0))
	}
	ev, err := publishEvent(conn.owner, *typ, *subject, *data, *id, *occurred)
	if err != nil {
		return fmt.Errorf("events publish: %w", err)
	}

	cc, err := conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("events publish: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	resp, err := webhooksv1.NewEventServiceClient(cc).Publish(ctx, &webhooksv1.PublishRequest{Event: ev})
	if err != nil {
		return callError("events publish", err)
	}
	unknown := resp.GetOutcome() == webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN
	switch {
	case conn.json:
		if err := printJSON(stdout, resp); err != nil {
			return err
		}
	case unknown:
		// Said once, by the error below: the event was not published.
	default:
		if dropped(resp.GetOutcome()) {
			fmt.Fprintf(stdout, "dropped event %s (%s)\n", resp.GetEventId(), strings.TrimPrefix(publishOutcome(resp.GetOutcome()), "dropped: "))
		} else {
			fmt.Fprintf(stdout, "published event %s (%s), occurred_at %s\n", resp.GetEventId(), publishOutcome(resp.GetOutcome()),
				resp.GetOccurredAt().AsTime().Format(time.RFC3339Nano))
		}
	}
	if unknown {
		// Accepted, but almost certainly not what was meant: a script must
		// not carry on as if the event went anywhere.
		hint := "dispatcher event-types lists the catalog"
		if near := resp.GetDidYouMean(); near != "" {
			hint = fmt.Sprintf("did you mean %q? dispatcher event-types lists the catalog", near)
		}
		return fmt.Errorf("events publish: event %s dropped: type %q is in no event catalog, so it goes nowhere (%s)", resp.GetEventId(), *typ, hint)
	}
	return nil
}

// publishEvent builds the event from the flags. Only what the server cannot
// see is checked here (the flags' own syntax); the event's rules are the
// server's, reported per field as InvalidArgument. An id or a time not
// given is left out, for the server to fill in (and answer).
func publishEvent(owner, typ, subject, data, id, occurred string) (*webhooksv1.Event, error) {
	for _, f := range []struct{ name, value string }{{"--owner (or DISPATCHER_OWNER)", owner}, {"--type", typ}, {"--subject", subject}} {
		if f.value == "" {
			return nil, fmt.Errorf("%s is required", f.name)
		}
	}
	if strings.TrimSpace(data) == "" {
		data = "{}"
	}
	var st structpb.Struct
	if err := protojson.Unmarshal([]byte(data), &st); err != nil {
		return nil, fmt.Errorf("invalid --data: want a JSON object such as '{\"op\":\"updated\"}': %w", err)
	}
	ev := &webhooksv1.Event{Id: id, OwnerId: owner, Type: typ, Subject: subject, Data: &st}
	if occurred != "" {
		t, err := time.Parse(time.RFC3339Nano, occurred)
		if err != nil {
			return nil, fmt.Errorf("invalid --occurred-at %q: want RFC 3339, e.g. 2026-11-30T10:00:00Z", occurred)
		}
		ev.OccurredAt = timestamppb.New(t)
	}
	return ev, nil
}

// dropped reports whether o means the event goes nowhere.
func dropped(o webhooksv1.PublishOutcome) bool {
	switch o {
	case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_INTERNAL, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_RAW,
		webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN:
		return true
	}
	return false
}

// publishOutcome names an outcome for a terminal.
func publishOutcome(o webhooksv1.PublishOutcome) string {
	switch o {
	case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED:
		return "stored: it goes to the owner's matching endpoints"
	case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE:
		return "duplicate: this id was published before, nothing new is delivered"
	case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_INTERNAL:
		return "dropped: the catalog declares the type internal, it never leaves"
	case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN:
		return "dropped: the type is in no event catalog, it is never delivered"
	case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_RAW:
		return "dropped: raw:// subjects never leave"
	default:
		return strings.ToLower(strings.TrimPrefix(o.String(), "PUBLISH_OUTCOME_"))
	}
}
