// Package delivery is the webhook.deliver worker: lease, sign, send,
// classify, settle; and the retry policy.
//
// # The route of one delivery
//
// One webhook.deliver job (an event to one endpoint) goes through these
// steps, in this order. Worker.Work (route.go) is the route: it states them
// once, as calls to the route's own steps and to the hooks of the stages,
// one type each in the file named for it (rateLimit in ratelimit.go,
// failingHold in failing.go, pauses in pause.go, ordering in ordered.go,
// history in attempts.go); nothing else calls a hook.
//
//  1. Start: River fetches the job from the endpoint's partition queue
//     (internal/partition), or the inline fanout hands it to this process
//     at once (direct.go: Direct, fanout.Handoff), which runs the same Work.
//  2. Local admission: a delivery to a rate-limited endpoint whose lane
//     already holds more than it can send soon snoozes (rate_limit) and the
//     backlog is paced in the queue (ratelimit.go: rateLimit.admit); a
//     failing endpoint whose slots are taken holds it in the queue
//     (endpoint_failing, released by probe.go; failing.go:
//     failingHold.admit); the endpoint's lane (lanes.go: turn) admits at
//     most max_in_flight deliveries of this process at once, an ordered
//     endpoint's in sequence, and sends them away (endpoint_stalled) while
//     every slot is held by a request long unanswered (lanes.go: stalled;
//     the route marks each request's start and end for it).
//  3. The lease (lease.go: lease, acquire): one batched statement takes or
//     confirms the endpoint's lease, which makes this process the only one
//     sending to it, and reads what the attempt needs: the endpoint (its
//     sealed keys and headers, its controls) and the event. Held elsewhere:
//     snooze (lease_busy). Disabled or gone: cancel. A delivery may have
//     its target read ahead (a direct run's at its hand-off, direct.go:
//     prepared; one that queued in the lane, by the statement of a runner
//     ahead of it, ahead.go: fromAhead): it goes on with that while the
//     lane's lease outlives the attempt. What the read says is
//     handed to the stages that keep it (failingHold.leased: failing;
//     rateLimit.leased: a lease just taken starts the rate clock).
//  4. The receiver's controls, each a check that may hold the delivery
//     back, in this order: a pause (pause.go: pauses.check), a failing
//     endpoint, whose receiver hears only the delivery holding its probe
//     slot (failing.go: failingHold.check; the others are held,
//     endpoint_failing, until a success releases them), an ordered
//     endpoint's head (ordered.go: ordering.check), max_per_second
//     (ratelimit.go: rateLimit.check). Waiting spends no attempt: the
//     delivery snoozes, or the queued ones are rescheduled.
//  5. The attempt (send.go: send): the event checked again (pruned, may not
//     leave: cancel), the keys opened through KeyOpener (internal/endpoint
//     unseals), the request signed (pkg/webhook) and sent through the
//     guarded egress client (internal/egress).
//  6. Classification (classify.go: classify), once: what the answer means
//     for the delivery (complete, retry, snooze, cancel), its status class
//     and its outcome for the attempt history; a run of 429s becomes a pause
//     (pause.go: pauses.classify). conclude (send.go) turns it into River's
//     result; then the stages' after hooks: the attempt history
//     (attempts.go: history.after, to internal/attempt), a pause recorded
//     (pauses.after), an ordered endpoint's head moved on (ordering.after).
//  7. Settle (lease.go: endTurn, settle): the endpoint's health (failing,
//     recovered, disabled, with their operational events; the lane's view
//     in failingHold.settle, a pause cleared in pauses.settle) and the lease
//     released or kept for the next delivery, in one batched statement.
//  8. Afterwards: River retries a failure on the schedule (retry.go:
//     NextRetry), runs a snooze again when it ends, and keeps a cancel; a
//     direct run writes the same outcome onto its job itself (direct.go).
//     While the endpoint fails, probe.go probes it (one request per probe
//     gap) and releases its held deliveries on the first success.
package delivery
