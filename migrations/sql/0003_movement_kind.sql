-- A settlement's ledger movements (DESIGN.md sections 4 and 15): the payout
-- written with the move to confirmed, and the reversal written with the move
-- to returned. At most one of each per settlement.
ALTER TABLE ledger_movements
    ADD COLUMN kind text NOT NULL DEFAULT 'payout' CHECK (kind IN ('payout', 'reversal')),
    DROP CONSTRAINT ledger_movements_settlement_id_key,
    ADD CONSTRAINT ledger_movements_settlement_id_kind_key UNIQUE (settlement_id, kind);
