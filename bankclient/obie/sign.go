package obie

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
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

// The bank's answers are signed too ("A request would be signed by a TPP's
// private key and a response would be signed by the ASPSP's private key";
// "The TPP should verify the signature of API responses that it
// receives"). With the bank's public key (Config.BankKeyFile), every
// answer the connector acts on (200, 201, 400) must carry a signature
// that verifies over its body, or it is not acted on.

// iatSkew is how far in the future a signature's iat may be, for clocks
// that disagree a little.
const iatSkew = time.Minute

// loadRSAPublicKey reads a PEM RSA public key: a PUBLIC KEY, an RSA
// PUBLIC KEY, or a CERTIFICATE.
func loadRSAPublicKey(path string) (*rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading the bank's public key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("no PEM block in %s", path)
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("the PEM block in %s is %q, not a public key or certificate", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("error parsing the key in %s: %w", path, err)
	}
	key, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("the key in %s is a %T, not RSA: PS256 signs with RSA", path, pub)
	}
	return key, nil
}

// verifyDetached checks sig, a detached JWS, over body with pub, as the
// profile's "Process for Verifying a Signature" says: a JOSE header of
// only the profile's parameters (alg PS256, kid, the three claims, crit
// naming exactly them, optional typ JOSE and cty json), iat a number not
// in the future, then the RSASSA-PSS signature over base64url(header) "."
// base64url(body). (go-jose refuses to verify critical parameters it does
// not know, so the signature is checked with crypto/rsa.)
func verifyDetached(sig string, body []byte, pub *rsa.PublicKey, now time.Time) error {
	parts := strings.Split(sig, ".")
	if sig == "" {
		return errors.New("no x-jws-signature")
	}
	if len(parts) != 3 || parts[1] != "" {
		return errors.New("not a detached JWS (header..signature)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return errors.New("the JOSE header is not base64url")
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw, &h); err != nil {
		return errors.New("the JOSE header is not a JSON object")
	}
	str := func(name string) string {
		var s string
		_ = json.Unmarshal(h[name], &s)
		return s
	}
	for name := range h {
		switch name {
		case "alg", "kid", "typ", "cty", "crit", HeaderIAT, HeaderISS, HeaderTAN:
		default:
			return fmt.Errorf("the JOSE header has %q, which the profile does not allow", bankclient.Sanitize(name))
		}
	}
	var iat float64
	var crit []string
	switch {
	case str("alg") != string(jose.PS256):
		return errors.New("alg is not PS256")
	case str("kid") == "" || str(HeaderISS) == "" || str(HeaderTAN) == "":
		return errors.New("kid, iss or tan missing")
	case h["typ"] != nil && str("typ") != "JOSE":
		return errors.New("typ is not JOSE")
	case h["cty"] != nil && str("cty") != "json" && str("cty") != "application/json":
		return errors.New("cty is not json")
	case json.Unmarshal(h[HeaderIAT], &iat) != nil:
		return errors.New("iat is not a number")
	case time.Unix(int64(iat), 0).After(now.Add(iatSkew)):
		return errors.New("iat is in the future")
	case json.Unmarshal(h["crit"], &crit) != nil || !sameSet(crit, []string{HeaderIAT, HeaderISS, HeaderTAN}):
		return errors.New("crit does not name exactly the three claims")
	}
	s, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return errors.New("the signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)))
	if err := rsa.VerifyPSS(pub, crypto.SHA256, digest[:], s, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}); err != nil {
		return errors.New("the signature does not verify over the body")
	}
	return nil
}

// sameSet reports whether a and b hold the same strings, each once.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, s := range a {
		if seen[s] {
			return false
		}
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			return false
		}
	}
	return true
}
