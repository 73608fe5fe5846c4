-- Where each event went and why not: the fanout's decision for every endpoint
-- of the event's owner, written by the fanout in the INSERT that stores the
-- event (or, for an event whose fanout needs the access service, with the
-- deliveries its webhook.fanout job enqueues). Bounded whatever the owner's
-- size: per reason a count and the first 16 endpoint ids, in the binary
-- encoding of internal/decision (at most about 3 KB, typically under 500
-- bytes). NULL: not decided yet (the fanout job waits for the access
-- service), or the event was stored before this column existed.
ALTER TABLE events ADD COLUMN fanout bytea;
