package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is everything one run measured.
type report struct {
	StartedAt time.Time        `json:"started_at"`
	Machine   machine          `json:"machine"`
	Scale     float64          `json:"scale"`
	Env       []string         `json:"env,omitempty"`
	Baseline  []baselineResult `json:"baseline"`
	// BaselineCommitsPS is the mean of the baseline measurements: the
	// denominator of every per_baseline_commit figure.
	BaselineCommitsPS float64  `json:"baseline_commits_per_s"`
	Results           []result `json:"results"`
}

// targetCheck is one target of a scenario, met or missed.
type targetCheck struct {
	Target string  `json:"target"`
	Want   float64 `json:"want"`
	Got    float64 `json:"got"`
	Met    bool    `json:"met"`
}

func (r *report) finish() {
	var sum float64
	for _, b := range r.Baseline {
		sum += b.CommitsPS
	}
	if len(r.Baseline) > 0 {
		r.BaselineCommitsPS = round(sum/float64(len(r.Baseline)), 1)
	}
	for i := range r.Results {
		res := &r.Results[i]
		if r.BaselineCommitsPS > 0 {
			res.PerBaselineCommit = round(res.Rate/r.BaselineCommitsPS, 3)
		}
		res.Targets = targets(res)
	}
	r.scaleOutTarget()
	r.hungTarget()
}

// rssTargetMB is the RSS ceiling of every scenario.
const rssTargetMB = 150

func atLeast(name string, want, got float64) targetCheck {
	return targetCheck{Target: name + " ≥ " + trimFloat(want), Want: want, Got: got, Met: got >= want}
}

func atMost(name string, want, got float64) targetCheck {
	return targetCheck{Target: name + " ≤ " + trimFloat(want), Want: want, Got: got, Met: got <= want}
}

// targets checks one result against its scenario's targets. A failed
// scenario has none (it shows as ERROR).
func targets(res *result) []targetCheck {
	if res.Error != "" || res.Scenario == "S9" {
		// S9 times queries; its figures are in its notes.
		return nil
	}
	var out []targetCheck
	switch {
	case res.Scenario == "S1":
		out = append(out, atLeast("deliveries per baseline commit", 0.25, res.PerBaselineCommit),
			atMost("commits per delivery", 0.6, res.CommitsPerUnit))
	case res.Scenario == "S2":
		out = append(out, atMost("snoozes per delivery", 0.1, res.SnoozesPerUnit))
	case res.Scenario == "S3":
		out = append(out, atMost("seconds from publish until all delivered", 1.5, res.Seconds))
	case res.Scenario == "S4d":
		out = append(out, atMost("commits per delivery", 1.5, res.CommitsPerUnit))
	case res.Scenario == "S5" && res.LatencyMs != nil:
		out = append(out, atMost("p99 ms", 100, res.LatencyMs.P99))
	case res.Scenario == "S5b" && res.LatencyMs != nil:
		out = append(out, atMost("p50 ms", 50, res.LatencyMs.P50), atMost("p99 ms", 250, res.LatencyMs.P99))
		if res.PublishMs != nil {
			out = append(out, atMost("Publish p50 ms", 5, res.PublishMs.P50), atMost("Publish p99 ms", 25, res.PublishMs.P99))
		}
	case strings.HasPrefix(res.Scenario, "S6"):
		out = append(out, atMost("snoozes per delivery", 0.1, res.SnoozesPerUnit))
	case res.Scenario == "S7":
		out = append(out, atLeast("deliveries per baseline commit", 0.15, res.PerBaselineCommit))
	case res.Scenario == "S8":
		out = append(out, rateTargets(res)...)
	case res.Scenario == "S12" && res.Noisy != nil:
		out = append(out, noisyTargets(res)...)
	case strings.HasPrefix(res.Scenario, "S10"):
		out = append(out, slowTargets(res)...)
	case strings.HasPrefix(res.Scenario, "O"):
		out = append(out, openTargets(res)...)
	case res.Scenario == "soak" && res.Soak != nil:
		for _, l := range res.Soak.Levels {
			switch {
			case !l.Judged:
			case l.Bounded:
				out = append(out, targetCheck{Target: l.Series + " ≤ its bound, " + trimFloat(l.Bound), Want: l.Bound, Got: l.Max, Met: l.Level})
			default:
				out = append(out, targetCheck{Target: l.Series + " levels off (median growth over the run's second half ≤ " + trimFloat(soakGrowthPct) + " %)",
					Want: soakGrowthPct, Got: l.GrowthPct, Met: l.Level})
			}
		}
	}
	return append(out, atMost("RSS MB", rssTargetMB, res.RSSPeakMB))
}

// scaleOutTarget compares the S6 runs of this report: three processes must
// deliver at least as fast as one. It is attached to the 3-process run and
// checked only when both runs completed.
func (r *report) scaleOutTarget() {
	find := func(name string) *result {
		for i := range r.Results {
			if r.Results[i].Scenario == name {
				return &r.Results[i]
			}
		}
		return nil
	}
	one, three := find("S6x1"), find("S6x3")
	if three == nil || three.Error != "" {
		return
	}
	if one == nil || one.Error != "" {
		three.notef("target deliveries/s with 3 processes ≥ with 1 process: not checked, no completed S6x1 run in this report")
		return
	}
	t := targetCheck{Target: "deliveries/s with 3 processes ≥ with 1 process (S6x1: " + trimFloat(one.Rate) + ")",
		Want: one.Rate, Got: three.Rate, Met: three.Rate >= one.Rate}
	// Before the RSS check, which targets() puts last.
	three.Targets = slices.Insert(three.Targets, max(0, len(three.Targets)-1), t)
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func na(ok bool, format string, v float64) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

func (r *report) writeTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nmachine: %d CPUs (%s), %d MB RAM, load %s; Postgres %s; synchronous_commit=%s shared_buffers=%s fsync=%s wal_sync_method=%s\n",
		m.NumCPU, m.CPUModel, m.MemTotalMB, m.LoadAvg, m.Postgres, m.Settings["synchronous_commit"], m.Settings["shared_buffers"],
		m.Settings["fsync"], m.Settings["wal_sync_method"])
	fmt.Fprintf(w, "database: %s; pg_stat_statements: %s\n", m.Database, m.Statements)
	for _, b := range r.Baseline {
		fmt.Fprintf(w, "baseline %s: %.0f single-row UPDATE commits/s at %d connections (mean %.2f ms)\n",
			b.At.Local().Format("15:04:05"), b.CommitsPS, b.Conns, b.MeanMillis)
	}
	fmt.Fprintf(w, "baseline used for ratios: %.0f commits/s\n", r.BaselineCommitsPS)
	if len(r.Env) > 0 {
		fmt.Fprintf(w, "extra dispatcher env: %s\n", strings.Join(r.Env, " "))
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tprocs\tunits\tsecs\trate/s\t×baseline\tp50 ms\tp95 ms\tp99 ms\tcommits/u\tstmts/u\tsnoozes/u\tCPU ms/u\tdisp cores\tpg cores\tbench cores\tRSS MB\trcv conns\t")
	for _, res := range r.Results {
		if res.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\t\t\t\t\t\t\t\t\t\t\t\t\t\t\tERROR\t\t\n", res.Scenario, res.Processes)
			continue
		}
		units := res.Deliveries
		if res.Unit == "row" || res.Unit == "query" {
			units = res.Rows
		}
		lat := res.LatencyMs != nil
		var p50, p95, p99 float64
		if lat {
			p50, p95, p99 = res.LatencyMs.P50, res.LatencyMs.P95, res.LatencyMs.P99
		}
		fmt.Fprintf(tw, "%s\t%d\t%d %s\t%.2f\t%.0f\t%.3f\t%s\t%s\t%s\t%.2f\t%s\t%.3f\t%.2f\t%.2f\t%s\t%.2f\t%.0f\t%s\t\n",
			res.Scenario, res.Processes, units, unitAbbrev(res.Unit), res.Seconds, res.Rate, res.PerBaselineCommit,
			na(lat, "%.0f", p50), na(lat, "%.0f", p95), na(lat, "%.0f", p99),
			res.CommitsPerUnit, na(res.Statements >= 0, "%.1f", res.StatementsPerUnit), res.SnoozesPerUnit,
			res.CPUMillisPerUnit, res.CPUCores, na(res.PGBackendCPUSeconds > 0, "%.2f", res.PGBackendCPUCores), res.BenchCPUCores, res.RSSPeakMB,
			na(res.ReceiverHosts > 0, "%.0f", float64(res.ReceiverConns)))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nunits: d = deliveries received (distinct), r = outbox rows relayed, q = timed queries (S9); /u = per unit; latency = event occurred_at → received;")
	fmt.Fprintln(w, "commits = pg_stat_database xact_commit delta of the measured database (bench's own queries excluded, idle background included);")
	fmt.Fprintln(w, "cores = CPU seconds / load seconds (dispatcher processes, Postgres backends serving them, this harness);")
	fmt.Fprintln(w, "rcv conns = TCP connections the receivers accepted over the scenario (new connections: the dispatcher's HTTP pool churn).")

	for _, res := range r.Results {
		fmt.Fprintf(w, "\n%s — %s\n", res.Scenario, res.Title)
		if res.Error != "" {
			fmt.Fprintf(w, "  ERROR: %s\n", indent(res.Error))
			continue
		}
		if res.Unit == "query" {
			// S9 delivers nothing: its figures are its notes.
			for _, n := range res.Notes {
				fmt.Fprintf(w, "  note: %s\n", n)
			}
			continue
		}
		fmt.Fprintf(w, "  %d events, %d/%d deliveries", res.Events, res.Deliveries, res.Expected)
		if res.Unit == "row" {
			fmt.Fprintf(w, ", %d rows", res.Rows)
		}
		fmt.Fprintf(w, "; publish %.2f s; window %.2f s; idle background %.1f commits/s; %d rollbacks; %.0f WAL bytes/unit (cluster-wide)\n",
			res.PublishSeconds, res.Seconds, res.IdleCommitsPS, res.Rollbacks, res.WALBytesPerUnit)
		if h := res.AttemptHistory; h != nil {
			fmt.Fprintf(w, "  attempt history: %d statements = %.4f commits per %s; %.0f of the %.0f WAL bytes per %s; %.4f ms of statement time per %s; %d bucket rows upserted\n",
				h.Calls, h.CallsPerUnit, res.Unit, h.WALBytesPerUnit, res.WALBytesPerUnit, res.Unit, h.MillisPerUnit, res.Unit, h.Attempts)
		}
		if res.LatencyMs != nil {
			fmt.Fprintf(w, "  latency ms: p50 %.1f  p95 %.1f  p99 %.1f  max %.1f\n", res.LatencyMs.P50, res.LatencyMs.P95, res.LatencyMs.P99, res.LatencyMs.Max)
		}
		if len(res.Outcomes) > 0 {
			fmt.Fprintf(w, "  outcomes: %s\n", formatOutcomes(res.Outcomes))
		}
		for _, p := range res.PerProcess {
			fmt.Fprintf(w, "  %s: CPU %.2f s, RSS peak %.1f MB, end %.1f MB\n", p.Name, p.CPUSeconds, p.RSSPeakMB, p.RSSEndMB)
		}
		fmt.Fprintf(w, "  Postgres backends serving the dispatcher: %.2f CPU s (%.2f ms per %s)\n", res.PGBackendCPUSeconds, res.PGCPUMillisPerUnit, res.Unit)
		fmt.Fprintf(w, "  max concurrent POSTs per endpoint: %d; Postgres backends at end: %d\n", res.MaxConcurrencyPerEndpoint, res.Backends)
		if res.ReceiverHosts > 0 {
			fmt.Fprintf(w, "  receivers: %d endpoints on %d host(s); %d TCP connections accepted (%.3f per delivery)\n",
				res.Endpoints, res.ReceiverHosts, res.ReceiverConns, float64(res.ReceiverConns)/float64(max(res.Deliveries, 1)))
		}
		if len(res.Stages) > 0 {
			fmt.Fprintln(w, "  stages from the jobs' timestamps (ms, p50 / p99):")
			for _, st := range res.Stages {
				fmt.Fprintf(w, "    %-40s %8.1f / %8.1f\n", st.Stage, st.P50, st.P99)
			}
		}
		if res.Soak != nil {
			writeSoak(w, res.Soak)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, t := range res.Targets {
			verdict := "MET"
			if !t.Met {
				verdict = "MISSED"
			}
			fmt.Fprintf(w, "  target %s: %s (%s)\n", t.Target, verdict, trimFloat(t.Got))
		}
		if len(res.Top) > 0 {
			fmt.Fprintf(w, "  top statements (calls per %s, mean ms):\n", res.Unit)
			for _, s := range res.Top {
				fmt.Fprintf(w, "    %8.3f  %7.3f  %s\n", s.PerDelivery, s.MeanMillis, s.Query)
			}
		}
	}
}

// writeTargetSummary counts the targets met and missed over the report.
func (r *report) writeTargetSummary(w io.Writer) {
	var met, missed int
	var missedNames, failed []string
	for _, res := range r.Results {
		if res.Error != "" {
			failed = append(failed, res.Scenario)
			continue
		}
		for _, t := range res.Targets {
			if t.Met {
				met++
			} else {
				missed++
				missedNames = append(missedNames, res.Scenario+" "+t.Target+" ("+trimFloat(t.Got)+")")
			}
		}
	}
	fmt.Fprintf(w, "\ntargets: %d met, %d missed", met, missed)
	if len(failed) > 0 {
		fmt.Fprintf(w, "; not checked (scenario failed): %s", strings.Join(failed, ", "))
	}
	fmt.Fprintln(w)
	for _, n := range missedNames {
		fmt.Fprintf(w, "  MISSED %s\n", n)
	}
}

func unitAbbrev(u string) string {
	switch u {
	case "row":
		return "r"
	case "query":
		return "q"
	}
	return "d"
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}

func formatOutcomes(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.0f", k, m[k])
	}
	return strings.Join(parts, " ")
}
