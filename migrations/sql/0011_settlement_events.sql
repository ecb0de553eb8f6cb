-- Outcome events (DESIGN.md section 19): a transactional outbox and the
-- state of its delivery to each sink.
--
-- The state machine writes one settlement_events row in the transaction of
-- every transition, flag and recorded receipt conflict. event_id is
-- <settlement_id>:<n>, n counting the settlement's events from 1: n comes
-- from settlements.event_seq, incremented by the same UPDATE that moves the
-- state (or sets the flag), so the row lock that serialises a settlement's
-- transitions also numbers its events. Settlements created before this
-- migration start their count at 1 with their next event.
ALTER TABLE settlements ADD COLUMN event_seq integer NOT NULL DEFAULT 0 CHECK (event_seq >= 0);

CREATE TABLE settlement_events (
    seq           bigserial   PRIMARY KEY,
    event_id      text        NOT NULL UNIQUE,
    settlement_id text        NOT NULL,
    n             integer     NOT NULL CHECK (n >= 1),
    type          text        NOT NULL CHECK (type ~ '^settlement\.[a-z_]+$'),
    -- The settlement as GET /v1/settlements/{id} shows it at the commit of
    -- the event's transaction (filled in by settle_events_fill below), plus
    -- event_id, reason, at and, for a transition, from_state.
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL,
    CONSTRAINT settlement_events_n_key UNIQUE (settlement_id, n),
    CONSTRAINT settlement_events_id_form CHECK (event_id = settlement_id || ':' || n)
);
-- Retention reads old events in created_at order.
CREATE INDEX settlement_events_created_idx ON settlement_events (created_at);

-- The sinks a relay has delivered to since it was configured (the webhook
-- URL, or the broker's name). An event gets one pending delivery per sink
-- known when its transaction commits; a sink added later receives the
-- events written from then on.
CREATE TABLE event_sinks (
    sink       text        PRIMARY KEY CHECK (length(sink) BETWEEN 1 AND 2048),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One delivery per (event, sink). A settlement's event is delivered to a
-- sink only once its predecessors there are delivered or dead.
CREATE TABLE event_deliveries (
    event_seq       bigint      NOT NULL REFERENCES settlement_events (seq) ON DELETE CASCADE,
    sink            text        NOT NULL REFERENCES event_sinks (sink),
    settlement_id   text        NOT NULL,
    n               integer     NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- The HTTP status of the last attempt (NULL: no answer, or a broker).
    last_status     integer,
    -- Why the last attempt failed, or the start of the receiver's answer.
    last_error      text,
    last_body       text        CHECK (length(last_body) <= 4096),
    first_attempt_at timestamptz,
    last_attempt_at timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    PRIMARY KEY (event_seq, sink)
);
-- The relay's claim: the due pending deliveries of a sink, and the
-- predecessor check by (sink, settlement_id, n).
CREATE INDEX event_deliveries_pending_idx ON event_deliveries (sink, next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX event_deliveries_order_idx ON event_deliveries (sink, settlement_id, n)
    WHERE state = 'pending';
CREATE INDEX event_deliveries_settlement_idx ON event_deliveries (settlement_id, n);

-- Every attempt to deliver an event, for the operator (the console's
-- settlement story). Deleted with its event.
CREATE TABLE event_attempts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_seq   bigint      NOT NULL REFERENCES settlement_events (seq) ON DELETE CASCADE,
    sink        text        NOT NULL,
    at          timestamptz NOT NULL,
    duration_ms integer     NOT NULL,
    http_status integer,
    ok          boolean     NOT NULL,
    detail      text        CHECK (length(detail) <= 4096)
);
CREATE INDEX event_attempts_event_idx ON event_attempts (event_seq, id);

-- settle_json_time is a timestamp as RFC 3339 in UTC, or JSON null.
CREATE FUNCTION settle_json_time(t timestamptz) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN t IS NULL THEN 'null'::jsonb
        ELSE to_jsonb(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) END
$$;

-- settle_settlement_view is the settlement as GET /v1/settlements/{id}
-- answers it (settlement.View in Go, same keys, empty optional strings
-- left out as there), or NULL when there is no such settlement.
CREATE FUNCTION settle_settlement_view(id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'settlement', jsonb_build_object(
            'settlement_id', s.settlement_id, 'account_id', s.account_id, 'amount_cents', s.amount_cents,
            'currency', s.currency, 'beneficiary', s.beneficiary, 'state', s.state,
            'payload_hash', s.payload_hash, 'bank_key', s.bank_key,
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

-- settle_events_fill runs when the transaction that wrote an event commits
-- (a deferred constraint trigger), so the payload shows the settlement as
-- that transaction left it (its bank facts, its movement), whatever order
-- the transaction wrote them in; and it queues the event for every sink.
CREATE FUNCTION settle_events_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE settlement_events
    SET payload = coalesce(settle_settlement_view(NEW.settlement_id), '{}') || NEW.payload
    WHERE seq = NEW.seq;
    INSERT INTO event_deliveries (event_seq, sink, settlement_id, n, next_attempt_at)
    SELECT NEW.seq, k.sink, NEW.settlement_id, NEW.n, NEW.created_at FROM event_sinks k;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER settlement_events_fill AFTER INSERT ON settlement_events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settle_events_fill();

-- `settle events redeliver` is an operator action, recorded as the
-- console's are.
ALTER TABLE operator_actions DROP CONSTRAINT operator_actions_action_check,
    ADD CONSTRAINT operator_actions_action_check CHECK (action IN ('note', 'resolve', 'redeliver'));
