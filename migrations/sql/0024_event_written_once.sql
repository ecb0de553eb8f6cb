-- Outcome events written once, in their final form (issue 28).
--
-- Until now every outcome event was inserted small (event_id, reason, at)
-- and rewritten when its transaction committed with the settlement as GET
-- /v1/settlements/{id} shows it then (settle_events_fill, a deferred
-- constraint trigger, migration 0011): two row versions and the view built
-- at commit, the largest cost of a settlement in PostgreSQL. The state
-- machine now writes most events as the last write of their transaction
-- to the settlement, the payload built by the INSERT itself from the
-- settlement as the transaction leaves it (statemachine.QueueEvents,
-- CreationEvents, RecordConflicts). Such an event carries the settlement
-- in its payload (the key "settlement"); the fill at commit is left to the
-- events inserted without it (the state machine's Transition, Flag and
-- Created, whose callers may write more after them), and runs for those
-- exactly as before.

-- The fill alone. A constraint trigger's WHEN is evaluated when the row is
-- inserted, so an event written in its final form queues no deferred fill.
CREATE OR REPLACE FUNCTION settle_events_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE settlement_events
    SET payload = coalesce(settle_settlement_view(NEW.settlement_id), '{}') || NEW.payload
    WHERE seq = NEW.seq;
    RETURN NULL;
END
$$;
DROP TRIGGER settlement_events_fill ON settlement_events;
CREATE CONSTRAINT TRIGGER settlement_events_fill AFTER INSERT ON settlement_events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NOT NEW.payload ? 'settlement')
    EXECUTE FUNCTION settle_events_fill();

-- Every event, however written, is still queued at commit for each sink
-- known then and not forgotten (DESIGN.md section 19), as
-- settle_events_fill did until now (migration 0013).
CREATE FUNCTION settle_events_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_deliveries (event_seq, sink, settlement_id, n, next_attempt_at)
        SELECT NEW.seq, k.sink, NEW.settlement_id, NEW.n, NEW.created_at
        FROM event_sinks k WHERE k.forgotten_at IS NULL;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER settlement_events_queue AFTER INSERT ON settlement_events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settle_events_queue();

-- An event written once never grows on its page, so its page needs no
-- room kept free for that (migration 0021): pages filled from now on are
-- filled whole. The events still filled at commit are few.
ALTER TABLE settlement_events RESET (fillfactor);
