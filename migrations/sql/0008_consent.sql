-- Banks whose payments need a consent first (UK Open Banking, DESIGN.md
-- section 13): the consent the payment is made under, stored the moment any
-- answer names it, so that the payment request (and any replay of it)
-- carries the same ConsentId every time. consent_status is the connector's
-- mapped status (awaiting_authorisation, authorised, consumed, rejected,
-- unknown); consent_requested_at is when it was first asked for, from which
-- a consent never authorised is flagged.
ALTER TABLE settlements
    ADD COLUMN bank_consent_id text CHECK (bank_consent_id IS NULL OR length(bank_consent_id) BETWEEN 1 AND 128),
    ADD COLUMN consent_status text,
    ADD COLUMN consent_requested_at timestamptz,
    ADD COLUMN consent_expires_at timestamptz;

ALTER TABLE bank_attempts DROP CONSTRAINT bank_attempts_op_check,
    ADD CONSTRAINT bank_attempts_op_check
        CHECK (op IN ('send', 'status', 'replay', 'search', 'consent', 'consent_status'));
