-- Who moved a settlement (issue 29): every transition names its source,
-- so that code asks the column, never the text of the reason (the demo and
-- the returns test counted the returns a statement booked by
-- reason LIKE 'statement:%').
--
-- intake: the creation; worker: a send or a scheduled check; sweep: a
-- check the sweep took over; webhook: a check a hint asked for (a bank's
-- webhook, or the account holder's redirect after authorising a consent);
-- statement: an imported statement's line; operator: the console's or the
-- command line's resolve.
--
-- Rows written before this migration: the creations (no from_state) are
-- intake's and the statement's lines carry "statement: " before their
-- reason; the rest cannot be told apart (a worker's, the sweep's, a
-- webhook's and an operator's checks read alike) and take worker, the
-- column's default, which is also what a writer that names no source
-- gets. The append-only trigger is set aside for the backfill alone.
ALTER TABLE settlement_transitions
    ADD COLUMN source text NOT NULL DEFAULT 'worker'
        CONSTRAINT settlement_transitions_source_check
        CHECK (source IN ('intake', 'worker', 'sweep', 'webhook', 'statement', 'operator'));

ALTER TABLE settlement_transitions DISABLE TRIGGER settlement_transitions_append_only;
UPDATE settlement_transitions SET source = 'intake' WHERE from_state IS NULL;
UPDATE settlement_transitions SET source = 'statement' WHERE from_state IS NOT NULL AND reason LIKE 'statement:%';
ALTER TABLE settlement_transitions ENABLE TRIGGER settlement_transitions_append_only;
