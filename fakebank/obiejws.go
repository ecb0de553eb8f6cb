package fakebank

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Open Banking's message signing (read-write data API profile, "Message
// Signing"): a detached JWS (RFC 7515 Appendix F) of the HTTP body in the
// x-jws-signature header, signed PS256, with a JOSE header of exactly
// alg, kid, the three http://openbanking.org.uk/ claims iat, iss and tan,
// crit naming those three, and optionally typ (JOSE) and cty (json).

// The private header parameters of Open Banking's JOSE header.
const (
	ClaimIAT = "http://openbanking.org.uk/iat"
	ClaimISS = "http://openbanking.org.uk/iss"
	ClaimTAN = "http://openbanking.org.uk/tan"
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

// iatSkew is how far in the future a signature's iat may be, for clocks
// that disagree a little.
const iatSkew = time.Minute

// ReadRSAPublicKey reads a PEM file holding an RSA public key (a PUBLIC
// KEY, an RSA PUBLIC KEY, or a CERTIFICATE), as --jws-public-key takes.
func ReadRSAPublicKey(path string) (*rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading public key: %w", err)
	}
	blk, _ := pem.Decode(data)
	if blk == nil {
		return nil, fmt.Errorf("error reading public key %s: no PEM block", path)
	}
	var pub any
	switch blk.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(blk.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(blk.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(blk.Bytes); err == nil {
			pub = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("error reading public key %s: PEM block %q is not a public key or certificate", path, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("error reading public key %s: %w", path, err)
	}
	rsaPub, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("error reading public key %s: not an RSA key (PS256 needs one)", path)
	}
	return rsaPub, nil
}

// ReadRSAPrivateKey reads a PEM file holding an RSA private key (PKCS #8
// or PKCS #1), as --jws-signing-key takes.
func ReadRSAPrivateKey(path string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading private key: %w", err)
	}
	blk, _ := pem.Decode(data)
	if blk == nil {
		return nil, fmt.Errorf("error reading private key %s: no PEM block", path)
	}
	var key any
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("error reading private key %s: PEM block %q is not a private key", path, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("error reading private key %s: %w", path, err)
	}
	rsaKey, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("error reading private key %s: not an RSA key (PS256 needs one)", path)
	}
	return rsaKey, nil
}

// SignDetachedJWS signs body as Open Banking's profile says, with key
// (kid keyID, iss issuer, tan OBTrustAnchor, iat now), and returns the
// detached JWS for x-jws-signature. It is how the bank signs its answers;
// tests sign requests with it too.
func SignDetachedJWS(key *rsa.PrivateKey, keyID, issuer string, now time.Time, body []byte) (string, error) {
	opts := (&jose.SignerOptions{}).
		WithType("JOSE").
		WithHeader(jose.HeaderKey("kid"), keyID).
		WithHeader(ClaimIAT, now.Unix()).
		WithHeader(ClaimISS, issuer).
		WithHeader(ClaimTAN, OBTrustAnchor).
		WithCritical(ClaimIAT, ClaimISS, ClaimTAN)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.PS256, Key: key}, opts)
	if err != nil {
		return "", fmt.Errorf("error making a JWS signer: %w", err)
	}
	obj, err := signer.Sign(body)
	if err != nil {
		return "", fmt.Errorf("error signing: %w", err)
	}
	sig, err := obj.DetachedCompactSerialize()
	if err != nil {
		return "", fmt.Errorf("error serialising a JWS: %w", err)
	}
	return sig, nil
}

// VerifyDetachedJWS checks sig, the x-jws-signature of a request or answer, over
// body with pub, following the profile's "Process for Verifying a
// Signature": the JOSE header holds only the profile's claims, alg is
// PS256, kid is present, iat is a number in the past, iss and tan are
// strings, crit names exactly the three claims; then the signature of the
// re-assembled JWS (the payload re-inserted, base64url-encoded, as RFC
// 7515 Appendix F does) is checked. go-jose parses the JWS and checks its
// algorithm; it refuses to verify critical headers it does not know, so
// the RSASSA-PSS signature itself is checked with crypto/rsa.
func VerifyDetachedJWS(sig string, body []byte, pub *rsa.PublicKey, now time.Time) error {
	if sig == "" {
		return fieldErr(OBSignatureMissing, HeaderJWSSignature, "the request must be signed (%s)", HeaderJWSSignature)
	}
	parts := strings.Split(sig, ".")
	if len(parts) != 3 || parts[1] != "" {
		return fieldErr(OBSignatureMalformed, HeaderJWSSignature, "not a detached JWS (header..signature)")
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fieldErr(OBSignatureMalformed, HeaderJWSSignature, "JOSE header is not base64url")
	}
	if err := checkJOSEHeader(hdr, now); err != nil {
		return err
	}
	if _, err := jose.ParseDetached(sig, body, []jose.SignatureAlgorithm{jose.PS256}); err != nil {
		return fieldErr(OBSignatureMalformed, HeaderJWSSignature, "not a PS256 JWS: %v", err)
	}
	sigBytes, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fieldErr(OBSignatureMalformed, HeaderJWSSignature, "signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)))
	if err := rsa.VerifyPSS(pub, crypto.SHA256, digest[:], sigBytes, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}); err != nil {
		return fieldErr(OBSignatureInvalid, HeaderJWSSignature, "the signature does not verify with the TPP's key over this body")
	}
	return nil
}

// obCrit is the crit of every signature, as a set.
var obCrit = []string{ClaimIAT, ClaimISS, ClaimTAN}

// checkJOSEHeader checks a JOSE header against the profile's Step 2.
func checkJOSEHeader(raw []byte, now time.Time) error {
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw, &h); err != nil {
		return fieldErr(OBSignatureMalformed, HeaderJWSSignature, "JOSE header is not a JSON object")
	}
	for name := range h {
		switch name {
		case "alg", "kid", "typ", "cty", "crit", ClaimIAT, ClaimISS, ClaimTAN:
		default:
			return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "JOSE header has %q, which the profile does not allow", name)
		}
	}
	str := func(name string, required bool) (string, error) {
		v, ok := h[name]
		if !ok {
			if required {
				return "", fieldErr(OBSignatureMissingClaim, HeaderJWSSignature, "JOSE header has no %q", name)
			}
			return "", nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || (required && s == "") {
			return "", fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "%q must be a non-empty string", name)
		}
		return s, nil
	}
	for _, name := range []string{"kid", ClaimISS, ClaimTAN} {
		if _, err := str(name, true); err != nil {
			return err
		}
	}
	if alg, err := str("alg", true); err != nil {
		return err
	} else if alg != string(jose.PS256) {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "alg must be PS256, got %q", alg)
	}
	if typ, err := str("typ", false); err != nil {
		return err
	} else if _, ok := h["typ"]; ok && typ != "JOSE" {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "typ must be JOSE")
	}
	if cty, err := str("cty", false); err != nil {
		return err
	} else if _, ok := h["cty"]; ok && cty != "json" && cty != "application/json" {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "cty must be json or application/json")
	}
	iatRaw, ok := h[ClaimIAT]
	if !ok {
		return fieldErr(OBSignatureMissingClaim, HeaderJWSSignature, "JOSE header has no %q", ClaimIAT)
	}
	var iat json.Number
	dec := json.NewDecoder(strings.NewReader(string(iatRaw)))
	dec.UseNumber()
	if err := dec.Decode(&iat); err != nil {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "%q must be a JSON number", ClaimIAT)
	}
	secs, err := iat.Float64()
	if err != nil || time.Unix(int64(secs), 0).After(now.Add(iatSkew)) {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "%q must be a time in the past", ClaimIAT)
	}
	critRaw, ok := h["crit"]
	if !ok {
		return fieldErr(OBSignatureMissingClaim, HeaderJWSSignature, "JOSE header has no crit")
	}
	var crit []string
	if err := json.Unmarshal(critRaw, &crit); err != nil {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "crit must be an array of strings")
	}
	got := slices.Clone(crit)
	slices.Sort(got)
	want := slices.Clone(obCrit)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fieldErr(OBSignatureInvalidClaim, HeaderJWSSignature, "crit must be exactly %s", strings.Join(obCrit, ", "))
	}
	return nil
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
