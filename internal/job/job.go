// Package job declares the River job kinds of the pipeline and their queues:
// webhook.fanout {event_id} and webhook.deliver {endpoint_id, event_id}, plus
// the retention job. Args live here, apart from their workers, so ingest can
// enqueue a fanout and the endpoint service can list deliveries without
// importing the workers.
package job

import (
	"hash/fnv"
	"strconv"
	"time"

	"github.com/riverqueue/river"
)

// Queue names. Fanout and delivery have their own queues so a burst of one
// cannot starve the other.
const (
	QueueFanout      = "fanout"
	QueueMaintenance = "maintenance"
)

// DeliverPartitionsMin is the fewest partition queues that are always
// worked, busy or not: twelve, the fixed count before partitions followed
// the cluster, whose queues may still hold jobs an older version queued.
//
// Deliveries are spread over partition queues (deliver_0, deliver_1, …) by
// endpoint, so that several processes can each fetch whole endpoints' work:
// every delivery to one endpoint lands in one queue, and each queue is worked
// by one process at a time (internal/partition). The number of partitions
// that take new deliveries follows the cluster: one per live process (the
// "active" count), so each process has one busy queue of its own and a 13th
// process delivers like the first. Partitions beyond the active count only
// drain what was queued while there were more processes.
const DeliverPartitionsMin = 12

// DeliverQueue returns the queue of new deliveries to endpointID when active
// partitions take new work (below 1 counts as 1).
//
// The endpoint's partition is a jump consistent hash of its id over the
// active partitions (Lamping and Veach, "A Fast, Minimal Memory, Consistent
// Hash Algorithm"): when a process joins or leaves, and active grows or
// shrinks by one, only the endpoints that must move do (about 1/active of
// them, all to or from the last partition), instead of nearly all as with
// hash mod active.
func DeliverQueue(endpointID string, active int) string {
	return DeliverPartitionQueue(DeliverPartition(endpointID, active))
}

// DeliverPartition returns endpointID's partition among active ones (below 1
// counts as 1): the jump hash of FNV-1a (64 bits) of the id as given
// (endpoint ids are canonical lower-case UUIDs).
func DeliverPartition(endpointID string, active int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(endpointID))
	return jumpHash(h.Sum64(), max(active, 1))
}

// jumpHash maps key to a bucket among the given number such that going from n to n+1
// buckets moves only the keys that land in the new one.
func jumpHash(key uint64, buckets int) int {
	b, j := int64(-1), int64(0)
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// DeliverPartitionQueue names partition p's queue.
func DeliverPartitionQueue(p int) string { return "deliver_" + strconv.Itoa(p) }

// DeliverQueues returns the queues of partitions 0 to n-1, in order.
func DeliverQueues(n int) []string {
	out := make([]string, n)
	for p := range out {
		out[p] = DeliverPartitionQueue(p)
	}
	return out
}

// Job kinds, as stored in river_job.kind.
const (
	KindFanout  = "webhook.fanout"
	KindDeliver = "webhook.deliver"
	KindPrune   = "webhook.prune_events"
)

// Kinds returns every job kind the dispatcher inserts: the "kind" label of
// the queue metrics.
func Kinds() []string { return []string{KindFanout, KindDeliver, KindPrune} }

// DeliverMaxAttempts bounds a delivery: its last failed attempt discards it.
// internal/delivery's Schedule spaces the attempts (docs/spec.md, "One
// delivery").
const DeliverMaxAttempts = 18

// FanoutArgs fans one stored event out to its owner's endpoints.
type FanoutArgs struct {
	EventID string `json:"event_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (FanoutArgs) Kind() string { return KindFanout }

// InsertOpts makes fanout unique by event: ingesting an event twice fans out once.
func (FanoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:      QueueFanout,
		UniqueOpts: river.UniqueOpts{ByArgs: true},
	}
}

// DeliverArgs delivers one event to one endpoint.
type DeliverArgs struct {
	EndpointID string `json:"endpoint_id" river:"unique"`
	EventID    string `json:"event_id"    river:"unique"`
	// Seq is the event's ingest sequence (events.seq), set only for
	// deliveries to ordered endpoints: their order key. It is not part of
	// the unique key.
	Seq int64 `json:"seq,omitempty"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return KindDeliver }

// InsertOpts makes delivery unique by (endpoint, event): running a fanout
// twice enqueues each delivery once. The queue is the first partition's; the
// fanout picks the endpoint's partition (DeliverQueue) when it inserts.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: DeliverMaxAttempts,
		Queue:       DeliverPartitionQueue(0),
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	}
}

// Why a delivery was snoozed (DeliverSnooze.Reason). All but SnoozeDirect
// are also the "reason" label of dispatcher_delivery_snoozes_total
// (SnoozeReasons).
const (
	SnoozeLeaseBusy  = "lease_busy"
	SnoozeRetryAfter = "retry_after"
	// SnoozeThrottled: a run of 429s without Retry-After paused the endpoint.
	SnoozeThrottled = "throttled"
	// SnoozePaused: the endpoint is paused (its receiver asked for it).
	SnoozePaused = "endpoint_paused"
	// SnoozeRateLimit: the endpoint's max_per_second leaves no earlier slot.
	SnoozeRateLimit = "rate_limit"
	// SnoozeOrdered: an earlier delivery to the ordered endpoint is pending.
	SnoozeOrdered = "ordered"
	// SnoozeFailing: the endpoint is failing and the delivery does not hold
	// its probe slot (ProbeSlotKey): it is held, without a request and
	// without spending an attempt, until a success releases it (a recovery
	// probe's, or an operator's), looking again at the latest when the
	// snooze ends.
	SnoozeFailing = "endpoint_failing"
	// SnoozeStalled: every slot of the endpoint is held by a request its
	// receiver has not answered for a while (a slow or hung receiver): the
	// delivery waits in the queue, without a worker, rather than in a
	// worker for a turn.
	SnoozeStalled = "endpoint_stalled"
	// SnoozeDirect is not a snooze: the delivery was handed to the deliver
	// worker of the process that fanned it out, which runs it at once
	// (internal/delivery's Direct). The job waits, scheduled, until Until
	// only in case that process dies first.
	SnoozeDirect = "direct"
)

// SnoozeReasons returns every reason a delivery is snoozed for: the values of
// dispatcher_delivery_snoozes_total's "reason" label. SnoozeDirect is not
// one (nothing waits; it is not counted).
func SnoozeReasons() []string {
	return []string{SnoozeLeaseBusy, SnoozeRetryAfter, SnoozeThrottled, SnoozePaused, SnoozeRateLimit, SnoozeOrdered, SnoozeFailing, SnoozeStalled}
}

// FailingCooldown delays a new delivery to an endpoint that is failing, so
// a broken receiver is not hammered by every new event (docs/spec.md, the
// pipeline). A delivery whose cool-down ends while the endpoint still fails
// sends nothing: it is held again (SnoozeFailing), and only recovery probes
// (internal/delivery's probe.go, at most one per ProbeEvery) reach the
// receiver. Held deliveries are released as soon as one succeeds.
// A webhook.test event is not delayed.
const FailingCooldown = 5 * time.Minute

// ProbeEvery is the longest wait between two recovery probes of a failing
// endpoint, and the least quiet after a failed request to it before the
// next: a receiver that stays down hears at most one request per
// ProbeEvery (internal/delivery's probe.go). An operator's RetryDelivery
// to a failing endpoint takes the next probe's place and pushes the one
// after it this far out.
const ProbeEvery = 15 * time.Second

// PauseProbeGap: while an endpoint is paused, its queued deliveries wait
// until this long after the pause's end, so that the delivery whose answer
// paused it goes first, alone, as a probe: if the receiver pauses the
// endpoint again, the others are moved again without having been fetched.
const PauseProbeGap = time.Second

// DeliverSnooze is what the deliver worker records when it snoozes a
// delivery, as the job's River output (metadata "output"), so that listing
// deliveries can say why one waits: a snooze writes no error, and the row
// alone cannot tell a receiver's Retry-After from a busy lease. It describes
// the snooze only while Until is the job's scheduled_at; a later attempt
// leaves it behind.
type DeliverSnooze struct {
	Reason string    `json:"snooze_reason"`
	Until  time.Time `json:"snooze_until"`
	// Status is the HTTP status that carried the Retry-After.
	Status int `json:"status,omitempty"`
	// By is the process (its internal/partition member id) that took a
	// handed-off delivery (SnoozeDirect): if that process dies, the others
	// give the delivery back at once instead of after the hold.
	By string `json:"by,omitempty"`
}

// JobCut is the error recorded on a job whose process died while it ran, by
// the process that gives it back (internal/partition). Whether its request
// had left cannot be known, so the attempt counts, but the receiver did not
// fail: the delivery goes again at once, and the retry schedule, which steps
// on the receiver's failures, does not move (internal/delivery).
const JobCut = "The attempt did not finish: the process running it died, and its request may have reached the receiver."

// RiverRescued is the error River's own rescuer records on a job that ran
// longer than RescueStuckJobsAfter: like JobCut, the process running it
// died or hung.
const RiverRescued = "Stuck job rescued by JobRescuer"

// PruneArgs deletes events older than the retention period.
type PruneArgs struct {
	Retention time.Duration `json:"retention"`
}

// Kind implements river.JobArgs.
func (PruneArgs) Kind() string { return KindPrune }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (PruneArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3}
}
