-- An outcome event's id is <settlement_id>:<n> (settlement_events_id_form),
-- and n, a decimal number without a colon, ends it: the id splits at its
-- last colon into the settlement and the number, so two events with one id
-- would be two events with one (settlement_id, n), which
-- settlement_events_n_key already refuses. The unique index on event_id
-- only cost every event one more index entry (issue 28: fewer writes);
-- an event is looked up by (settlement_id, n) instead (events.SplitEventID).
ALTER TABLE settlement_events DROP CONSTRAINT IF EXISTS settlement_events_event_id_key;
