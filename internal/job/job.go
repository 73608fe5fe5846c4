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
	// QueueDeliver held every delivery before deliveries were partitioned;
	// it is still worked, for jobs an older version enqueued.
	QueueDeliver = "deliver"
)

// DeliverPartitions is how many queues deliveries may be spread over, by
// endpoint, so that several processes can each fetch whole endpoints' work:
// every delivery to one endpoint lands in one queue, and each queue is worked
// by one process at a time (internal/partition). With n processes the first
// min(n, DeliverPartitions) queues take new deliveries; the others only
// drain what was queued while the processes were fewer or more. Twelve
// divides evenly among 1, 2, 3, 4 and 6 processes. It is a constant, not a
// setting: changing it would leave jobs in queues nobody works.
const DeliverPartitions = 12

// DeliverQueue returns the queue of new deliveries to endpointID when active
// partitions take new work (the number of live processes, at most
// DeliverPartitions; below 1 counts as 1).
func DeliverQueue(endpointID string, active int) string {
	active = min(max(active, 1), DeliverPartitions)
	return DeliverPartitionQueue(DeliverPartition(endpointID) % active)
}

// DeliverPartition returns endpointID's position among the partitions:
// FNV-1a of the id as given (endpoint ids are canonical lower-case UUIDs).
func DeliverPartition(endpointID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(endpointID))
	return int(h.Sum32() % DeliverPartitions)
}

// DeliverPartitionQueue names partition p's queue.
func DeliverPartitionQueue(p int) string { return "deliver_" + strconv.Itoa(p) }

// DeliverQueues returns every partition's queue, in partition order.
func DeliverQueues() []string {
	out := make([]string, DeliverPartitions)
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

// DeliverMaxAttempts bounds a delivery: 5 s, 5 min, 30 min, 2 h, 5 h, then 10 h each; the 18th
// failed attempt (about 5.3 days after the first) discards the delivery.
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
	return []string{SnoozeLeaseBusy, SnoozeRetryAfter, SnoozeThrottled, SnoozePaused, SnoozeRateLimit, SnoozeOrdered}
}

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
}

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
