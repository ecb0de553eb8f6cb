-- A settled payment can come back (DESIGN.md sections 3 and 15): the state
-- returned joins the lists the columns accept.
ALTER TABLE settlements DROP CONSTRAINT settlements_state_check,
    ADD CONSTRAINT settlements_state_check
    CHECK (state IN ('pending', 'sent', 'uncertain', 'confirmed', 'failed', 'returned'));
ALTER TABLE settlement_transitions DROP CONSTRAINT settlement_transitions_from_state_check,
    ADD CONSTRAINT settlement_transitions_from_state_check
    CHECK (from_state IN ('pending', 'sent', 'uncertain', 'confirmed', 'failed', 'returned'));
ALTER TABLE settlement_transitions DROP CONSTRAINT settlement_transitions_to_state_check,
    ADD CONSTRAINT settlement_transitions_to_state_check
    CHECK (to_state IN ('pending', 'sent', 'uncertain', 'confirmed', 'failed', 'returned'));
