-- Several banks on one database (DESIGN.md section 13, issue 34): every
-- settlement records the bank it is paid through, the configured name of a
-- connector (settle, stripe, obie), chosen at intake and never changed.
-- Workers send, check and resolve only the settlements of their own banks.
--
-- Settlements created before this migration are bound to the bank the
-- deployment was configured with, which only the operator knows: the
-- runner sets settle.bind_bank from `settle migrate --bind-bank NAME` (or
-- SETTLE_MIGRATE_BANK) for this transaction. Without it, a database that
-- holds settlements is refused (the runner says so first, in plain words;
-- this block is the backstop): a guess here would pay through the wrong
-- bank. The same name becomes the column's default, so that a worker of the
-- previous version, still running during a rolling upgrade (it knows
-- nothing of banks and pays through that one), binds what it takes in to
-- it. A database migrated without a name has no default: intake names the
-- bank of every settlement.
ALTER TABLE settlements ADD COLUMN bank text;

DO $$
DECLARE
    bind text := nullif(current_setting('settle.bind_bank', true), '');
BEGIN
    IF bind IS NULL THEN
        IF EXISTS (SELECT 1 FROM settlements) THEN
            RAISE EXCEPTION 'settlements exist and no bank was named to bind them to: run settle migrate --bind-bank NAME (or set SETTLE_MIGRATE_BANK) with the bank this deployment paid through';
        END IF;
    ELSE
        UPDATE settlements SET bank = bind;
        EXECUTE format('ALTER TABLE settlements ALTER COLUMN bank SET DEFAULT %L', bind);
    END IF;
END
$$;

ALTER TABLE settlements ALTER COLUMN bank SET NOT NULL;
-- The name is also part of a River queue (bank_<name>) and of the
-- environment (SETTLE_BANK_<NAME>_TOKEN): lower-case letters, digits and
-- underscores, starting with a letter.
ALTER TABLE settlements ADD CONSTRAINT settlements_bank_name CHECK (bank ~ '^[a-z][a-z0-9_]{0,31}$');

-- The banks a worker serves, each refreshed while the worker runs: a
-- settlement of a bank no worker has refreshed lately waits, visibly, for
-- one (settle reconcile show, the console), and the sweep leaves it alone
-- until one comes.
CREATE TABLE bank_workers (
    bank    text        PRIMARY KEY CHECK (bank ~ '^[a-z][a-z0-9_]{0,31}$'),
    seen_at timestamptz NOT NULL
);

-- The settlement as GET /v1/settlements/{id} answers it now carries its bank
-- (settle_settlement_view of 0011, with the one key added), so outcome
-- events say which bank pays.
CREATE OR REPLACE FUNCTION settle_settlement_view(id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'settlement', jsonb_build_object(
            'settlement_id', s.settlement_id, 'account_id', s.account_id, 'amount_cents', s.amount_cents,
            'currency', s.currency, 'beneficiary', s.beneficiary, 'state', s.state,
            'payload_hash', s.payload_hash, 'bank_key', s.bank_key, 'bank', s.bank,
            'bank_reference', coalesce(s.bank_reference, s.settlement_id),
            'needs_investigation', s.needs_investigation,
            'created_at', settle_json_time(s.created_at), 'updated_at', settle_json_time(s.updated_at))
            || CASE WHEN s.investigation_reason IS NOT NULL
                THEN jsonb_build_object('investigation_reason', s.investigation_reason) ELSE '{}' END,
        'bank', jsonb_build_object(
            'send_attempts', s.send_attempts, 'first_attempt_at', settle_json_time(s.first_attempt_at),
            'check_attempts', s.check_attempts, 'next_check_at', settle_json_time(s.next_check_at))
            || CASE WHEN coalesce(s.bank_payment_id, '') <> ''
                THEN jsonb_build_object('payment_id', s.bank_payment_id) ELSE '{}' END
            || CASE WHEN coalesce(s.bank_status, '') <> ''
                THEN jsonb_build_object('status', s.bank_status) ELSE '{}' END,
        'receipt', (SELECT jsonb_build_object(
                'payload_hash', r.payload_hash, 'received_at', settle_json_time(r.received_at),
                'occurred_at', settle_json_time(r.occurred_at), 'replay_count', r.replay_count,
                'last_replay_at', settle_json_time(r.last_replay_at))
                || CASE WHEN coalesce(r.first_event_id, '') <> ''
                    THEN jsonb_build_object('first_event_id', r.first_event_id) ELSE '{}' END
            FROM settlement_receipts r WHERE r.settlement_id = s.settlement_id),
        'transitions', coalesce((SELECT jsonb_agg(
                jsonb_build_object('to_state', t.to_state, 'reason', t.reason, 'at', settle_json_time(t.at))
                || CASE WHEN t.from_state IS NOT NULL
                    THEN jsonb_build_object('from_state', t.from_state) ELSE '{}' END
                ORDER BY t.id)
            FROM settlement_transitions t WHERE t.settlement_id = s.settlement_id), '[]'),
        'bank_attempts', coalesce((SELECT jsonb_agg(
                jsonb_build_object('op', a.op, 'bank_key', a.bank_key, 'started_at', settle_json_time(a.started_at),
                    'finished_at', settle_json_time(a.finished_at), 'http_status', to_jsonb(a.http_status))
                || CASE WHEN coalesce(a.outcome, '') <> '' THEN jsonb_build_object('outcome', a.outcome) ELSE '{}' END
                || CASE WHEN coalesce(a.bank_status, '') <> '' THEN jsonb_build_object('bank_status', a.bank_status) ELSE '{}' END
                || CASE WHEN coalesce(a.detail, '') <> '' THEN jsonb_build_object('detail', a.detail) ELSE '{}' END
                ORDER BY a.id)
            FROM bank_attempts a WHERE a.settlement_id = s.settlement_id), '[]'),
        'movement', (SELECT jsonb_build_object(
                'account_id', m.account_id, 'amount_cents', m.amount_cents, 'currency', m.currency,
                'created_at', settle_json_time(m.created_at))
                || CASE WHEN coalesce(m.bank_payment_id, '') <> ''
                    THEN jsonb_build_object('bank_payment_id', m.bank_payment_id) ELSE '{}' END
            FROM ledger_movements m WHERE m.settlement_id = s.settlement_id AND m.kind = 'payout'))
    FROM settlements s WHERE s.settlement_id = id
$$;
