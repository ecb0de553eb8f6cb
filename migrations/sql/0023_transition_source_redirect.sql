-- The account holder's redirect is a source of its own (issue 29): a
-- check asked for by the account holder's return from their bank after
-- authorising a consent (the console's authorisation callback) records
-- redirect, where migration 0020 had it record webhook, the source of a
-- bank's own hints.
--
-- The constraint is replaced NOT VALID and then validated, so that the
-- scan of the existing rows holds only a SHARE UPDATE EXCLUSIVE lock and
-- writers go on meanwhile; every existing row holds one of the old values,
-- which the new list keeps.
ALTER TABLE settlement_transitions
    DROP CONSTRAINT settlement_transitions_source_check,
    ADD CONSTRAINT settlement_transitions_source_check
        CHECK (source IN ('intake', 'worker', 'sweep', 'webhook', 'redirect', 'statement', 'operator')) NOT VALID;

ALTER TABLE settlement_transitions VALIDATE CONSTRAINT settlement_transitions_source_check;
