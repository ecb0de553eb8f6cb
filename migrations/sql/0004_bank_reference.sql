-- The reference a settlement is sent to its bank under (DESIGN.md section
-- 13): derived once, at intake, from the settlement id and the connector's
-- rules, and never changed. Settlements received before this column existed
-- were sent under their settlement id; coalesce(bank_reference,
-- settlement_id) is their reference.
ALTER TABLE settlements ADD COLUMN bank_reference text
    CHECK (bank_reference IS NULL OR (length(bank_reference) BETWEEN 1 AND 256));
-- The bank knows a settlement by this reference: webhooks, the bank report
-- and statement lines are matched on it.
CREATE INDEX settlements_reference_idx ON settlements ((coalesce(bank_reference, settlement_id)));

-- Questions to banks that do not look payments up by our key: the
-- identical POST repeated under the same key (replay), and a search of the
-- bank's list for our reference.
ALTER TABLE bank_attempts DROP CONSTRAINT bank_attempts_op_check,
    ADD CONSTRAINT bank_attempts_op_check CHECK (op IN ('send', 'status', 'replay', 'search'));
