-- A customer account's kept balance in up to 64 shards (issue 28).
--
-- Each transaction changes the balance shard of its connection, the
-- backend's pid modulo the number of shards (migration 0016), and holds
-- that row's lock until it commits: two transactions of the same account
-- whose connections fall on the same shard queue one after the other, the
-- second waiting for the whole of the first. With 16 shards, the 16 to 20
-- connections of a busy worker always share some: in settle bench the
-- batches of 100 payouts, all of the same 100 accounts, used 12 shards
-- over 16 connections, and the creation's statement waited for another
-- transaction (a lock on transactionid) in a third of the samples of
-- pg_stat_activity. Modulo 64, connections share a shard four times less
-- often. A balance is still the sum of its shards, however many there are;
-- a worker of before this migration keeps writing shards 0 to 15, which
-- stay valid.
ALTER TABLE ledger_balances
    DROP CONSTRAINT ledger_balances_shard_check,
    ADD CONSTRAINT ledger_balances_shard_check CHECK (shard BETWEEN 0 AND 63);
