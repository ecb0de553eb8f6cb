-- Balances and holds: a double-entry ledger (DESIGN.md section 20, issue 31).
--
-- ledger_accounts holds one row per (account_id, currency). A customer
-- account (the account_id a settlement pays from) keeps its balance on its
-- row, posted_minor and held_minor, changed in the transaction of every
-- posting and hold that touches it; its row lock is what serialises two
-- payouts from one account under --funds-check, and only them. The
-- system accounts (settle:clearing:BANK, the bank's clearing account a
-- payout is credited to, and settle:funding, where `settle ledger credit`
-- brings money in from) keep no balance on their row (NULL): every
-- confirmation from every account would otherwise queue on one row. Their
-- balance is the sum of their postings.
--
-- A balance is credits minus debits, so a funded customer account is
-- positive, and the sum of every account's balance in a currency is zero.
CREATE TABLE ledger_accounts (
    account_id     text        NOT NULL CHECK (length(account_id) BETWEEN 1 AND 160),
    currency       text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    kind           text        NOT NULL CHECK (kind IN ('customer', 'clearing', 'funding')),
    allow_negative boolean     NOT NULL,
    posted_minor   bigint,
    held_minor     bigint,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, currency),
    CONSTRAINT ledger_accounts_balance_kept CHECK
        ((kind = 'customer') = (posted_minor IS NOT NULL AND held_minor IS NOT NULL)),
    CONSTRAINT ledger_accounts_system_names CHECK
        ((kind = 'customer') = (account_id NOT LIKE 'settle:%'))
);

-- Every posting moves one amount from one account (debit) to another
-- (credit) in one currency. Append-only. A settlement has at most one
-- payout and one reversal; a credit is identified by its ref.
CREATE TABLE ledger_postings (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    settlement_id  text        REFERENCES settlements (settlement_id),
    kind           text        NOT NULL CHECK (kind IN ('payout', 'reversal', 'credit')),
    ref            text        CHECK (length(ref) BETWEEN 1 AND 256),
    debit_account  text        NOT NULL,
    credit_account text        NOT NULL,
    amount_minor   bigint      NOT NULL CHECK (amount_minor > 0),
    currency       text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (debit_account, currency) REFERENCES ledger_accounts (account_id, currency),
    FOREIGN KEY (credit_account, currency) REFERENCES ledger_accounts (account_id, currency),
    CONSTRAINT ledger_postings_two_accounts CHECK (debit_account <> credit_account),
    CONSTRAINT ledger_postings_identity CHECK (CASE kind
        WHEN 'credit' THEN ref IS NOT NULL AND settlement_id IS NULL
        ELSE settlement_id IS NOT NULL AND ref IS NULL END),
    CONSTRAINT ledger_postings_settlement_kind_key UNIQUE (settlement_id, kind),
    CONSTRAINT ledger_postings_ref_key UNIQUE (ref)
);
CREATE INDEX ledger_postings_debit_idx ON ledger_postings (debit_account, currency, id);
CREATE INDEX ledger_postings_credit_idx ON ledger_postings (credit_account, currency, id);
CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
    FOR EACH ROW EXECUTE FUNCTION settle_append_only();

-- A settlement's hold on its account: taken at intake (held), released
-- when it is confirmed (its payout posted in that transaction), voided when
-- it fails. Kept apart from the postings: an account's available balance is
-- posted minus held.
CREATE TABLE ledger_holds (
    settlement_id text        PRIMARY KEY REFERENCES settlements (settlement_id),
    account_id    text        NOT NULL,
    currency      text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_minor  bigint      NOT NULL CHECK (amount_minor > 0),
    state         text        NOT NULL CHECK (state IN ('held', 'released', 'voided')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    closed_at     timestamptz,
    CONSTRAINT ledger_holds_closed CHECK ((state = 'held') = (closed_at IS NULL))
);
CREATE INDEX ledger_holds_open_idx ON ledger_holds (account_id, currency) WHERE state = 'held';

-- A receipt refused for want of funds (--funds-check) has no settlement:
-- its outcome is kept, so that a replay gets the same answer.
ALTER TABLE settlement_receipts ADD COLUMN outcome text
    CHECK (outcome IN ('insufficient_funds'));

-- Today's data: every settlement's accounts, its hold (open while it is in
-- flight, released or voided once it ended) and every ledger movement as a
-- posting between the settlement's account and its bank's clearing
-- account, with its time. Nothing is lost: ledger_movements stays.
INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative, posted_minor, held_minor)
SELECT DISTINCT account_id, currency, 'customer', false, 0, 0 FROM (
    SELECT account_id, currency FROM settlements
    UNION SELECT account_id, currency FROM ledger_movements) a;
INSERT INTO ledger_accounts (account_id, currency, kind, allow_negative)
SELECT DISTINCT 'settle:clearing:' || bank, currency, 'clearing', true FROM settlements;

INSERT INTO ledger_holds (settlement_id, account_id, currency, amount_minor, state, created_at, closed_at)
SELECT settlement_id, account_id, currency, amount_cents,
       CASE WHEN state IN ('pending', 'sent', 'uncertain') THEN 'held'
            WHEN state = 'failed' THEN 'voided' ELSE 'released' END,
       created_at,
       CASE WHEN state NOT IN ('pending', 'sent', 'uncertain') THEN updated_at END
FROM settlements;

INSERT INTO ledger_postings (settlement_id, kind, debit_account, credit_account, amount_minor, currency, created_at)
SELECT m.settlement_id, m.kind,
       CASE m.kind WHEN 'payout' THEN m.account_id ELSE 'settle:clearing:' || s.bank END,
       CASE m.kind WHEN 'payout' THEN 'settle:clearing:' || s.bank ELSE m.account_id END,
       m.amount_cents, m.currency, m.created_at
FROM ledger_movements m JOIN settlements s USING (settlement_id)
ORDER BY m.id;

UPDATE ledger_accounts a SET
    posted_minor = coalesce((SELECT sum(CASE WHEN p.credit_account = a.account_id THEN p.amount_minor ELSE -p.amount_minor END)
                             FROM ledger_postings p
                             WHERE p.currency = a.currency AND a.account_id IN (p.debit_account, p.credit_account)), 0),
    held_minor = coalesce((SELECT sum(h.amount_minor) FROM ledger_holds h
                           WHERE h.account_id = a.account_id AND h.currency = a.currency AND h.state = 'held'), 0)
WHERE a.kind = 'customer';
