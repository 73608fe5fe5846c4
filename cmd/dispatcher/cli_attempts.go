package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/durationpb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func attemptsFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	pageSize := fs.Int("page-size", 0, "attempts per page (0: server default of 50, at most 200)")
	pageToken := fs.String("page-token", "", "page to fetch, from a previous call's next page token")
	bodies := fs.Bool("bodies", false, "print each response body in full (control characters escaped) under its row")
	return func(ctx context.Context, c *endpointsCmd, arg string) error {
		id, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("endpoints attempts: %q is not a delivery id (the DELIVERY column of 'endpoints deliveries')", arg)
		}
		resp, err := c.client.ListAttempts(ctx, &webhooksv1.ListAttemptsRequest{
			OwnerId: c.conn.owner, DeliveryId: id, PageSize: int32(min(max(*pageSize, -1), 1<<20)), PageToken: *pageToken,
		})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tSTARTED\tDURATION\tOUTCOME\tSTATUS\tERROR\tBODY")
		for _, a := range resp.GetAttempts() {
			outcome := strings.ToLower(strings.TrimPrefix(a.GetOutcome().String(), "ATTEMPT_OUTCOME_"))
			if u := a.GetSnoozedUntil(); u != nil {
				outcome += " until " + fmtTime(u)
			}
			status := "-"
			if s := a.GetHttpStatus(); s != 0 {
				status = strconv.Itoa(int(s))
			}
			number := strconv.Itoa(int(a.GetAttempt()))
			if a.GetProbe() {
				// A probe spends no attempt of the schedule.
				number = "probe " + strconv.Itoa(int(a.GetProbes()))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", number, fmtTime(a.GetStartedAt()), fmtDuration(a.GetDuration()),
				outcome, status, orDash(oneLine(printable(a.GetError()), 60)), orDash(oneLine(printable(a.GetResponseBody()), 40)))
			if *bodies && a.GetResponseBody() != "" {
				fmt.Fprintf(tw, "\t%s\n", strconv.QuoteToGraphic(a.GetResponseBody()))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(resp.GetAttempts()) == 0 {
			fmt.Fprintln(c.stdout, "(no attempts yet)")
		}
		if t := resp.GetNextPageToken(); t != "" {
			fmt.Fprintf(c.stdout, "\nmore: --page-token %s\n", t)
		}
		return nil
	}
}

func statsFlags(fs *flag.FlagSet) func(context.Context, *endpointsCmd, string) error {
	var ids stringList
	fs.Var(&ids, "ids", "endpoint ids, comma-separated or repeated (default: the owner's first 100 endpoints)")
	return func(ctx context.Context, c *endpointsCmd, _ string) error {
		if len(ids) == 0 {
			list, err := c.client.ListEndpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: c.conn.owner, PageSize: 100})
			if err != nil {
				return err
			}
			for _, ep := range list.GetEndpoints() {
				ids = append(ids, ep.GetId())
			}
			if len(ids) == 0 {
				fmt.Fprintln(c.stdout, "(no endpoints)")
				return nil
			}
		}
		resp, err := c.client.GetEndpointStats(ctx, &webhooksv1.GetEndpointStatsRequest{OwnerId: c.conn.owner, EndpointIds: ids})
		if err != nil {
			return err
		}
		if c.conn.json {
			return printJSON(c.stdout, resp)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ENDPOINT\tWINDOW\tATTEMPTS\tOK\tFAILED\t4XX\t5XX\tOTHER\tTIMEOUT\tCONN\tBLOCKED\tRETRY-AFTER\tP50\tP95\tFILTERED")
		for _, st := range resp.GetStats() {
			for _, w := range []struct {
				name string
				s    *webhooksv1.AttemptStats
			}{{"1h", st.GetLastHour()}, {"24h", st.GetLastDay()}, {"7d", st.GetLastWeek()}} {
				s := w.s
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\n", st.GetEndpointId(), w.name,
					s.GetAttempts(), s.GetSuccesses(), s.GetFailures(), s.GetHttp_4Xx(), s.GetHttp_5Xx(), s.GetHttpOther(),
					s.GetTimeouts(), s.GetConnectionErrors(), s.GetBlocked(), s.GetRetryAfter(),
					fmtDuration(s.GetLatencyP50()), fmtDuration(s.GetLatencyP95()), s.GetFiltered())
			}
		}
		return tw.Flush()
	}
}

func fmtDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return d.AsDuration().Round(100 * time.Microsecond).String()
}

// printable keeps a receiver's text from driving the terminal: control
// characters (escape sequences included) become U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return '\uFFFD'
		}
		return r
	}, s)
}
