package obie

import (
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/settle/settle/bankclient"
)

// The private header parameters of an Open Banking signature (read-write
// data API profile, Message Signing, Step 2), all three critical.
const (
	HeaderIAT = "http://openbanking.org.uk/iat"
	HeaderISS = "http://openbanking.org.uk/iss"
	HeaderTAN = "http://openbanking.org.uk/tan"
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
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading the signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("no PEM block in %s", path)
	}
	var key *rsa.PrivateKey
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		var k any
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		if err == nil {
			var ok bool
			if key, ok = k.(*rsa.PrivateKey); !ok {
				return nil, fmt.Errorf("the key in %s is a %T, not RSA: PS256 signs with RSA", path, k)
			}
		}
	default:
		return nil, fmt.Errorf("the PEM block in %s is %q, not an RSA PRIVATE KEY or PRIVATE KEY", path, block.Type)
	}
	if err != nil {
		// The parser's error describes the structure, never the bytes.
		return nil, fmt.Errorf("error parsing the key in %s: %w", path, err)
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
	opts := (&jose.SignerOptions{}).
		WithHeader(jose.HeaderKey("kid"), s.kid).
		WithHeader(HeaderIAT, now.Unix()).
		WithHeader(HeaderISS, s.iss).
		WithHeader(HeaderTAN, s.tan).
		WithCritical(HeaderIAT, HeaderISS, HeaderTAN)
	js, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.PS256, Key: s.key}, opts)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errSigning, err)
	}
	obj, err := js.Sign(body)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errSigning, err)
	}
	sig, err := obj.DetachedCompactSerialize()
	if err != nil {
		return "", fmt.Errorf("%w: %w", errSigning, err)
	}
	return sig, nil
}
