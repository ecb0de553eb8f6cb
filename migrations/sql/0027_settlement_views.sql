-- The settlement's view, planned with the statement that asks for it
-- (issue 28).
--
-- settle_settlement_view(id) returns a settlement as GET
-- /v1/settlements/{id} shows it, and every outcome event holds it. It is
-- a scalar SQL function that reads tables, which PostgreSQL never inlines:
-- its query was planned afresh in every statement that called it, however
-- often that statement ran (a prepared statement keeps its own plan, not
-- that of a function it calls), and the plan of its query (five
-- subqueries) cost more than building the view (BENCHMARKS.md, issue 28,
-- step 10). settle_settlement_views(ids) is the same query as a
-- set-returning SQL function: not strict, stable, without settings, so
-- PostgreSQL inlines it into a statement that calls it in FROM (or in a
-- subquery) and plans it once with that statement, whose prepared plan
-- then keeps it. The event writers call it so. settle_settlement_view(id)
-- stays, for the tools and tests that ask for one settlement, and is now
-- this function's one row: the view's shape is written in one place.
CREATE FUNCTION settle_settlement_views(ids text[]) RETURNS TABLE (id text, doc jsonb)
LANGUAGE sql STABLE AS $$
    SELECT s.settlement_id, jsonb_build_object(
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
    FROM settlements s WHERE s.settlement_id = ANY (ids)
$$;

CREATE OR REPLACE FUNCTION settle_settlement_view(id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT v.doc FROM settle_settlement_views(ARRAY[id]) v
$$;

-- The fill of the events written without the settlement (flags; the state
-- machine's plain Transition, Flag and Created) plans the view with its
-- statement too, once per session (PL/pgSQL keeps its statements' plans).
CREATE OR REPLACE FUNCTION settle_events_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE settlement_events
    SET payload = coalesce((SELECT v.doc FROM settle_settlement_views(ARRAY[NEW.settlement_id]) v), '{}') || NEW.payload
    WHERE seq = NEW.seq;
    RETURN NULL;
END
$$;
