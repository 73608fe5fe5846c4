package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// endpointCommand is one `dispatcher endpoints` subcommand; flags binds its
// own flags and returns what runs it.
type endpointCommand struct {
	name    string
	arg     string // its one positional argument, "" for none
	summary string
	flags   func(fs *flag.FlagSet) func(ctx context.Context, c *endpointsCmd, id string) error
}

// endpointCommands are the subcommands, in the order the help lists them.
var endpointCommands = []endpointCommand{
	{"list", "", "list the owner's endpoints", listFlags},
	{"get", "<id>", "show one endpoint", getFlags},
	{"create", "", "create an endpoint; prints its signing secret, this once", createFlags},
	{"update", "<id>", "change the fields given as flags (--enable re-enables and clears the failure state)", updateFlags},
	{"delete", "<id>", "delete an endpoint", deleteFlags},
	{"rotate-secret", "<id>", "issue a new secret; the old one keeps signing for --grace", rotateFlags},
	{"send-test", "<id>", "send one webhook.test event to this endpoint", sendTestFlags},
	{"deliveries", "<id>", "list the endpoint's deliveries, newest first (--state, --event-type, --since, --until)", deliveriesFlags},
	{"delivery", "<delivery id>", "show one delivery (of any of the owner's endpoints)", deliveryFlags},
	{"redeliver", "<id>", "re-queue the endpoint's failed and cancelled deliveries (--since: those of an outage)", redeliverFlags},
	{"retry-delivery", "<delivery id>", "run one scheduled delivery now (its backoff or Retry-After cut short); --resend sends a delivered one again", retryDeliveryFlags},
	{"attempts", "<delivery id>", "list a delivery's attempts, newest first (status, duration, error, body)", attemptsFlags},
	{"stats", "", "attempts, failures by class and latency per endpoint, last hour/day/week", statsFlags},
	{"test-filter", "", "evaluate a filter (--filter, or --endpoint's) against a stored event (--event) or a sample (--type, --subject, --data), delivering nothing", testFilterFlags},
}

func endpointsUsageLines() []usageLine {
	lines := make([]usageLine, len(endpointCommands))
	for i, c := range endpointCommands {
		lines[i] = usageLine{strings.TrimSpace(c.name + " " + c.arg), c.summary}
	}
	return lines
}

func endpointsUsage() string {
	return "usage: dispatcher endpoints <command> [flags]\n\n" +
		"Manages an owner's webhook endpoints through the gRPC API (admin token).\n\ncommands:\n" +
		formatUsageLines(endpointsUsageLines()) + `
Every command takes --addr, --owner, --json, --token-file, --tls, --ca-file;
the owner comes from --owner or DISPATCHER_OWNER, the token from
DISPATCHER_TOKEN or --token-file.
Run 'dispatcher endpoints <command> -h' for its flags.
`
}

// stringList is a flag taking comma-separated values, repeatable.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}

// endpointsCmd is one parsed `dispatcher endpoints` subcommand.
type endpointsCmd struct {
	client webhooksv1.EndpointServiceClient
	conn   cliConn
	stdout io.Writer
}

// runEndpointsCLI implements `dispatcher endpoints …`.
func runEndpointsCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, endpointsUsage())
		return errors.New("endpoints: no command given")
	}
	sub, rest := args[0], args[1:]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, endpointsUsage())
		return nil
	}
	i := slices.IndexFunc(endpointCommands, func(c endpointCommand) bool { return c.name == sub })
	if i < 0 {
		fmt.Fprint(stderr, endpointsUsage())
		names := make([]string, len(endpointCommands))
		for i, c := range endpointCommands {
			names[i] = c.name
		}
		return unknownCommand("endpoints: ", sub, names)
	}
	cmd := endpointCommands[i]

	fs := newFlagSet("endpoints "+sub, stderr)
	c := &endpointsCmd{stdout: stdout}
	c.conn.bind(fs, true)
	run := cmd.flags(fs)
	positional, err := parseInterspersed(fs, rest)
	if err != nil {
		return err
	}
	var id string
	switch {
	case cmd.arg != "" && len(positional) != 1:
		what := strings.Trim(strings.ReplaceAll(cmd.arg, "<id>", "<endpoint id>"), "<>")
		return fmt.Errorf("endpoints %s: want exactly one %s, got %d arguments", sub, what, len(positional))
	case cmd.arg != "":
		id = positional[0]
	case len(positional) > 0:
		return fmt.Errorf("endpoints %s: unexpected argument %q", sub, positional[0])
	}
	if c.conn.owner == "" {
		return fmt.Errorf("endpoints %s: --owner (or DISPATCHER_OWNER) is required", sub)
	}

	conn, err := c.conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("endpoints %s: %w", sub, err)
	}
	defer conn.Close()
	c.client = webhooksv1.NewEndpointServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
	defer cancel()
	if err := run(ctx, c, id); err != nil {
		return callError("endpoints "+sub, err)
	}
	return nil
}

func listFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	pageSize := fs.Int("page-size", 0, "endpoints per page (0: server default of 50, at most 200)")
	pageToken := fs.String("page-token", "", "page to fetch, from a previous list's next page token")
	quiet := fs.Bool("q", false, "print only the ids, one per line (for scripts: endpoint=$(dispatcher endpoints list -q …))")
	var labels labelsFlag
	fs.Var(&labels, "label", "only endpoints with this label key=value, repeatable or comma-separated (all must match)")
	return func(ctx context.Context, c *endpointsCmd, _ string) error {
		resp, err := c.client.ListEndpoints(ctx, &webhooksv1.ListEndpointsRequest{
			OwnerId: c.conn.owner, PageSize: int32(min(max(*pageSize, -1), 1<<20)), PageToken: *pageToken, Labels: labels.m,
		})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		if *quiet {
			for _, ep := range resp.GetEndpoints() {
				fmt.Fprintln(c.stdout, ep.GetId())
			}
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tURL\tEVENT TYPES\tSTATUS\tCREATED\tNAME\tLABELS")
		for _, ep := range resp.GetEndpoints() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ep.GetId(), ep.GetUrl(), strings.Join(ep.GetEventTypes(), ","),
				endpointStatus(ep), fmtTime(ep.GetCreatedAt()), orDash(oneLine(ep.GetName(), 40)), orDash(formatLabels(ep.GetLabels())))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(resp.GetEndpoints()) == 0 {
			fmt.Fprintln(c.stdout, "(no endpoints)")
		}
		if t := resp.GetNextPageToken(); t != "" {
			fmt.Fprintf(c.stdout, "\nmore: --page-token %s\n", t)
		}
		return nil
	}
}

func getFlags(*flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		resp, err := c.client.GetEndpoint(ctx, &webhooksv1.GetEndpointRequest{OwnerId: c.conn.owner, EndpointId: id})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		return printEndpoint(c.stdout, resp.GetEndpoint())
	}
}

func createFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	url := fs.String("url", "", "receiver URL (http or https)")
	description := fs.String("description", "", "free text shown in listings")
	var types stringList
	fs.Var(&types, "event-types", `event type globs, comma-separated or repeated: "*", "corpus.*", "booking.created"`)
	embedID := fs.String("embed-id", "", "bind the endpoint to an embed: events are scoped by its access code")
	headersFile := fs.String("headers-file", "", `custom headers sent on every delivery, one "Name: value" per line (values are kept sealed)`)
	scheme := fs.String("signature-scheme", "v1", `how deliveries are signed: "v1" (a shared secret, shown once) or "v1a" (an Ed25519 key pair; receivers verify with its public key)`)
	maxPerSecond := fs.Int("max-per-second", 0, "at most this many requests per second to the receiver (0: no limit)")
	maxInFlight := fs.Int("max-in-flight", 1, "at most this many deliveries in flight to the receiver at once (1-64; 1 with --ordered)")
	ordered := fs.Bool("ordered", false, "deliver in publish order, a failed delivery holding the ones behind it")
	requestID := fs.String("request-id", "", "idempotency key: running the same create again with it (within 24h) returns the endpoint made the first time")
	name := fs.String("name", "", "a short name for people (not unique)")
	var labels labelsFlag
	fs.Var(&labels, "label", "a label key=value, repeatable or comma-separated (env=prod,team=billing)")
	var flt filterFlag
	fs.Var(&flt, "filter", filterFlagUsage)
	return func(ctx context.Context, c *endpointsCmd, _ string) error {
		var protoScheme webhooksv1.SignatureScheme
		switch *scheme {
		case "v1":
			protoScheme = webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1
		case "v1a":
			protoScheme = webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A
		default:
			return fmt.Errorf("--signature-scheme: want v1 or v1a, got %q", *scheme)
		}
		var headers map[string]string
		if *headersFile != "" {
			var err error
			if headers, err = readHeadersFile(*headersFile); err != nil {
				return err
			}
		}
		resp, err := c.client.CreateEndpoint(ctx, &webhooksv1.CreateEndpointRequest{
			OwnerId: c.conn.owner, Url: *url, Description: *description, EventTypes: types, EmbedId: *embedID,
			Headers: headers, SignatureScheme: protoScheme, MaxPerSecond: clampInt32(*maxPerSecond), Ordered: *ordered,
			MaxInFlight: clampInt32(*maxInFlight), RequestId: *requestID, Name: *name, Labels: labels.m,
			Filter: flt.st,
		})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		if err := printEndpoint(c.stdout, resp.GetEndpoint()); err != nil {
			return err
		}
		if resp.GetReplayed() {
			fmt.Fprintln(c.stdout, "\n(already created by this --request-id: nothing new was made)")
		}
		if resp.GetSecret() != "" {
			fmt.Fprintf(c.stdout, "\nsigning secret: %s\n(shown only this once: store it in the receiver now)\n", resp.GetSecret())
		} else if resp.GetReplayed() && resp.GetEndpoint().GetPublicKey() == "" {
			fmt.Fprintln(c.stdout, "the secret was rotated since: rotate-secret issues a new one")
		}
		return nil
	}
}

func updateFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	url := fs.String("url", "", "new receiver URL")
	description := fs.String("description", "", "new description")
	var types stringList
	fs.Var(&types, "event-types", "new event type globs (replace the old list), comma-separated or repeated")
	embedID := fs.String("embed-id", "", `new embed id ("" makes the endpoint standalone)`)
	enable := fs.Bool("enable", false, "enable the endpoint and clear its failure state")
	disable := fs.Bool("disable", false, "disable the endpoint")
	headersFile := fs.String("headers-file", "", `replace the custom headers with this file's ("Name: value" per line; an empty file removes them)`)
	maxPerSecond := fs.Int("max-per-second", 0, "new rate limit in requests per second (0 removes it)")
	maxInFlight := fs.Int("max-in-flight", 1, "new limit of deliveries in flight at once (1-64)")
	ordered := fs.Bool("ordered", false, "deliver in publish order (--ordered=false: in any order)")
	name := fs.String("name", "", "new name")
	var labels labelsFlag
	fs.Var(&labels, "label", `replace the labels with these key=value pairs, repeatable or comma-separated (--label "" removes them all)`)
	var flt filterFlag
	fs.Var(&flt, "filter", filterFlagUsage+` (--filter "" removes it)`)
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		req := &webhooksv1.UpdateEndpointRequest{OwnerId: c.conn.owner, EndpointId: id, UpdateMask: &fieldmaskpb.FieldMask{}}
		var err error
		// Only flags given on the command line enter the mask, so an
		// omitted flag never blanks a field.
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "url":
				req.Url = *url
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "url")
			case "description":
				req.Description = *description
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "description")
			case "event-types":
				req.EventTypes = types
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "event_types")
			case "embed-id":
				req.EmbedId = *embedID
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "embed_id")
			case "headers-file":
				var herr error
				if req.Headers, herr = readHeadersFile(*headersFile); herr != nil {
					err = herr
				}
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "headers")
			case "max-per-second":
				req.MaxPerSecond = clampInt32(*maxPerSecond)
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "max_per_second")
			case "max-in-flight":
				req.MaxInFlight = clampInt32(*maxInFlight)
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "max_in_flight")
			case "ordered":
				req.Ordered = *ordered
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "ordered")
			case "name":
				req.Name = *name
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "name")
			case "label":
				req.Labels = labels.m
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "labels")
			case "filter":
				req.Filter = flt.st
				req.UpdateMask.Paths = append(req.UpdateMask.Paths, "filter")
			case "enable", "disable":
				if *enable && *disable {
					err = errors.New("--enable and --disable exclude each other")
				}
				if *enable || *disable {
					req.Enabled = *enable
					if !slices.Contains(req.UpdateMask.Paths, "enabled") {
						req.UpdateMask.Paths = append(req.UpdateMask.Paths, "enabled")
					}
				}
			}
		})
		if err != nil {
			return err
		}
		if len(req.UpdateMask.Paths) == 0 {
			return errors.New("nothing to update: give at least one of --url, --description, --event-types, --embed-id, --max-per-second, --ordered, --enable, --disable, --headers-file, --name, --label, --filter")
		}
		resp, err := c.client.UpdateEndpoint(ctx, req)
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		return printEndpoint(c.stdout, resp.GetEndpoint())
	}
}

func deleteFlags(*flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		resp, err := c.client.DeleteEndpoint(ctx, &webhooksv1.DeleteEndpointRequest{OwnerId: c.conn.owner, EndpointId: id})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		fmt.Fprintf(c.stdout, "deleted endpoint %s\n", id)
		return nil
	}
}

func rotateFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	grace := fs.Duration("grace", 24*time.Hour, "how long the old secret keeps signing beside the new one (0 ends it now; at most 168h)")
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		resp, err := c.client.RotateSecret(ctx, &webhooksv1.RotateSecretRequest{
			OwnerId: c.conn.owner, EndpointId: id, GracePeriod: durationpb.New(*grace),
		})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		if pk := resp.GetPublicKey(); pk != "" {
			fmt.Fprintf(c.stdout, "new public key: %s\n(give it to the receiver; it can be read again with get)\n", pk)
		} else {
			fmt.Fprintf(c.stdout, "new signing secret: %s\n(shown only this once: store it in the receiver now)\n", resp.GetSecret())
		}
		if exp := resp.GetPreviousSecretExpiresAt(); exp != nil {
			fmt.Fprintf(c.stdout, "the previous secret keeps signing until %s\n", fmtTime(exp))
		} else {
			fmt.Fprintln(c.stdout, "the previous secret no longer signs")
		}
		return nil
	}
}

func sendTestFlags(*flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		resp, err := c.client.SendTest(ctx, &webhooksv1.SendTestRequest{OwnerId: c.conn.owner, EndpointId: id})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		fmt.Fprintf(c.stdout, "sent webhook.test event %s to endpoint %s\n", resp.GetEventId(), id)
		return nil
	}
}

func retryDeliveryFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	resend := fs.Bool("resend", false, "also send a delivered delivery again (same webhook-id); a repeat while it is on its way sends nothing more")
	return func(ctx context.Context, c *endpointsCmd, arg string) error {
		id, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("endpoints retry-delivery: %q is not a delivery id (the DELIVERY column of 'endpoints deliveries')", arg)
		}
		resp, err := c.client.RetryDelivery(ctx, &webhooksv1.RetryDeliveryRequest{OwnerId: c.conn.owner, DeliveryId: id, Resend: *resend})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		if st := resp.GetDelivery().GetState(); *resend && st == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERING {
			fmt.Fprintf(c.stdout, "delivery %d is %s: already on its way, not sent again\n", id, deliveryState(resp.GetDelivery()))
			return nil
		}
		fmt.Fprintf(c.stdout, "delivery %d is %s: it runs now\n", id, deliveryState(resp.GetDelivery()))
		return nil
	}
}

// runEventTypesCLI implements `dispatcher event-types`.
func runEventTypesCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("event-types", stderr)
	var conn cliConn
	conn.bind(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("event-types: unexpected argument %q", fs.Arg(0))
	}
	cc, err := conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("event-types: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	resp, err := webhooksv1.NewEndpointServiceClient(cc).ListEventTypes(ctx, &webhooksv1.ListEventTypesRequest{})
	if err != nil {
		return callError("event-types", err)
	}
	if conn.json {
		return printJSON(stdout, resp)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, t := range resp.GetEventTypes() {
		fmt.Fprintf(tw, "%s\t%s\n", t.GetName(), t.GetDescription())
	}
	return tw.Flush()
}

func printEndpoint(w io.Writer, ep *webhooksv1.Endpoint) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id:\t%s\n", ep.GetId())
	if n := ep.GetName(); n != "" {
		fmt.Fprintf(tw, "name:\t%s\n", oneLine(n, 200))
	}
	if l := ep.GetLabels(); len(l) > 0 {
		fmt.Fprintf(tw, "labels:\t%s\n", formatLabels(l))
	}
	fmt.Fprintf(tw, "owner:\t%s\n", ep.GetOwnerId())
	fmt.Fprintf(tw, "url:\t%s\n", ep.GetUrl())
	fmt.Fprintf(tw, "description:\t%s\n", orDash(oneLine(ep.GetDescription(), 200)))
	fmt.Fprintf(tw, "event types:\t%s\n", strings.Join(ep.GetEventTypes(), ", "))
	fmt.Fprintf(tw, "embed:\t%s\n", orDash(ep.GetEmbedId()))
	if ep.GetSignatureScheme() == webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A {
		fmt.Fprintf(tw, "signature scheme:\tv1a (Ed25519)\n")
		fmt.Fprintf(tw, "public key:\t%s\n", ep.GetPublicKey())
		if prev := ep.GetPreviousPublicKey(); prev != "" {
			fmt.Fprintf(tw, "previous public key:\t%s\n", prev)
		}
	}
	if names := ep.GetHeaderNames(); len(names) > 0 {
		fmt.Fprintf(tw, "custom headers:\t%s (values sealed, never shown)\n", strings.Join(names, ", "))
	}
	if f := ep.GetFilter(); f != nil && len(f.GetFields()) > 0 {
		fmt.Fprintf(tw, "filter:\t%s\n", filterText(f))
	}
	fmt.Fprintf(tw, "status:\t%s\n", endpointStatus(ep))
	printControls(tw, ep)
	if exp := ep.GetPreviousSecretExpiresAt(); exp != nil {
		fmt.Fprintf(tw, "previous secret signs until:\t%s\n", fmtTime(exp))
	}
	fmt.Fprintf(tw, "created:\t%s\n", fmtTime(ep.GetCreatedAt()))
	fmt.Fprintf(tw, "updated:\t%s\n", fmtTime(ep.GetUpdatedAt()))
	return tw.Flush()
}

// printControls prints what the receiver asked of its traffic.
func printControls(w io.Writer, ep *webhooksv1.Endpoint) {
	if until := ep.GetPausedUntil(); until != nil {
		fmt.Fprintf(w, "paused until:\t%s (%s)\n", fmtTime(until), ep.GetPauseReason())
	}
	if n := ep.GetMaxPerSecond(); n > 0 {
		fmt.Fprintf(w, "rate limit:\t%d/s\n", n)
	}
	if n := ep.GetMaxInFlight(); n > 1 {
		fmt.Fprintf(w, "in flight:\tat most %d at once\n", n)
	}
	if ep.GetOrdered() {
		fmt.Fprintf(w, "order:\tpublish order (ordered)\n")
	}
}

// clampInt32 keeps an out-of-range flag value out of range (the server
// names the field) instead of wrapping it into range.
func clampInt32(n int) int32 {
	return int32(min(max(n, -1), 1<<31-1))
}

func endpointStatus(ep *webhooksv1.Endpoint) string {
	switch {
	case !ep.GetEnabled() && ep.GetDisabledReason() != "":
		return "disabled (" + ep.GetDisabledReason() + ")"
	case !ep.GetEnabled():
		return "disabled"
	case ep.GetFailingSince() != nil && ep.GetNextProbeAt() != nil:
		return "failing since " + fmtTime(ep.GetFailingSince()) + ", next probe " + fmtTime(ep.GetNextProbeAt())
	case ep.GetFailingSince() != nil:
		return "failing since " + fmtTime(ep.GetFailingSince())
	default:
		return "enabled"
	}
}

// deliveryState is "pending", "delivered", … and, for a scheduled delivery,
// why it waits: "scheduled (retry_after)".
func deliveryState(d *webhooksv1.Delivery) string {
	name := strings.ToLower(strings.TrimPrefix(d.GetState().String(), "DELIVERY_STATE_"))
	if w := d.GetWaitReason(); w != webhooksv1.DeliveryWaitReason_DELIVERY_WAIT_REASON_UNSPECIFIED {
		name += " (" + strings.ToLower(strings.TrimPrefix(w.String(), "DELIVERY_WAIT_REASON_")) + ")"
	}
	return name
}

func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps table cells on one line and bounded.
func oneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > limit {
		return string(r[:limit-1]) + "…"
	}
	return s
}
