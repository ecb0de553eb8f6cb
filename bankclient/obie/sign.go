package obie

import (
	"crypto"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie/jws"
)

// The private header parameters of an Open Banking signature (read-write
// data API profile, Message Signing, Step 2), all three critical.
const (
	HeaderIAT = jws.ClaimIAT
	HeaderISS = jws.ClaimISS
	HeaderTAN = jws.ClaimTAN
)

// minKeyBits is the smallest RSA key PS256 may use (RFC 7518 section
// 3.5: "A key of size 2048 bits or larger MUST be used").
const minKeyBits = 2048

// signer makes the x-jws-signature of a request body: a JWS with detached
// content (RFC 7515 Appendix F), PS256, whose protected header holds kid,
// the three Open Banking claims and crit naming them. The payload is the
// body's exact bytes, base64url-encoded in the signing input as RFC 7515
// does by default: the profile's header lists no "b64" parameter, and a
// verifier must accept "only the claims specified".
type signer struct {
	key *rsa.PrivateKey
	kid string
	iss string
	tan string
}

// newSigner loads the signing key of opts (PEM, PKCS#1 or PKCS#8 RSA).
// Its errors name the variable to set and never hold the key.
func newSigner(opts bankclient.Options, cfg Config, loopback bool) (*signer, error) {
	if opts.SigningKeyFile == "" {
		return nil, fmt.Errorf("error configuring Open Banking signing: no signing key (set %s to a PEM RSA private key): every request must carry x-jws-signature", bankclient.EnvSigningKeyFile)
	}
	key, err := loadRSAKey(opts.SigningKeyFile)
	if err != nil {
		return nil, fmt.Errorf("error configuring Open Banking signing: %s: %w", bankclient.EnvSigningKeyFile, err)
	}
	s := &signer{key: key, kid: cfg.KID, iss: cfg.ISS, tan: cfg.TAN}
	if s.iss == "" {
		if !loopback {
			return nil, fmt.Errorf("error configuring Open Banking signing: no issuer (set %s to the http://openbanking.org.uk/iss your trust anchor knows you by)", EnvISS)
		}
		s.iss = DefaultISS
	}
	if s.tan == "" {
		s.tan = DefaultTAN
	}
	if s.kid == "" {
		tp, err := (&jose.JSONWebKey{Key: &key.PublicKey}).Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("error configuring Open Banking signing: error computing the key's thumbprint: %w", err)
		}
		s.kid = base64.RawURLEncoding.EncodeToString(tp)
	}
	return s, nil
}

// loadRSAKey reads a PEM RSA private key, PKCS#1 or PKCS#8, of at least
// minKeyBits.
func loadRSAKey(path string) (*rsa.PrivateKey, error) {
	key, err := jws.ReadRSAPrivateKey(path)
	if err != nil {
		return nil, err
	}
	if n := key.N.BitLen(); n < minKeyBits {
		return nil, fmt.Errorf("the RSA key in %s has %d bits; PS256 needs at least %d", path, n, minKeyBits)
	}
	return key, nil
}

// errSigning is wrapped by a failure to sign (nothing was sent).
var errSigning = errors.New("error signing the request")

// sign returns the x-jws-signature of body at now: base64url(header) ".."
// base64url(signature).
func (s *signer) sign(body []byte, now time.Time) (string, error) {
	sig, err := jws.Sign(s.key, jws.Header{KID: s.kid, ISS: s.iss, TAN: s.tan}, now, body)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errSigning, err)
	}
	return sig, nil
}

// The bank's answers are signed too ("A request would be signed by a TPP's
// private key and a response would be signed by the ASPSP's private key";
// "The TPP should verify the signature of API responses that it
// receives"). With the bank's public key (Config.BankKeyFile), every
// answer the connector acts on (200, 201, 400) must carry a signature
// that verifies over its body (jws.Verify, in roundTrip), or it is not
// acted on.
