-- The operator console (DESIGN.md section 16).
--
-- Every action an operator takes on a settlement (resolve now, add a note) is
-- recorded with who, when, what and the result, and is never changed or
-- removed: the same append-only trigger as the ledger and the history.
CREATE TABLE operator_actions (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    settlement_id text        NOT NULL REFERENCES settlements (settlement_id),
    -- The HTTP Basic user name the operator gave with the API token, or the
    -- name typed into an open (tokenless) console.
    operator      text        NOT NULL CHECK (length(operator) BETWEEN 1 AND 128),
    action        text        NOT NULL CHECK (action IN ('note', 'resolve')),
    -- The note's text, or what was asked.
    detail        text        NOT NULL CHECK (length(detail) <= 4000),
    -- What came of it, in words; ok is false when the action failed.
    result        text        NOT NULL,
    ok            boolean     NOT NULL,
    at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operator_actions_settlement_idx ON operator_actions (settlement_id, id);
CREATE TRIGGER operator_actions_append_only BEFORE UPDATE OR DELETE ON operator_actions
    FOR EACH ROW EXECUTE FUNCTION settle_append_only();

-- The console's lists page with a keyset on (created_at, settlement_id),
-- oldest first, so that a page deep in a million rows is as fast as the
-- first: by state, by account, and the few flagged for investigation. A
-- list over every state merges the per-state ranges of the first index.
-- That index replaces settlements_state_idx (state, updated_at): it serves
-- every lookup by state as well, nothing reads settlements in updated_at
-- order, and each index is one more write on every intake and transition.
CREATE INDEX settlements_state_created_idx ON settlements (state, created_at, settlement_id);
DROP INDEX settlements_state_idx;
CREATE INDEX settlements_account_created_idx ON settlements (account_id, created_at, settlement_id);
CREATE INDEX settlements_flagged_created_idx ON settlements (created_at, settlement_id)
    WHERE needs_investigation;
