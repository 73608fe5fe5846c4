package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// The open-loop scenario ("open"): Publish at fixed offered rates, one event
// per call and one delivery per event (fixedRate, as S5), and in the same
// run, right after each rate, the floor, in two parts, each the same
// generator at the same rate with the same number of callers:
//   - the transport: a no-op gRPC call to the same dispatcher over the same
//     connection, authenticated as Publish is, which its server refuses at
//     its first check without touching the database (GetEndpoint of a
//     malformed id: the tap handler's token check, the interceptors, the
//     decode and an InvalidArgument back);
//   - the durable write: one single-row INSERT in a transaction of its own
//     (INSERT and COMMIT), over a pool of the size the dispatcher's own has.
// A Publish call is at least both: a call over the wire and one row made
// durable before it answers; what it costs beyond their sum is the
// dispatcher's. Its targets are stated against the sum. The rates are
// -open-rates (200, 500 and 1,000/s by default).

// openSenders is the callers per offered rate: 2 s of calls in flight at
// most, as S5b has at 1,000/s.
func openSenders(rate int) int { return max(64, 2*rate) }

// floorRow is about an event's row: an owner, a type and 200 bytes of data.
const floorRow = `{"op":"updated","note_id":"0123456789abcdef0123456789abcdef","published":true,"was_published":true,` +
	`"subject":"wiki://software/project/standmeet/architecture","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`

// floorFigures is what the floor run measured: CallMs the durable INSERT,
// RPCMs the no-op gRPC call, SumMs their sum percentile by percentile (the
// transport-inclusive floor).
type floorFigures struct {
	Rate       int      `json:"rate"`
	Calls      int      `json:"calls"`
	Conns      int      `json:"conns"`
	CallMs     *latency `json:"call_ms"`
	BusyPct    float64  `json:"machine_busy_pct"`
	Late       int      `json:"late_starts"`
	RPCMs      *latency `json:"rpc_ms,omitempty"`
	RPCBusyPct float64  `json:"rpc_machine_busy_pct,omitempty"`
	RPCLate    int      `json:"rpc_late_starts,omitempty"`
	SumMs      *latency `json:"sum_ms,omitempty"`
}

// sum is the transport-inclusive floor: the INSERT's and the no-op call's
// percentiles added (nil until both are measured).
func (f *floorFigures) sum() *latency {
	if f.CallMs == nil || f.RPCMs == nil {
		return nil
	}
	a, b := f.CallMs, f.RPCMs
	return &latency{P50: round(a.P50+b.P50, 2), P90: round(a.P90+b.P90, 2), P95: round(a.P95+b.P95, 2),
		P99: round(a.P99+b.P99, 2), Max: round(a.Max+b.Max, 2)}
}

// paced calls fn(i) for i in [0, calls) at rate a second from senders
// callers (open loop: a call is handed to a caller at its time whether or
// not the earlier ones have answered) and returns each call's duration and
// how many were handed over more than 50 ms late.
func paced(ctx context.Context, rate, calls, senders int, fn func(ctx context.Context, i int) error) ([]time.Duration, int, error) {
	took := make([]time.Duration, calls)
	jobs := make(chan int, calls)
	var (
		wg       sync.WaitGroup
		firstErr atomic.Value
		late     int
	)
	for range senders {
		wg.Go(func() {
			for i := range jobs {
				t := time.Now()
				if err := fn(ctx, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
				took[i] = time.Since(t)
			}
		})
	}
	t0 := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := 0; i < calls && ctx.Err() == nil; i++ {
		at := t0.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		} else if wait < -50*time.Millisecond {
			late++
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, late, err
	}
	return took, late, ctx.Err()
}

// rpcFloor runs the no-op gRPC call (see the top of this file) at rate for
// dur from senders callers, against p, into f.
func (b *bench) rpcFloor(ctx context.Context, s *session, p *proc, f *floorFigures, rate, senders int, dur time.Duration) error {
	calls := int(dur.Seconds() * float64(rate))
	admin := s.creds.adminCtx(ctx)
	req := &webhooksv1.GetEndpointRequest{OwnerId: "bench-floor", EndpointId: "not-an-id"}
	busy := machineBusy()
	took, late, err := paced(admin, rate, calls, senders, func(ctx context.Context, _ int) error {
		_, err := p.endpoints().GetEndpoint(ctx, req)
		if status.Code(err) == codes.InvalidArgument {
			return nil // the answer it is meant to get
		}
		if err == nil {
			return errors.New("GetEndpoint of a malformed id succeeded")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("no-op gRPC call: %w", err)
	}
	f.RPCMs, f.RPCBusyPct, f.RPCLate = percentiles(took), busy(), late
	f.SumMs = f.sum()
	return nil
}

// floor runs the bare INSERT + COMMIT at rate for dur from senders callers
// over conns connections, in schema.
func (b *bench) floor(ctx context.Context, schema string, rate, senders, conns int, dur time.Duration) (*floorFigures, error) {
	q := pgx.Identifier{schema, "bench_floor"}.Sanitize()
	if _, err := b.admin.Exec(ctx, `CREATE TABLE `+q+` (id bigserial PRIMARY KEY, owner_id text NOT NULL, type text NOT NULL, data jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("floor table: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(b.dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(conns)
	pcfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	// Warm the pool, as the dispatcher's is after its start.
	var warm []*pgxpool.Conn
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			break
		}
		warm = append(warm, c)
	}
	for _, c := range warm {
		c.Release()
	}
	calls := int(dur.Seconds() * float64(rate))
	sql := `INSERT INTO ` + q + ` (owner_id, type, data) VALUES ($1, $2, $3)`
	busy := machineBusy()
	took, late, err := paced(ctx, rate, calls, senders, func(ctx context.Context, i int) error {
		_, err := pool.Exec(ctx, sql, "bench-o"+strconv.Itoa(i%100), "code.issued", floorRow)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("floor insert: %w", err)
	}
	return &floorFigures{Rate: rate, Calls: calls, Conns: conns, CallMs: percentiles(took), BusyPct: busy(), Late: late}, nil
}

// percentiles returns p50, p90, p95, p99 and max of ds in milliseconds.
func percentiles(ds []time.Duration) *latency {
	if len(ds) == 0 {
		return &latency{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return round(float64(sorted[max(0, min(i, len(sorted)-1))])/float64(time.Millisecond), 2)
	}
	return &latency{P50: at(0.5), P90: at(0.9), P95: at(0.95), P99: at(0.99), Max: at(1)}
}

// machineBusy starts measuring how busy the whole machine is (every
// process, /proc/stat) and returns the function that ends it: the busy time
// over the wall time, in percent of one core (200 % is both cores of a
// 2-core box). -1 where /proc/stat cannot be read.
func machineBusy() func() float64 {
	busy0, total0, err := cpuTimes()
	if err != nil {
		return func() float64 { return -1 }
	}
	return func() float64 {
		busy1, total1, err := cpuTimes()
		if err != nil || total1 <= total0 {
			return -1
		}
		return round(100*float64(runtime.NumCPU())*float64(busy1-busy0)/float64(total1-total0), 1)
	}
}

// cpuTimes reads the machine's busy and total CPU ticks from /proc/stat
// (busy: all but idle and iowait).
func cpuTimes() (busy, total uint64, err error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0, errors.New("unexpected /proc/stat")
	}
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if i >= 8 {
			break // guest time is counted in user already
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// openTargets: at 500/s CPU per delivery (dispatcher and its Postgres
// backends) ≤ 1.2 ms, commits per delivery ≤ 0.6 and Publish p50 ≤ 8 ms;
// at 1,000/s Publish p50 ≤ 2 × the transport-inclusive floor's and p99 ≤
// 3 × (the no-op gRPC call's and the durable INSERT's percentiles added;
// the INSERT's alone where the call was not measured).
func openTargets(res *result) []targetCheck {
	var out []targetCheck
	switch res.Scenario {
	case "O500":
		out = append(out, atMost("CPU ms per delivery (dispatcher + Postgres)", 1.2, round(res.CPUMillisPerUnit+res.PGCPUMillisPerUnit, 3)),
			atMost("commits per delivery", 0.6, res.CommitsPerUnit))
		if res.PublishMs != nil {
			out = append(out, atMost("Publish p50 ms", 8, res.PublishMs.P50))
		}
	case "O1000":
		if res.PublishMs != nil && res.Floor != nil && res.Floor.CallMs != nil {
			floor, what := res.Floor.CallMs, "the INSERT floor's"
			if sum := res.Floor.SumMs; sum != nil {
				floor, what = sum, "the transport-inclusive floor's"
			}
			out = append(out, atMost("Publish p50 ms (2 × "+what+" "+trimFloat(floor.P50)+")", 2*floor.P50, res.PublishMs.P50),
				atMost("Publish p99 ms (3 × "+what+" "+trimFloat(floor.P99)+")", 3*floor.P99, res.PublishMs.P99))
		}
	}
	return out
}
