-- Outcome event sinks come and go (DESIGN.md section 19, issue 27).
--
-- seen_at is when a worker relaying to the sink last said so: the relay
-- registers its sinks when it starts and again every half minute. A sink
-- taken out of every worker's configuration stops being seen, but its
-- deliveries would stay pending for ever, and every new event would be
-- queued for it too: `settle events forget-sink` (an operator action,
-- recorded on each settlement that had an undelivered event there) sets
-- forgotten_at and forgotten_by, drops its pending and dead deliveries and
-- queues nothing for it from then on. Its delivered rows stay, for the
-- story. A worker configured with a forgotten sink registers it again (and
-- says so).
ALTER TABLE event_sinks
    ADD COLUMN seen_at      timestamptz,
    ADD COLUMN forgotten_at timestamptz,
    ADD COLUMN forgotten_by text CHECK (length(forgotten_by) BETWEEN 1 AND 128),
    ADD CONSTRAINT event_sinks_forgotten CHECK ((forgotten_at IS NULL) = (forgotten_by IS NULL));

CREATE OR REPLACE FUNCTION settle_events_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE settlement_events
    SET payload = coalesce(settle_settlement_view(NEW.settlement_id), '{}') || NEW.payload
    WHERE seq = NEW.seq;
    INSERT INTO event_deliveries (event_seq, sink, settlement_id, n, next_attempt_at)
    SELECT NEW.seq, k.sink, NEW.settlement_id, NEW.n, NEW.created_at FROM event_sinks k
    WHERE k.forgotten_at IS NULL;
    RETURN NULL;
END
$$;

ALTER TABLE operator_actions DROP CONSTRAINT operator_actions_action_check,
    ADD CONSTRAINT operator_actions_action_check CHECK (action IN ('note', 'resolve', 'redeliver', 'forget_sink'));
