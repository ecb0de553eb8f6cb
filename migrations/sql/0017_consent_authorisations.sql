-- The account holder's authorisation of a consent (UK Open Banking's
-- authorization code grant, DESIGN.md section 13; issue 33): one row per
-- settlement whose consent must be authorised by the account holder at
-- their bank before the payment can be made with their token.
--
-- state is the OAuth state of the authorisation link (random, unguessable):
-- the redirect back to the console is found by it, and a redirect naming
-- no row is refused. The PKCE verifier is not stored: the connector
-- derives it from its token key, the consent and the state.
--
-- status: awaiting (no token yet: the link is listed for the operator to
-- send), authorised (the token is kept), rejected (the account holder's
-- redirect came back with an error; the bank's consent status decides).
--
-- grant_sealed holds the account holder's tokens sealed by the connector
-- (AES-256-GCM under the token key, bound to the consent): never a token
-- in clear. token_expires_at is when its access token expires, so that
-- it is refreshed before the payment is sent.
CREATE TABLE consent_authorisations (
    settlement_id    text PRIMARY KEY REFERENCES settlements (settlement_id),
    consent_id       text NOT NULL CHECK (length(consent_id) BETWEEN 1 AND 128),
    state            text NOT NULL UNIQUE CHECK (length(state) BETWEEN 32 AND 128),
    status           text NOT NULL DEFAULT 'awaiting' CHECK (status IN ('awaiting', 'authorised', 'rejected')),
    grant_sealed     text CHECK (grant_sealed IS NULL OR grant_sealed LIKE 'v_.%'),
    token_expires_at timestamptz,
    error            text CHECK (error IS NULL OR length(error) <= 500),
    callbacks        integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    authorised_at    timestamptz,
    CHECK ((status = 'authorised') = (grant_sealed IS NOT NULL))
);

-- The console's list of consents awaiting the account holder.
CREATE INDEX consent_authorisations_awaiting ON consent_authorisations (created_at)
    WHERE status <> 'authorised';

ALTER TABLE bank_attempts DROP CONSTRAINT bank_attempts_op_check,
    ADD CONSTRAINT bank_attempts_op_check
        CHECK (op IN ('send', 'status', 'replay', 'search', 'consent', 'consent_status', 'token', 'token_refresh'));
