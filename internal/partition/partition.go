// Package partition spreads the delivery queues (job.DeliverPartitions of
// them) over the dispatcher processes that share one database, so that all
// deliveries to one endpoint are fetched by one process.
//
// That is what lets several replicas deliver more than one: a process that
// owns an endpoint's queue keeps the endpoint's lease between deliveries and
// hands it from one delivery to the next in memory. Without it River would
// hand each process a share of every endpoint's deliveries, and the lease
// would travel between processes all the time, every trip a write and a wait.
//
// Every process heartbeats a row in delivery_members and reads the live rows;
// all of them then compute the same assignment (the live ids in order,
// partition p to the (p mod n)-th) and work exactly their own partitions'
// queues, adding and removing River queues as members come and go. A process
// that stops deletes its row, so the others take its partitions over at their
// next heartbeat; one that dies is dropped once its heartbeat is older than
// Config.Expiry. While the members' views differ (for a heartbeat or so) two
// processes may work one queue: the endpoint lease still keeps every endpoint
// to one delivery at a time, so this costs only efficiency.
package partition

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// Queues is what a Member needs of River's client: river.Client.Queues().
type Queues interface {
	Add(queueName string, queueConfig river.QueueConfig) error
	Remove(ctx context.Context, queueName string) error
}

// Config tunes a Member. Zero values take the defaults.
type Config struct {
	// ID names this process among the members. Default: host name plus a
	// random suffix.
	ID string
	// Heartbeat is how often the member writes its row and rebalances.
	// Default 2 s.
	Heartbeat time.Duration
	// Expiry is how old a heartbeat may be before its member counts as
	// dead. Default 5 heartbeats.
	Expiry time.Duration
	// Workers is the most deliveries one partition queue runs at once in
	// this process. Default 100.
	Workers int
}

// Member takes part in the assignment of delivery partitions.
type Member struct {
	cfg    Config
	pool   *pgxpool.Pool
	queues Queues
	logger *slog.Logger

	// live is the number of live members at the last heartbeat.
	live atomic.Int32

	mu       sync.Mutex
	owned    map[int]bool // queues added
	removing map[int]bool // queues being removed
	wg       sync.WaitGroup
}

// New returns a member that works its partitions through queues (which Run
// may set instead, when they are built after the member).
func New(cfg Config, pool *pgxpool.Pool, queues Queues, logger *slog.Logger) *Member {
	if cfg.ID == "" {
		cfg.ID = defaultID()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Expiry <= 0 {
		cfg.Expiry = 5 * cfg.Heartbeat
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 100
	}
	return &Member{cfg: cfg, pool: pool, queues: queues, logger: logger,
		owned: make(map[int]bool), removing: make(map[int]bool)}
}

func defaultID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// ID is the member's id.
func (m *Member) ID() string { return m.cfg.ID }

// Active returns how many partitions take new deliveries: one per live
// member (as of the last heartbeat), at most job.DeliverPartitions. With one
// process that is one queue, fetched as efficiently as a single queue; with
// n, every process has one busy queue of its own.
func (m *Member) Active() int {
	return min(max(int(m.live.Load()), 1), job.DeliverPartitions)
}

// Assign returns the partitions that member self owns among the live members
// (in any order; sorted here). A member that is not live owns nothing.
func Assign(live []string, self string) []int {
	live = slices.Sorted(slices.Values(live))
	live = slices.Compact(live)
	i := slices.Index(live, self)
	if i < 0 {
		return nil
	}
	var out []int
	for p := range job.DeliverPartitions {
		if p%len(live) == i {
			out = append(out, p)
		}
	}
	return out
}

// Owned returns the partitions whose queues the member works now.
func (m *Member) Owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for p := range m.owned {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Works reports whether this process works queue now: it owns the queue's
// partition and is not giving it up. The direct delivery path
// (internal/delivery) asks it, so that only deliveries this process would
// fetch anyway skip the fetch.
func (m *Member) Works(queue string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.owned {
		if !m.removing[p] && job.DeliverPartitionQueue(p) == queue {
			return true
		}
	}
	return false
}

// Run heartbeats and rebalances until ctx is done, then leaves: it deletes
// its row so the others take its partitions at once. Its queues stay with
// River, which stops them when it stops. queues, if not nil, replaces the
// Queues given to New.
func (m *Member) Run(ctx context.Context, queues Queues) {
	if queues != nil {
		m.queues = queues
	}
	defer func() {
		m.wg.Wait()
		leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := m.pool.Exec(leaveCtx, `DELETE FROM delivery_members WHERE id = $1`, m.cfg.ID); err != nil {
			m.logger.WarnContext(ctx, "partition: leave", slog.Any("error", err))
		}
	}()
	ticker := time.NewTicker(m.cfg.Heartbeat)
	defer ticker.Stop()
	for {
		if err := m.Tick(ctx); err != nil && ctx.Err() == nil {
			// Keep working what we own: others will take it over if we are
			// gone for long, and the lease keeps that safe.
			m.logger.WarnContext(ctx, "partition: heartbeat failed; keeping current partitions", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Tick heartbeats once and brings the member's queues in line with the
// assignment.
func (m *Member) Tick(ctx context.Context) error {
	live, err := m.beat(ctx)
	if err != nil {
		return err
	}
	m.live.Store(int32(min(len(live), job.DeliverPartitions)))
	want := Assign(live, m.cfg.ID)
	m.mu.Lock()
	defer m.mu.Unlock()
	var added, removed []int
	for _, p := range want {
		// River's Remove holds the client's queue lock until the removed
		// queue's jobs finish, and Add would wait for it: add next time.
		if m.owned[p] || len(m.removing) > 0 {
			continue
		}
		// Each owned queue may be the busy one, so each gets the whole
		// worker budget; the others only drain leftovers. Their fallback
		// poll is slow: new jobs announce themselves.
		cfg := river.QueueConfig{MaxWorkers: m.cfg.Workers, FetchPollInterval: time.Second}
		if err := m.queues.Add(job.DeliverPartitionQueue(p), cfg); err != nil {
			return fmt.Errorf("partition: add queue %d: %w", p, err)
		}
		m.owned[p] = true
		added = append(added, p)
	}
	for p := range m.owned {
		if slices.Contains(want, p) {
			continue
		}
		delete(m.owned, p)
		m.removing[p] = true
		removed = append(removed, p)
		// Remove waits for the queue's running jobs; the heartbeat must not.
		m.wg.Go(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			err := m.queues.Remove(rctx, job.DeliverPartitionQueue(p))
			m.mu.Lock()
			defer m.mu.Unlock()
			if err != nil {
				// Still ours to finish removing; try again next time round.
				m.logger.WarnContext(ctx, "partition: remove queue", slog.Int("partition", p), slog.Any("error", err))
				m.owned[p] = true
			}
			delete(m.removing, p)
		})
	}
	if len(added) > 0 || len(removed) > 0 {
		slices.Sort(removed)
		m.logger.InfoContext(ctx, "partition: rebalanced", slog.String("member", m.cfg.ID), slog.Int("members", len(live)),
			slog.Any("added", added), slog.Any("removed", removed))
	}
	return nil
}

// beat writes this member's heartbeat and returns the live members. Rows of
// members dead for a long time are swept on the way.
func (m *Member) beat(ctx context.Context) ([]string, error) {
	rows, err := m.pool.Query(ctx, `
		WITH beat AS (
		    INSERT INTO delivery_members (id, heartbeat_at) VALUES ($1, now())
		    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()
		),
		swept AS (
		    DELETE FROM delivery_members WHERE heartbeat_at < now() - make_interval(secs => $2::float8 * 10)
		)
		SELECT id FROM delivery_members WHERE heartbeat_at >= now() - make_interval(secs => $2::float8) AND id <> $1
		UNION ALL SELECT $1`, m.cfg.ID, m.cfg.Expiry.Seconds())
	if err != nil {
		return nil, fmt.Errorf("partition: heartbeat: %w", err)
	}
	defer rows.Close()
	var live []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("partition: heartbeat: %w", err)
		}
		live = append(live, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("partition: heartbeat: %w", err)
	}
	return live, nil
}
