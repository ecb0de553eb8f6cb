package demo

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// signsRequests names the connectors whose every request is signed with
// the key in SETTLE_BANK_SIGNING_KEY_FILE (UK Open Banking's
// x-jws-signature).
var signsRequests = map[string]bool{"obie": true}

// signingKey makes the throwaway RSA key the demo's worker signs its
// requests with, writes it (PEM, readable by this user only) into dir and
// returns it with the file's path; the demo's bank verifies every request
// with its public half.
func signingKey(dir string) (*rsa.PrivateKey, string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, "", fmt.Errorf("error making the demo's signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, "", fmt.Errorf("error encoding the demo's signing key: %w", err)
	}
	path := filepath.Join(dir, "signing.key")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, "", fmt.Errorf("error writing the demo's signing key: %w", err)
	}
	return key, path, nil
}
