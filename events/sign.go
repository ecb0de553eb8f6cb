package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EnvSecret is the environment variable holding the webhook secrets.
const EnvSecret = "SETTLE_EVENTS_SECRET"

// SecretPrefix starts every Standard Webhooks secret.
const SecretPrefix = "whsec_"

// Signer signs webhooks as the Standard Webhooks specification says
// (scheme v1, HMAC-SHA256), with one or more secrets: while a secret is
// rotated, each signs and the receiver accepts any.
type Signer struct {
	keys [][]byte
}

// ErrNoSecret is matched (errors.Is) when a secret list holds no secret.
var ErrNoSecret = errors.New("no webhook secret")

// ParseSecrets reads SETTLE_EVENTS_SECRET: one or more secrets separated by
// commas, each whsec_ followed by the base64 of the key (padded or not).
// The error never holds a secret.
func ParseSecrets(s string) (*Signer, error) {
	var sg Signer
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		enc, ok := strings.CutPrefix(part, SecretPrefix)
		if !ok {
			return nil, fmt.Errorf("webhook secret %d does not start with %s", i+1, SecretPrefix)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			key, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
		}
		if err != nil || len(key) == 0 {
			return nil, fmt.Errorf("webhook secret %d is not %s followed by base64", i+1, SecretPrefix)
		}
		sg.keys = append(sg.keys, key)
	}
	if len(sg.keys) == 0 {
		return nil, ErrNoSecret
	}
	return &sg, nil
}

// Sign returns the webhook-signature header of a message: one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, separated by
// spaces.
func (s *Signer) Sign(id string, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	sigs := make([]string, len(s.keys))
	for i, key := range s.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}
