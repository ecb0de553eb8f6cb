// Package jws holds Open Banking's message signing (read-write data API
// profile, "Message Signing"), for both sides of it: a detached JWS (RFC
// 7515 Appendix F) of an HTTP body, carried in x-jws-signature, signed
// PS256, with a JOSE header of exactly alg, kid, the three
// http://openbanking.org.uk/ claims iat, iss and tan, crit naming those
// three, and optionally typ (JOSE) and cty (json). The obie connector signs
// its requests and verifies the bank's answers with it; the fakebank
// verifies requests and signs its answers with it.
//
// It holds no key of its own, reads no environment, and never puts a key
// or a signature's bytes in an error.
package jws

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The private header parameters of an Open Banking signature (Message
// Signing, Step 2), all three critical.
const (
	ClaimIAT = "http://openbanking.org.uk/iat"
	ClaimISS = "http://openbanking.org.uk/iss"
	ClaimTAN = "http://openbanking.org.uk/tan"
)

// The error codes of OBError1 a signature that does not pass is refused
// with.
const (
	CodeInvalid      = "UK.OBIE.Signature.Invalid"
	CodeInvalidClaim = "UK.OBIE.Signature.InvalidClaim"
	CodeMalformed    = "UK.OBIE.Signature.Malformed"
	CodeMissing      = "UK.OBIE.Signature.Missing"
	CodeMissingClaim = "UK.OBIE.Signature.MissingClaim"
)

// IATSkew is how far in the future a signature's iat may be, for clocks
// that disagree a little.
const IATSkew = time.Minute

// crit is the crit of every signature, as a set.
var crit = []string{ClaimIAT, ClaimISS, ClaimTAN}

// Header is what a signer puts in the JOSE header besides alg and crit.
type Header struct {
	// KID is the key's id, ISS the signer's issuer, TAN its trust anchor.
	KID, ISS, TAN string
	// Type is the typ parameter ("JOSE"), left out when empty.
	Type string
}

// Sign returns the detached JWS of body, signed PS256 with key under h and
// iat now: base64url(header) ".." base64url(signature). The payload is
// the body's exact bytes, base64url-encoded in the signing input as RFC
// 7515 does by default: the profile's header lists no "b64" parameter.
func Sign(key *rsa.PrivateKey, h Header, now time.Time, body []byte) (string, error) {
	opts := &jose.SignerOptions{}
	if h.Type != "" {
		opts = opts.WithType(jose.ContentType(h.Type))
	}
	opts = opts.
		WithHeader(jose.HeaderKey("kid"), h.KID).
		WithHeader(ClaimIAT, now.Unix()).
		WithHeader(ClaimISS, h.ISS).
		WithHeader(ClaimTAN, h.TAN).
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

// Error is why a signature does not pass: an OBError1 code (one of the
// Code constants) and a message that holds none of the signature's bytes.
type Error struct {
	Code string
	Msg  string
}

// Error implements error.
func (e *Error) Error() string { return e.Msg }

func fail(code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Verify checks sig, the x-jws-signature of a request or answer, over
// body with pub, following the profile's "Process for Verifying a
// Signature": the JOSE header holds only the profile's parameters, alg is
// PS256, kid, iss and tan are non-empty strings, iat is a number not in
// the future, crit names exactly the three claims; then the signature of
// the re-assembled JWS (the payload re-inserted, base64url-encoded, as RFC
// 7515 Appendix F does) is checked. go-jose parses the JWS and checks its
// algorithm; it refuses to verify critical headers it does not know, so
// the RSASSA-PSS signature itself is checked with crypto/rsa. Its error
// is an *Error.
func Verify(sig string, body []byte, pub *rsa.PublicKey, now time.Time) error {
	if sig == "" {
		return fail(CodeMissing, "no x-jws-signature")
	}
	parts := strings.Split(sig, ".")
	if len(parts) != 3 || parts[1] != "" {
		return fail(CodeMalformed, "not a detached JWS (header..signature)")
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fail(CodeMalformed, "JOSE header is not base64url")
	}
	if err := checkHeader(hdr, now); err != nil {
		return err
	}
	if _, err := jose.ParseDetached(sig, body, []jose.SignatureAlgorithm{jose.PS256}); err != nil {
		return fail(CodeMalformed, "not a PS256 JWS: %v", err)
	}
	sigBytes, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fail(CodeMalformed, "signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)))
	if err := rsa.VerifyPSS(pub, crypto.SHA256, digest[:], sigBytes, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}); err != nil {
		return fail(CodeInvalid, "the signature does not verify with the signer's key over this body")
	}
	return nil
}

// checkHeader checks a JOSE header against the profile's Step 2.
func checkHeader(raw []byte, now time.Time) error {
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw, &h); err != nil {
		return fail(CodeMalformed, "JOSE header is not a JSON object")
	}
	for name := range h {
		switch name {
		case "alg", "kid", "typ", "cty", "crit", ClaimIAT, ClaimISS, ClaimTAN:
		default:
			return fail(CodeInvalidClaim, "JOSE header has %q, which the profile does not allow", name)
		}
	}
	str := func(name string, required bool) (string, error) {
		v, ok := h[name]
		if !ok {
			if required {
				return "", fail(CodeMissingClaim, "JOSE header has no %q", name)
			}
			return "", nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || (required && s == "") {
			return "", fail(CodeInvalidClaim, "%q must be a non-empty string", name)
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
		return fail(CodeInvalidClaim, "alg must be PS256, got %q", alg)
	}
	if typ, err := str("typ", false); err != nil {
		return err
	} else if _, ok := h["typ"]; ok && typ != "JOSE" {
		return fail(CodeInvalidClaim, "typ must be JOSE")
	}
	if cty, err := str("cty", false); err != nil {
		return err
	} else if _, ok := h["cty"]; ok && cty != "json" && cty != "application/json" {
		return fail(CodeInvalidClaim, "cty must be json or application/json")
	}
	iatRaw, ok := h[ClaimIAT]
	if !ok {
		return fail(CodeMissingClaim, "JOSE header has no %q", ClaimIAT)
	}
	var iat json.Number
	dec := json.NewDecoder(strings.NewReader(string(iatRaw)))
	dec.UseNumber()
	if err := dec.Decode(&iat); err != nil {
		return fail(CodeInvalidClaim, "%q must be a JSON number", ClaimIAT)
	}
	secs, err := iat.Float64()
	if err != nil || time.Unix(int64(secs), 0).After(now.Add(IATSkew)) {
		return fail(CodeInvalidClaim, "%q must be a time in the past", ClaimIAT)
	}
	critRaw, ok := h["crit"]
	if !ok {
		return fail(CodeMissingClaim, "JOSE header has no crit")
	}
	var got []string
	if err := json.Unmarshal(critRaw, &got); err != nil {
		return fail(CodeInvalidClaim, "crit must be an array of strings")
	}
	got = slices.Clone(got)
	slices.Sort(got)
	want := slices.Clone(crit)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fail(CodeInvalidClaim, "crit must be exactly %s", strings.Join(crit, ", "))
	}
	return nil
}

// ReadRSAPublicKey reads a PEM file holding an RSA public key: a PUBLIC
// KEY, an RSA PUBLIC KEY, or a CERTIFICATE.
func ReadRSAPublicKey(path string) (*rsa.PublicKey, error) {
	return readRSAKey[*rsa.PublicKey](path, "public key", func(blk *pem.Block) (any, error) {
		switch blk.Type {
		case "PUBLIC KEY":
			return x509.ParsePKIXPublicKey(blk.Bytes)
		case "RSA PUBLIC KEY":
			return x509.ParsePKCS1PublicKey(blk.Bytes)
		case "CERTIFICATE":
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, err
			}
			return cert.PublicKey, nil
		}
		return nil, fmt.Errorf("PEM block %q is not a public key or certificate", blk.Type)
	})
}

// ReadRSAPrivateKey reads a PEM file holding an RSA private key (PKCS #8
// or PKCS #1). Its errors never hold the key.
func ReadRSAPrivateKey(path string) (*rsa.PrivateKey, error) {
	return readRSAKey[*rsa.PrivateKey](path, "private key", func(blk *pem.Block) (any, error) {
		switch blk.Type {
		case "PRIVATE KEY":
			return x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(blk.Bytes)
		}
		return nil, fmt.Errorf("PEM block %q is not a private key", blk.Type)
	})
}

// readRSAKey reads the first PEM block of the file at path, a what
// ("public key"), with parse, which knows the block types of a what; the
// key must be an RSA key K.
func readRSAKey[K *rsa.PublicKey | *rsa.PrivateKey](path, what string, parse func(*pem.Block) (any, error)) (K, error) {
	var zero K
	data, err := os.ReadFile(path)
	if err != nil {
		return zero, fmt.Errorf("error reading %s: %w", what, err)
	}
	blk, _ := pem.Decode(data)
	if blk == nil {
		return zero, fmt.Errorf("error reading %s %s: no PEM block", what, path)
	}
	key, err := parse(blk)
	if err != nil {
		// The parsers' errors describe the structure, never the bytes.
		return zero, fmt.Errorf("error reading %s %s: %w", what, path, err)
	}
	k, ok := key.(K)
	if !ok {
		return zero, fmt.Errorf("error reading %s %s: not an RSA key (PS256 needs one)", what, path)
	}
	return k, nil
}
