-- delivery_attempts.probes / probe: recovery probes counted apart from the
-- retry schedule's attempts. attempt stays River's attempt number, which
-- counts probes too; probes is how many of a delivery's attempts up to this
-- one were probes (this one included), so attempt - probes is its place in
-- the schedule, and probe says this one was a probe. Rows written before
-- this migration read as no probes. Constant defaults: no table rewrite.
ALTER TABLE delivery_attempts
    ADD COLUMN probes integer NOT NULL DEFAULT 0,
    ADD COLUMN probe  boolean NOT NULL DEFAULT false;
