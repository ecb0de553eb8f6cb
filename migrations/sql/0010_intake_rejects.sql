-- Events from a queue that can never be accepted (DESIGN.md section 18):
-- kept with their bytes, never dropped. source is the source's kind (nats,
-- kafka, sqs, lambda), transport_id the broker's own id of the message
-- (JetStream stream sequence, topic/partition/offset, SQS MessageId); one
-- row per (source, transport_id), so a redelivered reject is stored once.
-- reason is why it was refused (the field and rule at fault, too_old,
-- too_large, poison).
CREATE TABLE intake_rejects (
    id bigserial PRIMARY KEY,
    source text NOT NULL CHECK (length(source) BETWEEN 1 AND 32),
    transport_id text NOT NULL CHECK (length(transport_id) BETWEEN 1 AND 512),
    received_at timestamptz NOT NULL,
    reason text NOT NULL,
    raw bytea NOT NULL,
    CONSTRAINT intake_rejects_transport_key UNIQUE (source, transport_id)
);
CREATE INDEX intake_rejects_received_idx ON intake_rejects (received_at);
