package bankhttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/settle/settle/bankclient"
)

// SignedHeader is a signature header in Stripe's scheme, parsed.
type SignedHeader struct {
	// Timestamp is the t= value exactly as sent: the signed payload is
	// "<Timestamp>.<body>".
	Timestamp string
	// At is Timestamp read as Unix seconds.
	At time.Time
	// Signatures are the v1= values, decoded from hex (several during a
	// secret rotation).
	Signatures [][]byte
}

// ParseSignatureHeader parses a signature header in Stripe's scheme,
// "t=<unix seconds>,v1=<hex>[,v1=<hex>…]", the one parser both the
// timestamp and the signatures are read with: a header whose t= could be
// read one way for the tolerance and another for the HMAC is no header.
// It refuses (bankclient.ErrWebhookSignature) a header with no t= or more than one
// (an old signed header with a fresh t= in front is a replay), a t= that is
// not decimal seconds, and one without a v1= that is hex. Other keys (v0,
// a future scheme) are ignored, as Stripe's libraries do.
func ParseSignatureHeader(header string) (SignedHeader, error) {
	var sh SignedHeader
	timestamps := 0
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "t":
			timestamps++
			sh.Timestamp = v
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil && len(sig) > 0 {
				sh.Signatures = append(sh.Signatures, sig)
			}
		}
	}
	if timestamps != 1 || len(sh.Signatures) == 0 || !decimal(sh.Timestamp) {
		return SignedHeader{}, bankclient.ErrWebhookSignature
	}
	secs, err := strconv.ParseInt(sh.Timestamp, 10, 64)
	if err != nil {
		return SignedHeader{}, bankclient.ErrWebhookSignature
	}
	sh.At = time.Unix(secs, 0)
	return sh, nil
}

// decimal reports whether s is 1 to 18 ASCII digits (no sign, no space).
func decimal(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// VerifyHMACSignature checks a signature header in Stripe's scheme,
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">" (several v1
// entries are allowed during a secret rotation), against secret and now.
// The header is read once, by ParseSignatureHeader: the timestamp that is
// signed is the one checked against the tolerance.
func VerifyHMACSignature(header string, body []byte, secret string, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return bankclient.ErrWebhookNotConfigured
	}
	sh, err := ParseSignatureHeader(header)
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(sh.Timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	want := mac.Sum(nil)
	ok := false
	for _, sig := range sh.Signatures {
		ok = ok || hmac.Equal(sig, want)
	}
	if !ok {
		return bankclient.ErrWebhookSignature
	}
	if d := now.Sub(sh.At); d > tolerance || d < -tolerance {
		return bankclient.ErrWebhookStale
	}
	return nil
}

// SignHMAC returns the signature header VerifyHMACSignature accepts, for
// the fakebank and tests.
func SignHMAC(body []byte, secret string, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
