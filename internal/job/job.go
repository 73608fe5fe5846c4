// Package job declares the River job kinds of the pipeline and their queues:
// webhook.fanout {event_id} and webhook.deliver {endpoint_id, event_id}, plus
// the retention job. Args live here, apart from their workers, so ingest can
// enqueue a fanout and the endpoint service can list deliveries without
// importing the workers.
package job

import (
	"time"

	"github.com/riverqueue/river"
)

// Queue names. Fanout and delivery have their own queues so a burst of one
// cannot starve the other.
const (
	QueueFanout      = "fanout"
	QueueDeliver     = "deliver"
	QueueMaintenance = "maintenance"
)

// Job kinds, as stored in river_job.kind.
const (
	KindFanout  = "webhook.fanout"
	KindDeliver = "webhook.deliver"
	KindPrune   = "webhook.prune_events"
)

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
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return KindDeliver }

// InsertOpts makes delivery unique by (endpoint, event): running a fanout
// twice enqueues each delivery once.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: DeliverMaxAttempts,
		Queue:       QueueDeliver,
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	}
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
