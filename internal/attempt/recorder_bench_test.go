package attempt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// BenchmarkWrite measures one batch's statement per attempt, as S4d and S7
// of cmd/dispatcher-bench load it: 100 endpoints, each attempt a success
// with an empty body, batches written one after another in the same minute
// (so after the first batch every bucket row is updated, not inserted).
// ns/op is per attempt, the Go side, the round trip and the commit
// included; pg-ns/op is the statement's execution time alone, where
// pg_stat_statements is installed, and pg-cpu-ns/op its backend's CPU time,
// where the server is local (steadier than either time on a busy machine);
// WAL-B/op is the server's WAL per attempt.
//
//	TEST_DATABASE_URL=… go test -run '^$' -bench BenchmarkWrite -benchtime 20000x ./internal/attempt/
func BenchmarkWrite(b *testing.B) {
	for _, batch := range []int{400, 1000, 2000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			benchmarkWrite(b, batch)
		})
	}
}

func benchmarkWrite(b *testing.B, batch int) {
	b.Helper()
	ctx := context.Background()
	db := dbtest.New(b)
	endpoints := make([]uuid.UUID, 100)
	for i := range endpoints {
		endpoints[i] = uuid.New()
	}
	start := time.Now().Truncate(time.Minute)
	var delivery int64
	next := func(n int) []Attempt {
		out := make([]Attempt, n)
		for i := range out {
			delivery++
			out[i] = Attempt{
				DeliveryID: delivery, Number: 1, OwnerID: "owner-" + strconv.Itoa(int(delivery%100)),
				EndpointID: endpoints[delivery%100], EventID: uuid.NewString(),
				StartedAt: start.Add(time.Duration(delivery) * time.Microsecond), Duration: 2 * time.Millisecond,
				Outcome: OutcomeSuccess, Status: 200,
			}
		}
		return out
	}
	// One connection, so that its backend's CPU time is the statement's.
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	// Warm: the bucket rows exist, the statement is prepared.
	if err := write(ctx, conn, next(batch), nil); err != nil {
		b.Fatal(err)
	}
	wal0, pg0 := position(ctx, b, db)
	cpu0, cpuOK := backendCPU(backend)
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		as := next(min(batch, b.N-done))
		b.StartTimer()
		if err := write(ctx, conn, as, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wal1, pg1 := position(ctx, b, db)
	if cpu1, ok := backendCPU(backend); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "pg-cpu-ns/op")
	}
	b.ReportMetric((wal1-wal0)/float64(b.N), "WAL-B/op")
	if pg0 >= 0 && pg1 >= 0 {
		b.ReportMetric((pg1-pg0)*1e6/float64(b.N), "pg-ns/op")
	}
}

// backendCPU is the user and system CPU time of a local Postgres backend,
// from /proc (false where that is not readable, as for a remote server).
func backendCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command name, which is in parentheses: utime
	// and stime are the 12th and 13th of them, in clock ticks (100 Hz).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * 10 * time.Millisecond, true
}

// position is the server's WAL position and, where pg_stat_statements is
// installed, the history statement's total execution time in ms (-1
// without it).
func position(ctx context.Context, b *testing.B, db *dbtest.DB) (wal, ms float64) {
	b.Helper()
	if err := db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&wal); err != nil {
		b.Fatal(fmt.Errorf("wal position: %w", err))
	}
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0) FROM public.pg_stat_statements
 WHERE query LIKE '%INSERT INTO delivery_attempts%'`).Scan(&ms); err != nil {
		return wal, -1
	}
	return wal, ms
}
