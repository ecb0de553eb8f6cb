-- The app schema of settle (DESIGN.md section 4). The constraints make the
-- exactly-once rules true in the database itself, not only in the code.

CREATE TABLE settlement_receipts (
    settlement_id   text        NOT NULL,
    payload_hash    text        NOT NULL CHECK (payload_hash ~ '^sha256:[0-9a-f]{64}$'),
    received_at     timestamptz NOT NULL DEFAULT now(),
    first_event_id  text        CHECK (length(first_event_id) <= 256),
    occurred_at     timestamptz,
    replay_count    bigint      NOT NULL DEFAULT 0 CHECK (replay_count >= 0),
    last_replay_at  timestamptz,
    CONSTRAINT settlement_receipts_settlement_id_key UNIQUE (settlement_id),
    CONSTRAINT settlement_receipts_id_length CHECK (length(settlement_id) BETWEEN 1 AND 128)
);
-- Retention deletes old receipts of terminal settlements.
CREATE INDEX settlement_receipts_received_at_idx ON settlement_receipts (received_at);

CREATE TABLE settlements (
    settlement_id        text        PRIMARY KEY CHECK (length(settlement_id) BETWEEN 1 AND 128),
    account_id           text        NOT NULL CHECK (length(account_id) BETWEEN 1 AND 128),
    beneficiary          text        NOT NULL CHECK (length(beneficiary) BETWEEN 1 AND 256),
    amount_cents         bigint      NOT NULL CHECK (amount_cents > 0),
    currency             text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    state                text        NOT NULL CHECK (state IN ('pending', 'sent', 'uncertain', 'confirmed', 'failed')),
    bank_key             text        NOT NULL UNIQUE,
    payload_hash         text        NOT NULL,
    -- What the bank last told us.
    bank_payment_id      text,
    bank_status          text,
    -- Bank instruction attempts (POSTs) and when the first one started:
    -- the key TTL is counted from first_attempt_at.
    send_attempts        integer     NOT NULL DEFAULT 0,
    first_attempt_at     timestamptz,
    -- Status checks and when the next one is due (the sweep's index).
    check_attempts       integer     NOT NULL DEFAULT 0,
    next_check_at        timestamptz,
    -- Set when the engine will not resolve the settlement on its own.
    needs_investigation  boolean     NOT NULL DEFAULT false,
    investigation_reason text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT settlements_investigation_reason CHECK (needs_investigation = (investigation_reason IS NOT NULL))
);
CREATE INDEX settlements_due_idx ON settlements (next_check_at)
    WHERE state IN ('pending', 'sent', 'uncertain');
CREATE INDEX settlements_state_idx ON settlements (state, updated_at);

CREATE TABLE settlement_transitions (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    settlement_id text        NOT NULL REFERENCES settlements (settlement_id),
    -- NULL for the creation of the settlement (→ pending).
    from_state    text        CHECK (from_state IN ('pending', 'sent', 'uncertain', 'confirmed', 'failed')),
    to_state      text        NOT NULL CHECK (to_state IN ('pending', 'sent', 'uncertain', 'confirmed', 'failed')),
    reason        text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX settlement_transitions_settlement_idx ON settlement_transitions (settlement_id, id);

CREATE TABLE ledger_movements (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    settlement_id   text        NOT NULL REFERENCES settlements (settlement_id),
    account_id      text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    currency        text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    bank_payment_id text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_movements_settlement_id_key UNIQUE (settlement_id)
);

CREATE TABLE receipt_conflicts (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    settlement_id  text        NOT NULL,
    stored_hash    text        NOT NULL,
    incoming_hash  text        NOT NULL,
    detected_at    timestamptz NOT NULL DEFAULT now(),
    event_id       text,
    -- The business fields of the rejected event, for investigation.
    incoming       jsonb,
    CONSTRAINT receipt_conflicts_hashes_differ CHECK (stored_hash <> incoming_hash)
);
CREATE INDEX receipt_conflicts_settlement_idx ON receipt_conflicts (settlement_id, detected_at);

-- Every call to the bank and its answer, for `settle reconcile show`.
CREATE TABLE bank_attempts (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    settlement_id text        NOT NULL REFERENCES settlements (settlement_id),
    op            text        NOT NULL CHECK (op IN ('send', 'status')),
    bank_key      text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    outcome       text,
    bank_status   text,
    http_status   integer,
    detail        text
);
CREATE INDEX bank_attempts_settlement_idx ON bank_attempts (settlement_id, id);

-- The ledger and the history are append-only: a movement or a transition is
-- never changed or removed once written.
CREATE FUNCTION settle_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER ledger_movements_append_only BEFORE UPDATE OR DELETE ON ledger_movements
    FOR EACH ROW EXECUTE FUNCTION settle_append_only();
CREATE TRIGGER settlement_transitions_append_only BEFORE UPDATE OR DELETE ON settlement_transitions
    FOR EACH ROW EXECUTE FUNCTION settle_append_only();
