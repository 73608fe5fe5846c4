package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// runEventsListCLI implements `dispatcher events list`, a projection of
// EndpointService.ListEvents (admin token).
func runEventsListCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events list", stderr)
	var conn cliConn
	conn.bind(fs, true)
	pageSize := fs.Int("page-size", 0, "events per page (0: server default of 50, at most 200)")
	pageToken := fs.String("page-token", "", "page to fetch, from a previous list's next page token (repeat the same filters)")
	typ := fs.String("type", "", `only events of this type or glob ("corpus.*")`)
	subject := fs.String("subject-prefix", "", `only events whose subject starts with this ("wiki://software/")`)
	var since, until timeFlag
	fs.Var(&since, "since", `only events that occurred at or after this time: RFC 3339 or a duration ago ("24h")`)
	fs.Var(&until, "until", "only events that occurred before this time: RFC 3339 or a duration ago")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) > 0:
		return fmt.Errorf("events list: unexpected argument %q", positional[0])
	case conn.owner == "":
		return errors.New("events list: --owner (or DISPATCHER_OWNER) is required")
	}
	cc, err := conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("events list: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	resp, err := webhooksv1.NewEndpointServiceClient(cc).ListEvents(ctx, &webhooksv1.ListEventsRequest{
		OwnerId: conn.owner, PageSize: int32(min(max(*pageSize, -1), 1<<20)), PageToken: *pageToken,
		EventType: *typ, SubjectPrefix: *subject, OccurredAfter: since.ts, OccurredBefore: until.ts,
	})
	if err != nil {
		return callError("events list", err)
	}
	if conn.json {
		return printJSON(stdout, resp)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tTYPE\tSUBJECT\tOCCURRED")
	for _, e := range resp.GetEvents() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.GetId(), e.GetType(), oneLine(e.GetSubject(), 80), fmtTime(e.GetOccurredAt()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(resp.GetEvents()) == 0 {
		fmt.Fprintln(stdout, "(no events)")
	}
	if t := resp.GetNextPageToken(); t != "" {
		fmt.Fprintf(stdout, "\nmore: --page-token %s\n", t)
	}
	return nil
}

// runEventsGetCLI implements `dispatcher events get`, a projection of
// EndpointService.GetEvent (admin token).
func runEventsGetCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events get", stderr)
	var conn cliConn
	conn.bind(fs, true)
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) != 1:
		return fmt.Errorf("events get: want exactly one event id, got %d arguments", len(positional))
	case conn.owner == "":
		return errors.New("events get: --owner (or DISPATCHER_OWNER) is required")
	}
	cc, err := conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("events get: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	resp, err := webhooksv1.NewEndpointServiceClient(cc).GetEvent(ctx, &webhooksv1.GetEventRequest{OwnerId: conn.owner, EventId: positional[0]})
	if err != nil {
		return callError("events get", err)
	}
	if conn.json {
		return printJSON(stdout, resp)
	}
	return printEventDeliveries(stdout, resp)
}

func printEventDeliveries(w io.Writer, resp *webhooksv1.GetEventResponse) error {
	e := resp.GetEvent()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "event:\t%s\n", e.GetId())
	fmt.Fprintf(tw, "type:\t%s\n", e.GetType())
	fmt.Fprintf(tw, "subject:\t%s\n", oneLine(e.GetSubject(), 200))
	fmt.Fprintf(tw, "occurred:\t%s\n", fmtTime(e.GetOccurredAt()))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := printFanout(w, resp.GetFanout()); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DELIVERY\tENDPOINT\tSTATE\tATTEMPT\tLAST ERROR")
	for _, d := range resp.GetDeliveries() {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", d.GetId(), d.GetEndpointId(), deliveryState(d),
			deliveryAttempts(d), orDash(oneLine(d.GetLastError(), 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(resp.GetDeliveries()) == 0 {
		fmt.Fprintln(w, "(no deliveries)")
	}
	return nil
}

// printFanout prints where the event went and why not: one line per endpoint
// the decision names, then how many more each reason had beyond those.
func printFanout(w io.Writer, f *webhooksv1.FanoutDecision) error {
	switch {
	case !f.GetRecorded():
		fmt.Fprintln(w, "where it went: not recorded (the fanout is waiting for the access service, or the event was stored before decisions were recorded)")
		return nil
	case f.GetEndpoints() == 0:
		fmt.Fprintln(w, "where it went: nowhere; the owner had no endpoints")
		return nil
	}
	fmt.Fprintf(w, "where it went (the owner's %d endpoints when it was fanned out):\n", f.GetEndpoints())
	// The table goes through a buffer so that rows without a reason of
	// their own lose the padding of the WHY column.
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	header, why := "OUTCOME\tENDPOINT", ""
	for _, o := range f.GetOutcomes() {
		if len(o.GetDetails()) > 0 {
			header, why = "OUTCOME\tENDPOINT\tWHY", "\t"
			break
		}
	}
	fmt.Fprintln(tw, header)
	for _, o := range f.GetOutcomes() {
		label := fanoutLabel(o.GetReason())
		for _, id := range o.GetEndpointIds() {
			// The event's own values, quoted: kept from driving the
			// terminal.
			fmt.Fprintf(tw, "%s\t%s%s%s\n", label, id, why, printable(o.GetDetails()[id]))
		}
		if more := int(o.GetCount()) - len(o.GetEndpointIds()); more > 0 {
			fmt.Fprintf(tw, "%s\t(and %d more)%s\n", label, more, why)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		if _, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	for _, o := range f.GetOutcomes() {
		if !o.GetDelivered() {
			fmt.Fprintf(w, "  %s: %s\n", fanoutLabel(o.GetReason()), o.GetDescription())
		}
	}
	return nil
}

// fanoutLabel is a FanoutReason in a few words: "not subscribed",
// "delivery queued".
func fanoutLabel(r webhooksv1.FanoutReason) string {
	if r == webhooksv1.FanoutReason_FANOUT_REASON_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(r.String(), "FANOUT_REASON_"), "_", " "))
}
