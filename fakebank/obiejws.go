package fakebank

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"sync"
	"time"

	"github.com/settle/settle/bankclient/obie/jws"
)

// Open Banking's message signing (read-write data API profile, "Message
// Signing"): a detached JWS (RFC 7515 Appendix F) of the HTTP body in the
// x-jws-signature header, signed PS256, with a JOSE header of exactly
// alg, kid, the three http://openbanking.org.uk/ claims iat, iss and tan,
// crit naming those three, and optionally typ (JOSE) and cty (json).

// The private header parameters of Open Banking's JOSE header.
const (
	ClaimIAT = jws.ClaimIAT
	ClaimISS = jws.ClaimISS
	ClaimTAN = jws.ClaimTAN
)

// HeaderJWSSignature is the header carrying a detached JWS of the body.
const HeaderJWSSignature = "x-jws-signature"

// OBTrustAnchor is the tan of the bank's own signatures.
const OBTrustAnchor = "openbanking.org.uk"

// obIssuer and obKeyID name the bank's signing key in its signatures.
const (
	obIssuer = "fakebank"
	obKeyID  = "fakebank-signing-1"
)

// ReadRSAPublicKey reads a PEM file holding an RSA public key (a PUBLIC
// KEY, an RSA PUBLIC KEY, or a CERTIFICATE), as --jws-public-key takes.
func ReadRSAPublicKey(path string) (*rsa.PublicKey, error) {
	return jws.ReadRSAPublicKey(path)
}

// ReadRSAPrivateKey reads a PEM file holding an RSA private key (PKCS #8
// or PKCS #1), as --jws-signing-key takes.
func ReadRSAPrivateKey(path string) (*rsa.PrivateKey, error) {
	return jws.ReadRSAPrivateKey(path)
}

// SignDetachedJWS signs body as Open Banking's profile says, with key
// (kid keyID, iss issuer, tan OBTrustAnchor, typ JOSE, iat now), and
// returns the detached JWS for x-jws-signature. It is how the bank signs
// its answers; tests sign requests with it too.
func SignDetachedJWS(key *rsa.PrivateKey, keyID, issuer string, now time.Time, body []byte) (string, error) {
	return jws.Sign(key, jws.Header{KID: keyID, ISS: issuer, TAN: OBTrustAnchor, Type: "JOSE"}, now, body)
}

// VerifyDetachedJWS checks sig, the x-jws-signature of a request or
// answer, over body with pub, as jws.Verify does, and refuses it with the
// OBError1 of the profile's code (UK.OBIE.Signature.*), its Path the
// header.
func VerifyDetachedJWS(sig string, body []byte, pub *rsa.PublicKey, now time.Time) error {
	if sig == "" {
		return fieldErr(OBSignatureMissing, HeaderJWSSignature, "the request must be signed (%s)", HeaderJWSSignature)
	}
	err := jws.Verify(sig, body, pub, now)
	var je *jws.Error
	if errors.As(err, &je) {
		return fieldErr(je.Code, HeaderJWSSignature, "%s", je.Msg)
	}
	return err
}

// defaultSigningKey is the bank's signing key when Options gives none:
// made once per process, as generating an RSA key takes a while.
var defaultSigningKey = sync.OnceValues(func() (*rsa.PrivateKey, error) {
	return rsa.GenerateKey(rand.Reader, 2048)
})

// errNoSigningKey: the bank could not make its signing key.
var errNoSigningKey = errors.New("no signing key")

// JWSSigningPublicKey is the public key of the bank's response signatures
// (obie profile), for a TPP to verify them; nil in the other profiles.
func (b *Bank) JWSSigningPublicKey() *rsa.PublicKey {
	if b.signKey == nil {
		return nil
	}
	return &b.signKey.PublicKey
}
