package obie

import "time"

// The environment the connector reads beside bankclient.OptionsFromEnv's
// (SETTLE_BANK_TOKEN, SETTLE_BANK_SIGNING_KEY_FILE, SETTLE_BANK_CERT_FILE,
// SETTLE_BANK_KEY_FILE, SETTLE_BANK_CA_FILE): the claims of the
// x-jws-signature header (read-write data API profile, Message Signing,
// Step 2).
const (
	// EnvISS is the http://openbanking.org.uk/iss claim: who signs. With
	// the Open Banking Directory as trust anchor it is
	// "{org-id}/{software-statement-id}"; with a certificate, the
	// certificate's subject. Required for a bank that is not on this
	// machine; DefaultISS otherwise.
	EnvISS = "SETTLE_OBIE_ISS"
	// EnvTAN is the http://openbanking.org.uk/tan claim: the domain of the
	// trust anchor holding our public key (DefaultTAN).
	EnvTAN = "SETTLE_OBIE_TAN"
	// EnvKID is the kid header: the id the trust anchor knows our signing
	// key by. Empty: the key's RFC 7638 thumbprint (SHA-256, base64url).
	EnvKID = "SETTLE_OBIE_KID"
	// EnvBankKeyFile is the bank's public key (PEM: a PUBLIC KEY, RSA
	// PUBLIC KEY or CERTIFICATE): when set, every answer the connector
	// acts on must carry an x-jws-signature that verifies with it. Empty:
	// answers are not verified (mutual TLS vouches for the bank).
	EnvBankKeyFile = "SETTLE_OBIE_BANK_PUBLIC_KEY_FILE"
	// EnvTokenKey is the token key: the base64 of 32 random bytes, from
	// which the keys that seal the account holders' tokens (AES-256-GCM)
	// and derive the PKCE verifiers are made. Required (or
	// EnvTokenKeyFile): the connector will not start without it. Changing
	// it voids the tokens kept and the authorisation links sent.
	EnvTokenKey = "SETTLE_TOKEN_KEY"
	// EnvTokenKeyFile is a file holding the token key (see EnvTokenKey).
	EnvTokenKeyFile = "SETTLE_TOKEN_KEY_FILE"
	// EnvClientID is our client id at the bank's authorisation server
	// (OAuth client_id, given at registration). Required unless the bank
	// is on this machine (DefaultClientID).
	EnvClientID = "SETTLE_OBIE_CLIENT_ID"
	// EnvAuthorizeURL and EnvTokenURL are the bank's authorization and
	// token endpoints (its OpenID configuration's authorization_endpoint
	// and token_endpoint). Default: /authorize and /token at the bank's
	// host.
	EnvAuthorizeURL = "SETTLE_OBIE_AUTHORIZE_URL"
	EnvTokenURL     = "SETTLE_OBIE_TOKEN_URL" //nolint:gosec // the name of a variable holding a URL, not a credential

)

// Defaults of Config.
const (
	// DefaultISS identifies settle to a bank on this machine (the
	// fakebank); a real bank needs SETTLE_OBIE_ISS.
	DefaultISS = "settle"
	// DefaultTAN is the Open Banking Directory's domain, the value the
	// profile gives for it.
	DefaultTAN = "openbanking.org.uk"
	// DefaultClientID is our client id at a bank on this machine.
	DefaultClientID = "settle"
)

// Config is what the connector needs beyond bankclient.Options: the
// claims it signs with, and its clock.
type Config struct {
	// ISS, TAN and KID are the signature's issuer, trust anchor and key
	// id (see EnvISS, EnvTAN, EnvKID). Empty ISS and TAN take the
	// defaults (ISS only for a loopback bank); empty KID the key's
	// thumbprint.
	ISS string
	TAN string
	KID string
	// BankKeyFile is the bank's public key (see EnvBankKeyFile).
	BankKeyFile string
	// TokenKey (base64) or TokenKeyFile is the token key (see
	// EnvTokenKey); one is required.
	TokenKey, TokenKeyFile string
	// ClientID is our client id at the authorisation server (see
	// EnvClientID); empty: DefaultClientID for a loopback bank.
	ClientID string
	// AuthorizeURL and TokenURL are the authorisation server's endpoints
	// (see EnvAuthorizeURL); empty: /authorize and /token at the bank.
	AuthorizeURL, TokenURL string
	// Now is the clock of the signature's iat claim and of the replay
	// heuristic. Nil: time.Now.
	Now func() time.Time
}

// ConfigFromEnv reads Config from the environment through getenv (pass
// os.Getenv).
func ConfigFromEnv(getenv func(string) string) Config {
	return Config{ISS: getenv(EnvISS), TAN: getenv(EnvTAN), KID: getenv(EnvKID), BankKeyFile: getenv(EnvBankKeyFile),
		TokenKey: getenv(EnvTokenKey), TokenKeyFile: getenv(EnvTokenKeyFile), ClientID: getenv(EnvClientID),
		AuthorizeURL: getenv(EnvAuthorizeURL), TokenURL: getenv(EnvTokenURL)}
}
