-- Imported bank statements (DESIGN.md sections 4 and 14): camt.053, camt.054,
-- BAI2 and MT940 files, stored exactly once and matched to settlements.
--
-- A file is imported exactly once: bank_statement_files is keyed by the
-- sha256 of its bytes, and an import inserts that row first (ON CONFLICT DO
-- NOTHING) and its statements and entries in the same transaction, so a
-- second import of the same bytes, concurrent or later, stores nothing.
--
-- One file holds one or more statements (a camt Stmt/Ntfctn/Rpt, a BAI2 03
-- account, an MT940 message): bank_statements has one row per statement.
-- Its digest is the file's digest and the statement's place in the file,
-- 'sha256:<hex>/<n>', unique like the file's.
--
-- bank_statement_entries has one row per transaction detail (camt TxDtls),
-- not per entry (Ntry): a batch booking is one entry of many payments, each
-- with its own end-to-end reference, and each may belong to another
-- settlement, so the reference, the amount, the match and the settlement
-- are facts of the detail. The entry's own facts (its bank reference, its
-- amount, direction, dates, reversal mark) are repeated on each of its rows.
-- An entry without details (and every BAI2 or MT940 entry, which has
-- exactly one) has one row. An entry is keyed by its statement and its
-- position in it, a detail by its index in the entry.

CREATE TABLE bank_statement_files (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest      text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    -- The name the file was first imported under (the same bytes under
    -- another name are the same file).
    file_name   text        NOT NULL CHECK (length(file_name) BETWEEN 1 AND 4096),
    format      text        NOT NULL CHECK (format IN ('camt.053', 'camt.054', 'bai2', 'mt940')),
    size_bytes  bigint      NOT NULL CHECK (size_bytes > 0),
    statements  integer     NOT NULL DEFAULT 0 CHECK (statements >= 0),
    entries     bigint      NOT NULL DEFAULT 0 CHECK (entries >= 0),
    imported_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT bank_statement_files_digest_key UNIQUE (digest)
);

CREATE TABLE bank_statements (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    file_id       bigint      NOT NULL REFERENCES bank_statement_files (id),
    -- The statement's place in its file, from 1.
    seq           integer     NOT NULL CHECK (seq >= 1),
    digest        text        NOT NULL,
    format        text        NOT NULL CHECK (format IN ('camt.053', 'camt.054', 'bai2', 'mt940')),
    -- NULL when the file does not say.
    account       text,
    currency      text        CHECK (currency ~ '^[A-Z]{3}$'),
    opening_minor bigint,
    closing_minor bigint,
    -- opening + credits - debits = closing; NULL when a balance is missing.
    balanced      boolean,
    entries       integer     NOT NULL DEFAULT 0 CHECK (entries >= 0),
    imported_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT bank_statements_digest_key UNIQUE (digest),
    CONSTRAINT bank_statements_file_seq_key UNIQUE (file_id, seq),
    CONSTRAINT bank_statements_digest_seq CHECK (
        digest ~ '^sha256:[0-9a-f]{64}/[1-9][0-9]*$' AND split_part(digest, '/', 2) = seq::text),
    CONSTRAINT bank_statements_balanced_needs_balances CHECK (
        balanced IS NULL OR (opening_minor IS NOT NULL AND closing_minor IS NOT NULL))
);
CREATE INDEX bank_statements_unbalanced_idx ON bank_statements (id) WHERE balanced = false;

CREATE TABLE bank_statement_entries (
    id                      bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    statement_id            bigint  NOT NULL REFERENCES bank_statements (id),
    -- The entry's place in its statement, from 1.
    position                integer NOT NULL CHECK (position >= 1),
    -- The transaction detail's place in its entry, from 1, and how many the
    -- entry has (0: none, and this row stands for the entry).
    tx_index                integer NOT NULL CHECK (tx_index >= 1),
    tx_count                integer NOT NULL CHECK (tx_count >= 0),
    -- The bank's own reference of the entry (camt AcctSvcrRef, else
    -- NtryRef; BAI2 bank reference; MT940 after //).
    entry_ref               text,
    entry_amount_minor      bigint  NOT NULL CHECK (entry_amount_minor >= 0),
    -- The detail's amount in the entry's currency; NULL when the bank gives
    -- it only in another currency.
    amount_minor            bigint  CHECK (amount_minor >= 0),
    currency                text    NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    direction               text    NOT NULL CHECK (direction IN ('credit', 'debit')),
    booked_on               date,
    value_on                date,
    -- The originator's end-to-end reference: what settle sent as the
    -- payment's reference, when the line is one of settle's payments.
    end_to_end_id           text,
    reversal                boolean NOT NULL,
    return_reason           text,
    -- Set only by a reference match; a suggestion is never a match.
    settlement_id           text    REFERENCES settlements (settlement_id),
    match                   text    NOT NULL CHECK (match IN ('reference', 'suggested', 'none')),
    suggested_settlement_id text    REFERENCES settlements (settlement_id),
    suggestion              text,
    CONSTRAINT bank_statement_entries_position_key UNIQUE (statement_id, position, tx_index),
    CONSTRAINT bank_statement_entries_tx_index CHECK (tx_index <= greatest(tx_count, 1)),
    CONSTRAINT bank_statement_entries_no_details CHECK (
        tx_count > 0 OR (end_to_end_id IS NULL AND amount_minor = entry_amount_minor)),
    CONSTRAINT bank_statement_entries_reference_match CHECK ((match = 'reference') = (settlement_id IS NOT NULL)),
    CONSTRAINT bank_statement_entries_suggested CHECK (
        (match = 'suggested') = (suggested_settlement_id IS NOT NULL)
        AND (match = 'suggested') = (suggestion IS NOT NULL))
);
CREATE INDEX bank_statement_entries_settlement_idx ON bank_statement_entries (settlement_id)
    WHERE settlement_id IS NOT NULL;
CREATE INDEX bank_statement_entries_unmatched_idx ON bank_statement_entries (statement_id, position, tx_index)
    WHERE settlement_id IS NULL;
