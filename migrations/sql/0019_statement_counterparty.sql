-- The other party of each statement line (issue 33): its name and account
-- as the bank reports them (camt RltdPties, MT940 :86:; BAI2 carries
-- neither), stored so that the console and the reports show them and so
-- that a line imported before its settlement existed can be suggested for
-- it later, when the sweep and settle reconcile bank --statements examine
-- the unmatched lines again. NULL when the file does not say (and for the
-- lines imported before this migration).
ALTER TABLE bank_statement_entries
    ADD COLUMN counterparty         text,
    ADD COLUMN counterparty_account text;
