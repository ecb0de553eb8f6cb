-- Who an operator action came from (issue 32, item 11).
--
-- source_addr is the address the console's request came from (the peer's
-- IP; NULL for an action taken on the command line, such as settle events
-- redeliver). operator_verified says whether the operator's name was
-- checked against their own credential (--operators-file) or only asserted:
-- the Basic user name given with the shared API token, or the name typed
-- into an open console. Actions recorded before this migration were all
-- asserted, which the default says.
--
-- (Assigned 0013, which migration 0013_event_sinks_forget took first.)
--
-- Adding columns fires no row trigger: the append-only rule of the table
-- stays whole.
ALTER TABLE operator_actions
    ADD COLUMN source_addr inet,
    ADD COLUMN operator_verified boolean NOT NULL DEFAULT false;
