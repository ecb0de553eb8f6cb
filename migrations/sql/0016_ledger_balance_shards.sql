-- A customer account's kept balance in shards (issue 31).
--
-- With the balance on the account's row (0015), every payout of an account
-- changed that one row twice (its hold at intake, its posting when
-- confirmed), each time holding the row's lock until its transaction
-- committed: the payouts of one busy account queued one commit after
-- another, with --funds-check off too (in one run of settle bench, a hot
-- account paid 35 settlements/s where the release before paid 220). The
-- kept balance is now the sum of up to 16 rows of ledger_balances, each
-- transaction changing the shard of its connection (the backend's pid
-- modulo 16), so that the payouts of one account spread over 16 rows.
--
-- --funds-check serialises the intakes of one account on the account's own
-- row in ledger_accounts (FOR NO KEY UPDATE), which nothing else locks,
-- then reads the sum of the shards: a hold is the only change that lowers
-- an available balance, and holds are taken under that lock, so the sum it
-- reads can only be lower than the truth, never higher.
CREATE TABLE ledger_balances (
    account_id   text     NOT NULL,
    currency     text     NOT NULL,
    shard        smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    posted_minor bigint   NOT NULL DEFAULT 0,
    held_minor   bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, currency, shard),
    FOREIGN KEY (account_id, currency) REFERENCES ledger_accounts (account_id, currency)
);

INSERT INTO ledger_balances (account_id, currency, shard, posted_minor, held_minor)
SELECT account_id, currency, 0, posted_minor, held_minor FROM ledger_accounts WHERE kind = 'customer';

ALTER TABLE ledger_accounts
    DROP CONSTRAINT ledger_accounts_balance_kept,
    DROP COLUMN posted_minor,
    DROP COLUMN held_minor;
