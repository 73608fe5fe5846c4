package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// maxRedeliverCalls bounds how many pages `endpoints redeliver` follows:
// 100 calls of 1000 are a hundred thousand deliveries.
const maxRedeliverCalls = 100

// timeFlag is an optional point in time: RFC 3339, or a duration meaning
// that long ago ("24h").
type timeFlag struct{ ts *timestamppb.Timestamp }

func (f *timeFlag) String() string {
	if f.ts == nil {
		return ""
	}
	return f.ts.AsTime().Format(time.RFC3339)
}

func (f *timeFlag) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return errors.New("a duration means that long ago and must not be negative")
		}
		f.ts = timestamppb.New(time.Now().Add(-d))
		return nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return errors.New(`want an RFC 3339 time ("2026-12-01T09:00:00Z") or a duration ago ("24h")`)
	}
	f.ts = timestamppb.New(t)
	return nil
}

// parseDeliveryStates reads "failed,cancelled" into the API's states.
func parseDeliveryStates(names []string) ([]webhooksv1.DeliveryState, error) {
	out := make([]webhooksv1.DeliveryState, 0, len(names))
	for _, n := range names {
		v, ok := webhooksv1.DeliveryState_value["DELIVERY_STATE_"+strings.ToUpper(n)]
		if !ok || v == 0 {
			return nil, fmt.Errorf("--state: unknown state %q (want pending, scheduled, delivering, delivered, failed or cancelled)", n)
		}
		out = append(out, webhooksv1.DeliveryState(v))
	}
	return out, nil
}

func deliveriesFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	pageSize := fs.Int("page-size", 0, "deliveries per page (0: server default of 50, at most 200)")
	pageToken := fs.String("page-token", "", "page to fetch, from a previous call's next page token (repeat the same filters)")
	var states stringList
	fs.Var(&states, "state", "only these states, comma-separated or repeated: pending, scheduled, delivering, delivered, failed, cancelled")
	eventType := fs.String("event-type", "", `only events of this type or glob ("corpus.*")`)
	var since, until timeFlag
	fs.Var(&since, "since", `only deliveries created at or after this time: RFC 3339 or a duration ago ("24h")`)
	fs.Var(&until, "until", "only deliveries created before this time: RFC 3339 or a duration ago")
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		st, err := parseDeliveryStates(states)
		if err != nil {
			return err
		}
		resp, err := c.client.ListDeliveries(ctx, &webhooksv1.ListDeliveriesRequest{
			OwnerId: c.conn.owner, EndpointId: id, PageSize: int32(min(max(*pageSize, -1), 1<<20)), PageToken: *pageToken,
			States: st, EventType: *eventType, CreatedAfter: since.ts, CreatedBefore: until.ts,
		})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DELIVERY\tEVENT\tTYPE\tSTATE\tATTEMPT\tLAST ERROR\tCREATED\tLINK")
		for _, d := range resp.GetDeliveries() {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.GetId(), d.GetEventId(), orDash(d.GetEventType()),
				deliveryState(d), deliveryAttempts(d), orDash(oneLine(d.GetLastError(), 60)),
				fmtTime(d.GetCreatedAt()), orDash(d.GetLink()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(resp.GetDeliveries()) == 0 {
			fmt.Fprintln(c.stdout, "(no deliveries)")
		}
		if t := resp.GetNextPageToken(); t != "" {
			fmt.Fprintf(c.stdout, "\nmore: --page-token %s\n", t)
		}
		return nil
	}
}

func deliveryFlags(*flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	return func(ctx context.Context, c *endpointsCmd, raw string) error {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("want a delivery id (a positive number, the DELIVERY column of deliveries), got %q", raw)
		}
		resp, err := c.client.GetDelivery(ctx, &webhooksv1.GetDeliveryRequest{OwnerId: c.conn.owner, DeliveryId: id})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		return printDelivery(c.stdout, resp.GetDelivery())
	}
}

func printDelivery(w io.Writer, d *webhooksv1.Delivery) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "delivery:\t%d\n", d.GetId())
	fmt.Fprintf(tw, "endpoint:\t%s\n", d.GetEndpointId())
	fmt.Fprintf(tw, "event:\t%s (%s)\n", d.GetEventId(), orDash(d.GetEventType()))
	fmt.Fprintf(tw, "state:\t%s\n", deliveryState(d))
	fmt.Fprintf(tw, "reason:\t%s\n", oneLine(d.GetStateReason(), 200))
	fmt.Fprintf(tw, "attempt:\t%s\n", deliveryAttempts(d))
	fmt.Fprintf(tw, "last error:\t%s\n", orDash(oneLine(d.GetLastError(), 200)))
	fmt.Fprintf(tw, "created:\t%s\n", fmtTime(d.GetCreatedAt()))
	fmt.Fprintf(tw, "attempted:\t%s\n", fmtTime(d.GetAttemptedAt()))
	fmt.Fprintf(tw, "scheduled:\t%s\n", fmtTime(d.GetScheduledAt()))
	fmt.Fprintf(tw, "finalized:\t%s\n", fmtTime(d.GetFinalizedAt()))
	fmt.Fprintf(tw, "link:\t%s\n", orDash(d.GetLink()))
	return tw.Flush()
}

func redeliverFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	var since timeFlag
	fs.Var(&since, "since", `only deliveries that ended at or after this time: RFC 3339 or a duration ago ("24h" after a day's outage)`)
	limit := fs.Int("limit", 0, "deliveries examined per call (0: server default of 1000, at most 1000); the command follows every page")
	return func(ctx context.Context, c *endpointsCmd, id string) error {
		req := &webhooksv1.RedeliverRequest{OwnerId: c.conn.owner, EndpointId: id, Since: since.ts, Limit: int32(min(max(*limit, -1), 1<<20))}
		var total int64
		var last *webhooksv1.RedeliverResponse
		for range maxRedeliverCalls {
			resp, err := c.client.Redeliver(ctx, req)
			if err != nil {
				return err
			}
			total += int64(resp.GetCount())
			last = resp
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if c.conn.json {
			return printJSON(c.stdout, &webhooksv1.RedeliverResponse{Count: int32(min(total, 1<<31-1)), NextPageToken: last.GetNextPageToken()})
		}
		fmt.Fprintf(c.stdout, "re-queued %d deliveries of endpoint %s\n", total, id)
		if t := last.GetNextPageToken(); t != "" {
			fmt.Fprintf(c.stdout, "stopped after %d calls; run the same command again to continue (deliveries already re-queued are skipped)\n", maxRedeliverCalls)
		}
		return nil
	}
}

// labelsFlag collects key=value labels, repeatable or comma-separated. It
// checks only the shape; the server checks the rules and names a bad key.
type labelsFlag struct{ m map[string]string }

func (f *labelsFlag) String() string { return formatLabels(f.m) }

func (f *labelsFlag) Set(v string) error {
	if f.m == nil {
		f.m = map[string]string{}
	}
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, val, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("want key=value, got %q", p)
		}
		f.m[k] = val
	}
	return nil
}

// formatLabels is labels as "k=v,k2=v2", sorted by key.
func formatLabels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// deliveryAttempts says where a delivery stands, its scheduled attempts and
// its recovery probes counted apart: "4 of 18", "4 of 18, 2 probes", or,
// while a probe is in flight, "probe 2, after 3 of 18".
func deliveryAttempts(d *webhooksv1.Delivery) string {
	n := job.Attempts{
		Attempt: int(d.GetAttempt()), Max: int(d.GetMaxAttempts()), Probes: int(d.GetProbes()),
		Probe: d.GetProbe() && d.GetState() == webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERING,
	}
	return strings.Replace(strings.TrimPrefix(n.String(), "attempt "), "after attempt ", "after ", 1)
}
