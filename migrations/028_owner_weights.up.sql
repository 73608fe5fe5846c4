-- Owner settings: an owner's weight in the fairness across owners
-- (internal/fair; docs/design.md "Fairness across owners"). An owner's
-- deliveries count 1/weight against its share, so an owner of weight 4 may
-- run four times as far ahead before its deliveries go behind other
-- owners'. No row: weight 1. The fanout reads it with the owner's endpoints.
CREATE TABLE owner_settings (
    owner_id   text PRIMARY KEY,
    weight     double precision NOT NULL DEFAULT 1
        CONSTRAINT owner_settings_weight_range CHECK (weight >= 0.01 AND weight <= 100),
    updated_at timestamptz NOT NULL DEFAULT now()
);
