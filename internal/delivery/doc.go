// Package delivery is the webhook.deliver worker: lease, sign, send,
// classify, settle; and the retry policy.
//
// # The route of one delivery
//
// One webhook.deliver job (an event to one endpoint) goes through these
// steps, in this order; Worker.Work is the route, each step a call from it:
//
//  1. Start: River fetches the job from the endpoint's partition queue
//     (internal/partition), or the inline fanout hands it to this process
//     at once (direct.go: Direct, fanout.Handoff), which runs the same Work.
//  2. Local admission (lanes.go): a delivery to a rate-limited endpoint
//     whose lane already holds more than it can send soon snoozes
//     (rate_limit) and the backlog is paced in the queue (ratelimit.go:
//     rateOverflow); a failing endpoint whose slots are taken holds it in
//     the queue (endpoint_failing, released by probe.go); the endpoint's
//     lane admits at most max_in_flight deliveries of this process at once,
//     an ordered endpoint's in sequence.
//  3. The lease (lease.go: acquire): one batched statement takes or confirms
//     the endpoint's lease, which makes this process the only one sending to
//     it, and reads what the attempt needs: the endpoint (its sealed keys and
//     headers, its controls) and the event. Held elsewhere: snooze
//     (lease_busy). Disabled or gone: cancel.
//  4. The receiver's controls (control.go: gate): a pause (pause.go), an
//     ordered endpoint's head (ordered.go), max_per_second (ratelimit.go).
//     Waiting spends no attempt: the delivery snoozes, or the queued ones are
//     rescheduled.
//  5. The attempt (worker.go: attempt): the event checked again (pruned,
//     may not leave: cancel), the keys opened through KeyOpener
//     (internal/endpoint unseals), the request signed (pkg/webhook) and sent
//     through the guarded egress client (internal/egress).
//  6. Classification (classify.go: classify), once: what the answer means
//     for the delivery (complete, retry, snooze, cancel), its status class
//     and its outcome for the attempt history; a run of 429s becomes a pause
//     (pause.go: throttle). conclude (worker.go) turns it into River's
//     result; recordAttempt (attempts.go) hands it to the history
//     (internal/attempt); afterAttempt (control.go) records a pause or moves
//     an ordered endpoint's head.
//  7. Settle (lease.go: settle, through endTurn): the endpoint's health
//     (failing, recovered, disabled, with their operational events) and the
//     lease released or kept for the next delivery, in one batched
//     statement.
//  8. Afterwards: River retries a failure on the schedule (retry.go:
//     NextRetry), runs a snooze again when it ends, and keeps a cancel; a
//     direct run writes the same outcome onto its job itself (direct.go).
//     While the endpoint fails, probe.go probes it and releases its held
//     deliveries on the first success.
package delivery
