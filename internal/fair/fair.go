// Package fair decides where a new delivery goes in River's fetch order, so
// that one owner's burst never holds up another owner's deliveries.
//
// River fetches a queue's available jobs by priority (1 first, 4 last), then
// by scheduled_at and id: first in, first out within a priority. With every
// delivery at one priority, an owner that publishes 200,000 deliveries puts
// them all ahead of the next owner's one, which then waits for the whole
// backlog. Clock gives each delivery a priority from how far its owner (and,
// within the owner, its endpoint) has run ahead of a nominal rate: a virtual
// clock per owner (Zhang's VirtualClock, the virtual-finish-time variant of
// fair queuing). Each delivery advances its owner's virtual finish time by
// 1/(Rate × weight) seconds, starting from now when the owner was idle; the
// owner's lead, finish time minus now, is its backlog in seconds of its
// nominal share. A delivery whose owner leads by less than a second goes in
// the prompt tier (priority 1), ahead of every backlog; the backlog goes in
// the queued tiers, deeper leads behind shallower ones (2: up to 10 s, 3: up
// to 100 s, 4: beyond). So an owner without a backlog starts at once, two
// owners with backlogs share the fetches in proportion to how far each has
// run ahead (logarithmically: four tiers), and a weight moves an owner's
// tiers as if its backlog were that many times shorter.
//
// Within an owner the same clock runs per endpoint: a delivery to an endpoint
// whose lead is well under its share of the owner's (the owner's lead divided
// by the endpoints it is running ahead on) goes one tier up, so one endpoint's
// backfill does not hold up the owner's other endpoints either, and an owner
// gains at most one tier that way.
//
// Priorities only choose what River fetches first; nothing is held back, so a
// lone burst drains as fast as before (the queued tiers are fetched whenever
// no prompt delivery is due). A delivery keeps its priority through retries,
// snoozes and holds. The clock is per process: each process is fair over
// what it ingests, and the partitions spread an owner's endpoints over the
// processes.
package fair

import (
	"sync"
	"time"
)

// River's priorities, as the tiers use them.
const (
	// Prompt is the tier of a delivery whose owner has no backlog.
	Prompt = 1
	// Lowest is River's lowest priority: the deepest backlogs.
	Lowest = 4
)

// Config tunes a Clock.
type Config struct {
	// Rate is an owner's nominal share at weight 1, in deliveries per
	// second: an owner that publishes faster than this for long builds a
	// lead. Default 100.
	Rate float64
	// PromptLead is the lead below which a delivery is prompt (the burst an
	// idle owner may start with at once: PromptLead × Rate deliveries);
	// each further tier is ten times deeper. Default 1 s.
	PromptLead time.Duration
	// MaxLead caps an owner's lead, so an owner that stops publishing is
	// back in the prompt tier within MaxLead however much it sent. Default
	// 1 h.
	MaxLead time.Duration
}

// Clock keeps each owner's and endpoint's virtual finish time. Safe for
// concurrent use; its memory is bounded by the owners and endpoints with a
// lead (an idle owner's entry is dropped at the next sweep).
type Clock struct {
	cfg  Config
	cost time.Duration // one delivery at weight 1

	mu     sync.Mutex
	owners map[string]*owner
	swept  time.Time
}

type owner struct {
	finish    time.Time
	endpoints map[string]*endpoint
}

type endpoint struct {
	finish time.Time
	// floor is the deepest tier given to this endpoint while it has had a
	// lead: an ordered endpoint's deliveries never get a better priority
	// than the ones before them, so River fetches its head first.
	floor int
}

// New returns a Clock.
func New(cfg Config) *Clock {
	if cfg.Rate <= 0 {
		cfg.Rate = 100
	}
	if cfg.PromptLead <= 0 {
		cfg.PromptLead = time.Second
	}
	if cfg.MaxLead <= 0 {
		cfg.MaxLead = time.Hour
	}
	return &Clock{
		cfg:    cfg,
		cost:   time.Duration(float64(time.Second) / cfg.Rate),
		owners: make(map[string]*owner),
	}
}

// Delivery is one delivery about to be enqueued.
type Delivery struct {
	Owner, Endpoint string
	// Weight scales the owner's share (0: 1). A weight of 4 makes the
	// owner's deliveries count a quarter; 0.25 four times.
	Weight float64
	// Ordered marks an ordered endpoint: its tier never improves while it
	// has a lead.
	Ordered bool
}

// Priority charges d to its owner and endpoint at now and returns its River
// priority (Prompt to Lowest). A nil Clock answers Prompt.
func (c *Clock) Priority(d Delivery, now time.Time) int {
	if c == nil {
		return Prompt
	}
	w := d.Weight
	if w <= 0 {
		w = 1
	}
	cost := time.Duration(float64(c.cost) / w)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	o := c.owners[d.Owner]
	if o == nil {
		o = &owner{endpoints: make(map[string]*endpoint)}
		c.owners[d.Owner] = o
	}
	o.finish = c.advance(o.finish, cost, now)
	ep := o.endpoints[d.Endpoint]
	if ep == nil {
		ep = &endpoint{}
		o.endpoints[d.Endpoint] = ep
	}
	ep.finish = c.advance(ep.finish, cost, now)

	// The lead before this delivery (its virtual start time): an idle
	// owner's first delivery leads by nothing.
	ownerLead := o.finish.Sub(now) - cost
	tier := c.tier(ownerLead)
	if tier > Prompt {
		// Within the owner: an endpoint well behind its share of the
		// owner's lead goes one tier up.
		// The endpoints kept since the last sweep stand for those with a
		// lead: counting them exactly would cost a loop per delivery.
		if (ep.finish.Sub(now)-cost)*time.Duration(len(o.endpoints)) < ownerLead/2 {
			tier--
		}
	}
	if d.Ordered {
		tier = max(tier, ep.floor)
		ep.floor = tier
	}
	return tier
}

// advance returns a virtual finish time moved on by cost from finish, or
// from now when the owner (endpoint) was idle, its lead capped at MaxLead.
func (c *Clock) advance(finish time.Time, cost time.Duration, now time.Time) time.Time {
	if finish.Before(now) {
		finish = now
	}
	finish = finish.Add(cost)
	if limit := now.Add(c.cfg.MaxLead); finish.After(limit) {
		finish = limit
	}
	return finish
}

// tier maps a lead to a priority: under PromptLead Prompt, then one tier per
// factor of ten.
func (c *Clock) tier(lead time.Duration) int {
	t, bound := Prompt, c.cfg.PromptLead
	for t < Lowest && lead >= bound {
		t++
		bound *= 10
	}
	return t
}

// sweepEvery is how often entries whose lead is over are dropped.
const sweepEvery = time.Second

// sweep drops the owners and endpoints whose lead is over (their next
// delivery would start from now anyway).
func (c *Clock) sweep(now time.Time) {
	if now.Sub(c.swept) < sweepEvery {
		return
	}
	c.swept = now
	for id, o := range c.owners {
		if !o.finish.After(now) {
			delete(c.owners, id)
			continue
		}
		for eid, e := range o.endpoints {
			if !e.finish.After(now) {
				delete(o.endpoints, eid)
			}
		}
	}
}

// Prompt reports whether ownerID's next delivery would be prompt at now:
// it leads by less than PromptLead. A nil Clock answers false.
func (c *Clock) Prompt(ownerID string, now time.Time) bool {
	return c != nil && c.Lead(ownerID, now) < c.cfg.PromptLead
}

// Lead is how far owner has run ahead of its share at now (0 when idle):
// its backlog, in seconds of its nominal rate.
func (c *Clock) Lead(ownerID string, now time.Time) time.Duration {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.owners[ownerID]
	if o == nil || !o.finish.After(now) {
		return 0
	}
	return o.finish.Sub(now)
}
