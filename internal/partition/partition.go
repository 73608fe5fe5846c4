// Package partition spreads the delivery queues over the dispatcher
// processes that share one database, so that all deliveries to one endpoint
// are fetched by one process, and gives back the work of a process that
// died.
//
// That is what lets several replicas deliver more than one: a process that
// owns an endpoint's queue keeps the endpoint's lease between deliveries and
// hands it from one delivery to the next in memory. Without it River would
// hand each process a share of every endpoint's deliveries, and the lease
// would travel between processes all the time, every trip a write and a wait.
//
// Every process heartbeats a row in delivery_members and reads the others';
// all of them then compute the same assignment (Assign: a slot per live
// member, one active partition per slot) and work exactly their own
// partitions' queues, adding and removing River queues as members come and
// go. While the members' views differ (for a heartbeat or so) two processes
// may work one queue, or a queue may wait a beat: the endpoint lease still
// keeps every endpoint to its max_in_flight, so this costs only efficiency.
//
// A member is dead when its heartbeat is older than Config.Expiry, or at
// once when none of its database sessions is left (Config.Backend): a
// process killed by SIGKILL or OOM loses its connections with it, and
// Postgres ends their sessions, so the others see it gone at their next
// heartbeat instead of after an expiry. A process that stops deletes its
// row, so the others take its partitions at their next heartbeat.
//
// The jobs a dead member was running (River records the process in
// attempted_by) and the deliveries it had taken for itself (handed off, with
// its id in their note) are given back by the first live member that sees it
// dead: available at once, instead of after River's rescuer (which runs only
// on River's leader, RescueStuckJobsAfter after the attempt began) or the
// handed-off job's hold. Every member does this, so it does not wait for a
// leader that may itself have died.
package partition

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
	// ID names this process among the members, and must be River's client
	// ID too (river.Config.ID): River records it in attempted_by of the
	// jobs it fetches, which is how the others find a dead member's jobs.
	// Unique per process, never reused. Default: host name plus a random
	// suffix (NewID).
	ID string
	// Heartbeat is how often the member writes its row, rebalances and
	// looks for dead members. Default 1 s.
	Heartbeat time.Duration
	// Expiry is how old a heartbeat may be before its member counts as
	// dead, whatever its sessions. Default 5 heartbeats.
	Expiry time.Duration
	// Reserve is how long a dead member's slot waits for a replacement
	// (a restarted process takes it, and nothing else moves) before the
	// others close the gap. Default 30 s.
	Reserve time.Duration
	// Backend is the application_name every database session of this
	// process carries, unique to it (BackendName); "" if the sessions carry
	// none of their own (the database URL set one). With it, the others see
	// this process dead as soon as its sessions are gone; without it, only
	// once its heartbeat expires.
	Backend string
	// Hold is how long a handed-off delivery is scheduled ahead
	// (delivery.DirectConfig.Hold): a dead member's are looked for no
	// further ahead. Default 1 h.
	Hold time.Duration
	// Workers is the most deliveries one partition queue runs at once in
	// this process. Default 100.
	Workers int
	// Rescued, if set, is told how many jobs of dead members this member
	// gave back: running ones, and handed-off ones.
	Rescued func(running, handedOff int)
	// Gone, if set, is given the dead members whose jobs this member gave
	// back because their sessions were gone: their processes are gone (a
	// killed process's connections, to the database and to receivers,
	// close with it), not only slow. The deliver worker releases their
	// endpoint leases (delivery.Worker.ReleaseLeasesOf).
	Gone func(ctx context.Context, members []string) error
}

// What the jobs given back were: the "kind" label of
// dispatcher_jobs_rescued_total.
const (
	// RescuedRunning: a job the dead member was running.
	RescuedRunning = "running"
	// RescuedHandedOff: a delivery the dead member had handed to itself
	// (internal/delivery's direct path) and not finished.
	RescuedHandedOff = "handed_off"
)

// RescueKinds returns every kind of job given back.
func RescueKinds() []string { return []string{RescuedRunning, RescuedHandedOff} }

// NewID returns a member id: the host name (at most 40 bytes of it) plus a
// random suffix, so that several processes on one host differ and a
// restarted process is a new member.
func NewID() string {
	host, _ := os.Hostname()
	if len(host) > 40 {
		host = host[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// BackendName is the application_name for the database sessions of the
// member id: Postgres keeps at most 63 bytes of it, and the others look it
// up as written.
func BackendName(id string) string {
	name := "dispatcher " + id
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// Member takes part in the assignment of delivery partitions.
type Member struct {
	cfg    Config
	pool   *pgxpool.Pool
	queues Queues
	logger *slog.Logger

	// active is the number of active partitions at the last heartbeat.
	active atomic.Int32

	mu sync.Mutex
	// slot is this member's slot as last computed (-1: none yet).
	slot int
	// stale: dead members whose slots to clear (Assignment.Stale).
	stale []string
	// backendSeen: this member's sessions carry cfg.Backend, as Postgres
	// shows them to the others; only then is it recorded for them to check.
	backendSeen bool
	// steady counts the heartbeats in a row that succeeded: right after a
	// database outage every member's heartbeat is old, so a member that
	// has just come back waits for the others to beat before it calls
	// anyone dead.
	steady   int
	owned    map[int]bool // queues added
	removing map[int]bool // queues being removed
	wg       sync.WaitGroup
}

// New returns a member that works its partitions through queues (which Run
// may set instead, when they are built after the member).
func New(cfg Config, pool *pgxpool.Pool, queues Queues, logger *slog.Logger) *Member {
	if cfg.ID == "" {
		cfg.ID = NewID()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.Expiry <= 0 {
		cfg.Expiry = 5 * cfg.Heartbeat
	}
	if cfg.Reserve <= 0 {
		cfg.Reserve = 30 * time.Second
	}
	if cfg.Hold <= 0 {
		cfg.Hold = time.Hour
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 100
	}
	return &Member{cfg: cfg, pool: pool, queues: queues, logger: logger, slot: -1,
		owned: make(map[int]bool), removing: make(map[int]bool)}
}

// ID is the member's id.
func (m *Member) ID() string { return m.cfg.ID }

// Active returns how many partitions take new deliveries (as of the last
// heartbeat; 1 before the first): one per live member, plus the reserved
// slots of members that died a moment ago. With one process that is one
// queue, fetched as efficiently as a single queue; with n, every process has
// one busy queue of its own.
func (m *Member) Active() int {
	return max(int(m.active.Load()), 1)
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

// Tick heartbeats once, brings the member's queues in line with the
// assignment, and gives back the jobs of members it finds dead.
func (m *Member) Tick(ctx context.Context) error {
	v, err := m.beat(ctx)
	if err != nil {
		m.mu.Lock()
		m.steady = 0
		m.mu.Unlock()
		return err
	}
	a := Assign(v.peers)
	partitions := max(v.partitions, a.Active, job.DeliverPartitionsMin)
	if a.Active > v.partitions {
		// Recorded before any delivery goes to the new partition, so that
		// the partition is worked as long as it may hold jobs, whatever the
		// cluster shrinks to.
		if err := m.raise(ctx, a.Active); err != nil {
			return err
		}
	}
	want := a.Owned(m.cfg.ID, partitions)

	m.mu.Lock()
	m.slot = a.Slot(m.cfg.ID)
	m.stale = a.Stale()
	m.backendSeen = m.backendSeen || v.backendSeen
	m.steady++
	steady := m.steady
	added, removed, err := m.apply(ctx, want)
	m.mu.Unlock()
	m.active.Store(int32(a.Active))
	if len(added) > 0 || len(removed) > 0 {
		m.logger.InfoContext(ctx, "partition: rebalanced", slog.String("member", m.cfg.ID), slog.Int("slot", a.Slot(m.cfg.ID)),
			slog.Int("members", len(a.bySlot)), slog.Int("active", a.Active), slog.Any("added", added), slog.Any("removed", removed))
	}
	if err != nil {
		return err
	}
	if len(v.dead) > 0 && steady >= m.steadyBeats() {
		return m.rescue(ctx, v.dead)
	}
	return nil
}

// apply adds the queues of the partitions in want that the member does not
// work yet and starts removing those it works and should not. m.mu is held.
func (m *Member) apply(ctx context.Context, want []int) (added, removed []int, err error) {
	for _, p := range want {
		// A queue still being removed is added again once it is gone.
		if m.owned[p] || m.removing[p] {
			continue
		}
		// Each owned queue may be the busy one, so each gets the whole
		// worker budget; the others only drain leftovers. Their fallback
		// poll is slow: new jobs announce themselves.
		cfg := river.QueueConfig{MaxWorkers: m.cfg.Workers, FetchPollInterval: time.Second}
		if err := m.queues.Add(job.DeliverPartitionQueue(p), cfg); err != nil {
			return added, removed, fmt.Errorf("partition: add queue %d: %w", p, err)
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
		m.wg.Go(func() { m.remove(ctx, p) })
	}
	slices.Sort(removed)
	return added, removed, nil
}

// removeWait bounds one call of River's Remove. Remove stops the queue's
// fetching at once but then waits for its running jobs (up to a delivery's
// timeout) holding River's queue lock, which an Add waits for: bounded, the
// member can take up another partition meanwhile, and calls again until the
// queue is gone.
const removeWait = 500 * time.Millisecond

// removeFor bounds the whole removal; a queue not removed by then is tried
// again at the next heartbeat.
const removeFor = 5 * time.Minute

// remove removes partition p's queue from River, until ctx is done (the
// member stops; River stops the queue itself).
func (m *Member) remove(ctx context.Context, p int) {
	var err error
	for deadline := time.Now().Add(removeFor); ctx.Err() == nil && time.Now().Before(deadline); {
		rctx, cancel := context.WithTimeout(ctx, removeWait)
		err = m.queues.Remove(rctx, job.DeliverPartitionQueue(p))
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		// Running jobs left, and fetching has stopped: let an Add through.
		timer := time.NewTimer(removeWait / 5)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		// Still ours to finish removing: try again next time round.
		m.logger.WarnContext(ctx, "partition: remove queue", slog.Int("partition", p), slog.Any("error", err))
		m.owned[p] = true
	}
	delete(m.removing, p)
}

// view is what one heartbeat read.
type view struct {
	peers []Peer
	// dead lists the members that died, by their sessions or their
	// heartbeat, whose jobs nobody has given back yet.
	dead []string
	// partitions is the high-water mark of active partitions (0: none).
	partitions int
	// backendSeen: Postgres shows this session with cfg.Backend.
	backendSeen bool
}

// beatSQL writes this member's heartbeat and reads every member: its slot,
// the age of its heartbeat by the database's clock, whether its sessions
// are gone (NULL: it records no backend name, so nobody can tell), and
// whether its jobs were given back. Rows of members dead for long are swept
// on the way.
const beatSQL = `
WITH beat AS (
    INSERT INTO delivery_members (id, heartbeat_at, slot, backend) VALUES ($1, now(), $2::int, $3::text)
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), slot = excluded.slot, backend = excluded.backend, rescued_at = NULL
),
swept AS (
    DELETE FROM delivery_members WHERE heartbeat_at < now() - make_interval(secs => $4::float8) AND id <> $1
),
cleared AS (
    UPDATE delivery_members SET slot = NULL WHERE id = ANY($6::text[]) AND id <> $1 AND slot IS NOT NULL
)
SELECT m.id, coalesce(m.slot, -1), extract(epoch FROM now() - m.heartbeat_at)::float8,
       CASE WHEN m.backend IS NULL THEN NULL
            ELSE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = m.backend) END,
       m.rescued_at IS NOT NULL,
       coalesce((SELECT max(partitions) FROM delivery_partitions), 0)
  FROM delivery_members m
 WHERE m.id <> $1
UNION ALL
SELECT $1, coalesce($2::int, -1), 0::float8,
       NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = pg_backend_pid() AND a.application_name = $5::text),
       false,
       coalesce((SELECT max(partitions) FROM delivery_partitions), 0)`

// beat writes this member's heartbeat and reads the members.
func (m *Member) beat(ctx context.Context) (*view, error) {
	m.mu.Lock()
	var slot *int32
	if m.slot >= 0 {
		s := int32(m.slot)
		slot = &s
	}
	var backend *string
	if m.backendSeen {
		backend = &m.cfg.Backend
	}
	stale := m.stale
	m.mu.Unlock()
	sweep := 10 * max(m.cfg.Expiry, m.cfg.Reserve)
	rows, err := m.pool.Query(ctx, beatSQL, m.cfg.ID, slot, backend, sweep.Seconds(), m.cfg.Backend, stale)
	if err != nil {
		return nil, fmt.Errorf("partition: heartbeat: %w", err)
	}
	defer rows.Close()
	v := &view{}
	for rows.Next() {
		var (
			id         string
			slot       int32
			age        float64
			gone       *bool
			rescued    bool
			partitions int32
		)
		if err := rows.Scan(&id, &slot, &age, &gone, &rescued, &partitions); err != nil {
			return nil, fmt.Errorf("partition: heartbeat: %w", err)
		}
		v.partitions = int(partitions)
		if id == m.cfg.ID {
			v.backendSeen = m.cfg.Backend != "" && gone != nil && !*gone
			v.peers = append(v.peers, Peer{ID: id, Slot: int(slot), Live: true})
			continue
		}
		beat := time.Duration(age * float64(time.Second))
		sessionsGone := gone != nil && *gone
		live := beat <= m.cfg.Expiry && !sessionsGone
		if live || beat <= m.cfg.Reserve {
			v.peers = append(v.peers, Peer{ID: id, Slot: int(slot), Live: live})
		}
		if !live && !rescued && m.rescuable(beat, gone) {
			v.dead = append(v.dead, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("partition: heartbeat: %w", err)
	}
	return v, nil
}

// rescuable says whether a member whose heartbeat is beat old and whose
// sessions are gone (nil: unknown) is dead for its jobs too. Sessions gone
// means the process is: its jobs go back after a short grace (a session
// reconnecting after a blip). A member that still has sessions but no
// heartbeat may be alive and only slow; its running jobs are left to River's
// rescuer, which waits for their timeout. A member that records no backend
// name counts as dead twice its expiry after its last beat.
func (m *Member) rescuable(beat time.Duration, gone *bool) bool {
	switch {
	case gone == nil:
		return beat > 2*m.cfg.Expiry
	case *gone:
		return beat > m.grace()
	default:
		return false
	}
}

// grace is how long a member without sessions keeps its jobs: a session
// reconnecting after a blip has time to show up again.
func (m *Member) grace() time.Duration { return 3 * m.cfg.Heartbeat }

// steadyBeats is how many heartbeats in a row a member must have written
// before it calls another dead: after a database outage everyone's
// heartbeat is old and everyone's sessions were cut, so the others get as
// long as the expiry to come back.
func (m *Member) steadyBeats() int { return max(int(m.cfg.Expiry/m.cfg.Heartbeat), 2) }

// raise records that the first n partitions (n = partitions) may hold
// deliveries.
func (m *Member) raise(ctx context.Context, partitions int) error {
	if _, err := m.pool.Exec(ctx, `
		INSERT INTO delivery_partitions (partitions) VALUES ($1)
		ON CONFLICT (singleton) DO UPDATE SET partitions = greatest(delivery_partitions.partitions, excluded.partitions)`,
		partitions); err != nil {
		return fmt.Errorf("partition: record %d partitions: %w", partitions, err)
	}
	return nil
}

// rescueSQL gives back the jobs of dead members ($1), each member once (its
// row's rescued_at; the conditions that made it dead are checked again, so a
// member that beat in between is left alone):
//
//   - jobs it was running (the last of attempted_by): available again. The
//     attempt counts (its request may have left) and the error says so; a
//     job on its last attempt is discarded, as River's rescuer would. Its
//     scheduled_at stays, so it goes before deliveries queued after it.
//   - deliveries it had handed to itself (scheduled, attempt 0, its id in
//     the note): available again, due from when they were queued, with the
//     attempt counted the same way, since they are started the moment they
//     are handed off.
//
// It returns the members it gave back, those dead by their sessions (not
// only by an old heartbeat) first.
const rescueSQL = `
WITH dead AS (
    UPDATE delivery_members m SET rescued_at = now()
     WHERE m.id = ANY($1::text[]) AND m.rescued_at IS NULL
       AND ((m.backend IS NOT NULL AND m.heartbeat_at < now() - make_interval(secs => $2::float8)
             AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = m.backend))
         OR (m.backend IS NULL AND m.heartbeat_at < now() - make_interval(secs => $3::float8)))
 RETURNING m.id, m.backend IS NOT NULL AS gone
),
cut AS (
    UPDATE river_job j
       SET state        = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END::river_job_state,
           scheduled_at = least(j.scheduled_at, now()),
           finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
           errors       = array_append(coalesce(j.errors, '{}'),
                              jsonb_build_object('at', now(), 'attempt', j.attempt, 'error', $4::text, 'trace', ''))
      FROM dead
     WHERE j.state = 'running' AND j.kind = ANY($5::text[])
       AND j.attempted_by[cardinality(j.attempted_by)] = dead.id
 RETURNING j.id
),
handed AS (
    UPDATE river_job j
       SET state        = 'available',
           scheduled_at = least(j.created_at, now()),
           attempt      = 1,
           attempted_at = coalesce(j.attempted_at, j.created_at),
           attempted_by = ARRAY[dead.id],
           errors       = array_append(coalesce(j.errors, '{}'),
                              jsonb_build_object('at', now(), 'attempt', 1, 'error', $4::text, 'trace', '')),
           metadata     = j.metadata - 'output'
      FROM dead
     WHERE j.state = 'scheduled' AND j.kind = $6::text AND j.attempt = 0
       AND j.scheduled_at <= now() + make_interval(secs => $7::float8)
       AND j.metadata -> 'output' ->> 'snooze_reason' = $8::text
       AND j.metadata -> 'output' ->> 'by' = dead.id
 RETURNING j.id
)
SELECT coalesce((SELECT array_agg(id ORDER BY NOT gone, id) FROM dead), '{}'),
       (SELECT count(*) FILTER (WHERE gone) FROM dead)::int,
       (SELECT count(*) FROM cut)::int, (SELECT count(*) FROM handed)::int`

// rescue gives back the jobs of the dead members, and has the leases of
// those whose sessions are gone released.
func (m *Member) rescue(ctx context.Context, dead []string) error {
	var (
		members               []string
		gone, running, handed int
	)
	err := m.pool.QueryRow(ctx, rescueSQL, dead, m.grace().Seconds(), (2*m.cfg.Expiry).Seconds(), job.JobCut,
		[]string{job.KindDeliver, job.KindFanout}, job.KindDeliver, m.cfg.Hold.Seconds(), job.SnoozeDirect).Scan(&members, &gone, &running, &handed)
	if err != nil {
		return fmt.Errorf("partition: give back the jobs of dead members: %w", err)
	}
	if len(members) == 0 {
		return nil
	}
	m.logger.InfoContext(ctx, "partition: gave back the jobs of dead members", slog.Any("members", members),
		slog.Int("running", running), slog.Int("handed_off", handed))
	if m.cfg.Rescued != nil {
		m.cfg.Rescued(running, handed)
	}
	if gone > 0 && m.cfg.Gone != nil {
		if err := m.cfg.Gone(ctx, members[:gone]); err != nil {
			// Their leases expire by themselves.
			m.logger.WarnContext(ctx, "partition: release the leases of dead members", slog.Any("error", err))
		}
	}
	return nil
}
