package fanout

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/filter"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// BenchmarkFanoutFilters is the fanout of one event to an owner's 1,000
// endpoints, without filters and with one on every endpoint, on a real
// database (docs/benchmarks.md, "Endpoint filters"):
//
//   - Plan: the decision alone, as the ingest transaction makes it: the
//     endpoints read (their filters come with the rows), globs, scope,
//     filters, the jobs and the decision record.
//
//   - Fanout: the plan and River's insert of the deliveries, in a
//     transaction rolled back after each event (so each event inserts as
//     many jobs as the first).
//
//   - Decide: the plan without the database: the endpoints read once,
//     before, and every decision made again per event (what the filters
//     add to the fanout's CPU, with nothing else moving).
//
// Each reports cpu-ns/op too: this process's CPU time per event (user and
// system, getrusage), which the load of other processes on the machine
// changes less than the wall time (ns/op); Plan and Fanout also pg-cpu-ns/op,
// the CPU time of the Postgres backend serving them (from /proc, when
// Postgres runs on this machine; in clock ticks of 10 ms, so over many
// events).
//
// The shapes: NoFilters; Filters, 1,000 distinct filters of three
// conditions that the event satisfies (the same 1,000 deliveries, so the
// difference is the filters' own cost); Refusing, the same filters refusing
// the event (no delivery: 1,000 refusals recorded, 16 of them explained).
func BenchmarkFanoutFilters(b *testing.B) {
	const endpoints = 1000
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	for _, shape := range []struct {
		name   string
		filter func(i int) string
	}{
		{"NoFilters", func(int) string { return "" }},
		{"Filters", func(i int) string {
			return fmt.Sprintf(`{"data.note_id":{"$neq":"n_%d"},"data.op":{"$in":["published","updated"]},"subject":{"$startsWith":"wiki://software/"}}`, i)
		}},
		{"Refusing", func(i int) string {
			return fmt.Sprintf(`{"data.note_id":{"$neq":"n_%d"},"data.op":{"$in":["deleted"]},"subject":{"$startsWith":"wiki://software/"}}`, i)
		}},
	} {
		setup := func(b *testing.B) (*dbtest.DB, *Inline) {
			b.Helper()
			db := dbtest.New(b)
			for i := range endpoints {
				testfactory.Endpoint(ctx, b, db.Pool, &testfactory.EndpointOpts{OwnerID: ownerID, EventTypes: []string{"corpus.*"}, Filter: shape.filter(i)})
			}
			m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
			inline := NewInline(scope.NewDecider(nil, m, logger).Func(), nil, m).WithFilters(filter.NewCache(0), nil)
			return db, inline
		}
		event := func() *webhook.Event {
			return &webhook.Event{ID: uuid.NewString(), OwnerID: ownerID, Type: "corpus.note.changed", Subject: noteSubject,
				OccurredAt: time.Now(), Data: []byte(`{"op":"updated","note_id":"n_x","published":true,"was_published":true}`)}
		}

		warm := func(b *testing.B, db *dbtest.DB, inline *Inline) {
			b.Helper()
			// A running process has parsed its filters already.
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				_, err := inline.Plan(ctx, tx, []*webhook.Event{event()}, nil)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.Run("Decide/"+shape.name, func(b *testing.B) {
			db, inline := setup(b)
			rows, err := db.Pool.Query(ctx, readEndpointsSQL, []string{ownerID})
			if err != nil {
				b.Fatal(err)
			}
			byOwner, err := scanEndpoints(rows, 1)
			if err != nil {
				b.Fatal(err)
			}
			eps := &Endpoints{byOwner: byOwner, read: true}
			// A running process has parsed its filters already.
			if _, err := inline.PlanWith(ctx, eps, []*webhook.Event{event()}, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			defer cpuPerOp(b)()
			for b.Loop() {
				if _, err := inline.PlanWith(ctx, eps, []*webhook.Event{event()}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})

		b.Run("Plan/"+shape.name, func(b *testing.B) {
			db, inline := setup(b)
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			warm(b, db, inline)
			b.ReportAllocs()
			defer cpuPerOp(b)()
			defer pgCPUPerOp(b, conn.Conn())()
			for b.Loop() {
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					_, err := inline.Plan(ctx, tx, []*webhook.Event{event()}, nil)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})

		b.Run("Fanout/"+shape.name, func(b *testing.B) {
			db, inline := setup(b)
			client := db.InsertOnlyClient(b)
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			warm(b, db, inline)
			b.ReportAllocs()
			defer cpuPerOp(b)()
			defer pgCPUPerOp(b, conn.Conn())()
			for b.Loop() {
				tx, err := conn.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				e := event()
				plan, err := inline.Plan(ctx, tx, []*webhook.Event{e}, nil)
				if err == nil {
					_, _, err = inline.EnqueueTx(ctx, tx, client, plan, []Stored{{Index: 0, Event: e, Seq: 1}})
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := tx.Rollback(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuPerOp reports, when the returned function is called after the loop,
// the process's CPU time per iteration as cpu-ns/op.
func cpuPerOp(b *testing.B) func() {
	b.Helper()
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgCPUPerOp reports, when the returned function is called after the loop,
// the CPU time per iteration of the Postgres backend behind conn, as
// pg-cpu-ns/op; nothing when its /proc entry cannot be read (Postgres on
// another machine).
func pgCPUPerOp(b *testing.B, conn *pgx.Conn) func() {
	b.Helper()
	var pid int
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	start, ok := procCPU(pid)
	return func() {
		if end, ok2 := procCPU(pid); ok && ok2 && b.N > 0 {
			b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "pg-cpu-ns/op")
		}
	}
}

// procCPU is a process's user and system time from /proc/<pid>/stat, in
// clock ticks of 10 ms (Linux's USER_HZ).
func procCPU(pid int) (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	rest := raw[bytes.LastIndexByte(raw, ')')+2:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// BenchmarkApplyFilters is the filters' own step of one fanout to 1,000
// admitted endpoints, alone (no database, no scope): the cache look-up and
// the evaluation per endpoint, the event's data decoded once. Without
// filters it is a pass over the candidates.
func BenchmarkApplyFilters(b *testing.B) {
	const endpoints = 1000
	e := &webhook.Event{ID: "evt_1", OwnerID: ownerID, Type: "corpus.note.changed", Subject: noteSubject,
		Data: []byte(`{"op":"updated","note_id":"n_x","published":true,"was_published":true}`)}
	for _, shape := range []struct {
		name   string
		filter func(i int) string
	}{
		{"NoFilters", func(int) string { return "" }},
		{"Filters", func(i int) string {
			return fmt.Sprintf(`{"data.note_id":{"$neq":"n_%d"},"data.op":{"$in":["published","updated"]},"subject":{"$startsWith":"wiki://software/"}}`, i)
		}},
		{"Refusing", func(i int) string {
			return fmt.Sprintf(`{"data.note_id":{"$neq":"n_%d"},"data.op":{"$in":["deleted"]},"subject":{"$startsWith":"wiki://software/"}}`, i)
		}},
	} {
		b.Run(shape.name, func(b *testing.B) {
			admitted := make([]candidate, endpoints)
			for i := range admitted {
				admitted[i].ep.ID = uuid.NewString()
				if f := shape.filter(i); f != "" {
					admitted[i].filter = []byte(f)
				}
			}
			fs := filters{cache: filter.NewCache(0)}
			var rec decision.Builder
			fs.apply(catalog.Default(), &webhook.Event{Type: e.Type, Subject: e.Subject, Data: e.Data}, admitted, &rec) // parsed once, as in a running process
			b.ReportAllocs()
			for b.Loop() {
				var rec decision.Builder
				// A fresh event each time: its data is decoded again.
				fs.apply(catalog.Default(), &webhook.Event{Type: e.Type, Subject: e.Subject, Data: e.Data}, admitted, &rec)
			}
		})
	}
}
