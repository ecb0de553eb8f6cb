package obie_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
)

// testKey is one RSA key per test binary: generating 2048-bit keys is
// slow under the race detector.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// writePEM writes a PEM block of type typ holding der to a file of dir.
func writePEM(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// keyFile writes the test key as PKCS#8 PEM.
func keyFile(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(testKey())
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, "signing.pem", "PRIVATE KEY", der)
}

// request is the payment request of the tests: £12.34 to a sort code and
// account number.
func request(ref string) bankclient.PaymentRequest {
	return bankclient.PaymentRequest{AmountCents: 1234, Currency: "GBP", DebtorAccount: "acc-1",
		CreditorAccount: "SortCodeAccountNumber:08080021325698:ACME Ltd", Reference: ref, SettlementID: ref}
}

// oneAttempt is a retry policy of a single attempt.
var oneAttempt = bankclient.RetryPolicy{MaxAttempts: 1, RateLimitWait: time.Millisecond}

// newClient returns a client of the bank at u signing with the test key.
func newClient(t testing.TB, u string, opts bankclient.Options) *obie.Client {
	t.Helper()
	if opts.SigningKeyFile == "" {
		opts.SigningKeyFile = keyFile(t)
	}
	if opts.Token == "" {
		opts.Token = "test-access-token"
	}
	c, err := obie.New(u, opts, obie.Config{ISS: "0015800001041RHAAY/HQuZPIt3ipkh33Uxytox1E", TokenKey: testTokenKey})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recorded is one request the test bank received.
type recorded struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	At     time.Time
}

// testBank is a small bank following the spec, statefully: consents and
// payments under idempotency keys (a replay answers 201 with the current
// resource; another body under a used key is refused with an error whose
// Path is x-idempotency-key), signatures verified with pub, ids it does
// not hold answered 400 UK.OBIE.Resource.NotFound, the OBIE error shape.
// It is the other side of the unit tests; the fakebank's obie profile is
// the other side of the conformance suite.
type testBank struct {
	pub *rsa.PublicKey
	// consentStatus is the status a new consent gets.
	consentStatus string

	mu       sync.Mutex
	seq      int
	consents map[string]map[string]any // by ConsentId: the Data
	payments map[string]map[string]any // by DomesticPaymentId
	keys     map[string]keyed          // by path + key
	requests []recorded
}

type keyed struct {
	sum [32]byte
	id  string
}

func newTestBank(t testing.TB) (*testBank, string) {
	t.Helper()
	b := &testBank{pub: &testKey().PublicKey, consentStatus: "Authorised",
		consents: map[string]map[string]any{}, payments: map[string]map[string]any{}, keys: map[string]keyed{}}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv.URL
}

func (b *testBank) Requests() []recorded {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]recorded(nil), b.requests...)
}

// obError writes an OBErrorResponse1.
func obError(w http.ResponseWriter, status int, code, path string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"ErrorCode": code, "Message": "refused by the test bank"}
	if path != "" {
		e["Path"] = path
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"Code": fmt.Sprint(status), "Id": uuid.NewString()[:8], "Message": "refused", "Errors": []any{e}})
}

func (b *testBank) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	_, _ = body.ReadFrom(r.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests = append(b.requests, recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body.Bytes(), At: time.Now()})
	w.Header().Set("x-fapi-interaction-id", r.Header.Get("x-fapi-interaction-id"))
	w.Header().Set("x-jws-signature", "e30..c2ln") // the bank's own signature: not checked by the client
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, obie.APIPath)
	if !ok {
		obError(w, http.StatusNotFound, "UK.OBIE.NotFound", "")
		return
	}
	now := time.Now().UTC().Format(time.RFC3339)
	switch {
	case r.Method == http.MethodPost && (rest == "/domestic-payment-consents" || rest == "/domestic-payments"):
		if err := verifyJWS(r.Header.Get("x-jws-signature"), body.Bytes(), b.pub); err != nil {
			obError(w, http.StatusBadRequest, "UK.OBIE.Signature.Invalid", "x-jws-signature")
			return
		}
		var req struct {
			Data struct {
				ConsentID  string          `json:"ConsentId"`
				Initiation json.RawMessage `json:"Initiation"`
			} `json:"Data"`
			Risk json.RawMessage `json:"Risk"`
		}
		if json.Unmarshal(body.Bytes(), &req) != nil || len(req.Data.Initiation) == 0 {
			obError(w, http.StatusBadRequest, "UK.OBIE.Field.Missing", "Data.Initiation")
			return
		}
		k := rest + " " + r.Header.Get("x-idempotency-key")
		sum := sha256.Sum256(body.Bytes())
		if prev, ok := b.keys[k]; ok {
			if prev.sum != sum {
				obError(w, http.StatusBadRequest, "UK.OBIE.Header.Invalid", "x-idempotency-key")
				return
			}
			b.answer(w, http.StatusCreated, rest, prev.id)
			return
		}
		b.seq++
		var id string
		if rest == "/domestic-payment-consents" {
			id = fmt.Sprintf("cons-%04d", b.seq)
			b.consents[id] = map[string]any{"ConsentId": id, "Status": b.consentStatus, "CreationDateTime": now, "StatusUpdateDateTime": now, "Initiation": req.Data.Initiation, "risk": req.Risk}
		} else {
			con, ok := b.consents[req.Data.ConsentID]
			switch {
			case !ok:
				obError(w, http.StatusBadRequest, "UK.OBIE.Resource.NotFound", "Data.ConsentId")
				return
			case con["Status"] != "Authorised":
				obError(w, http.StatusBadRequest, "UK.OBIE.Resource.InvalidConsentStatus", "Data.ConsentId")
				return
			case !bytes.Equal(con["Initiation"].(json.RawMessage), req.Data.Initiation) || !bytes.Equal(con["risk"].(json.RawMessage), req.Risk):
				obError(w, http.StatusBadRequest, "UK.OBIE.Resource.ConsentMismatch", "Data.Initiation")
				return
			}
			con["Status"] = "Consumed"
			id = fmt.Sprintf("pay-%04d", b.seq)
			b.payments[id] = map[string]any{"DomesticPaymentId": id, "ConsentId": req.Data.ConsentID, "Status": "AcceptedSettlementInProcess", "CreationDateTime": now, "StatusUpdateDateTime": now, "Initiation": req.Data.Initiation}
		}
		b.keys[k] = keyed{sum: sum, id: id}
		b.answer(w, http.StatusCreated, rest, id)
	case r.Method == http.MethodGet && strings.HasPrefix(rest, "/domestic-payment-consents/"):
		id := strings.TrimPrefix(rest, "/domestic-payment-consents/")
		if _, ok := b.consents[id]; !ok {
			obError(w, http.StatusBadRequest, "UK.OBIE.Resource.NotFound", "ConsentId")
			return
		}
		b.answer(w, http.StatusOK, "/domestic-payment-consents", id)
	case r.Method == http.MethodGet && strings.HasPrefix(rest, "/domestic-payments/"):
		id := strings.TrimPrefix(rest, "/domestic-payments/")
		if _, ok := b.payments[id]; !ok {
			obError(w, http.StatusBadRequest, "UK.OBIE.Resource.NotFound", "DomesticPaymentId")
			return
		}
		b.answer(w, http.StatusOK, "/domestic-payments", id)
	default:
		obError(w, http.StatusNotFound, "UK.OBIE.NotFound", "")
	}
}

// answer writes the resource id of collection as it is now.
func (b *testBank) answer(w http.ResponseWriter, status int, collection, id string) {
	out := map[string]any{"Links": map[string]any{"Self": "https://bank.test" + obie.APIPath + collection + "/" + id}, "Meta": map[string]any{}}
	if collection == "/domestic-payment-consents" {
		d := map[string]any{}
		for k, v := range b.consents[id] {
			if k != "risk" {
				d[k] = v
			}
		}
		out["Data"], out["Risk"] = d, b.consents[id]["risk"]
	} else {
		out["Data"] = b.payments[id]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(out)
}

// verifyJWS verifies a detached JWS over body with pub, and the header's
// Open Banking claims, as the profile's "Process for Verifying a
// Signature" says; it returns the decoded protected header.
func verifyJWS(sig string, body []byte, pub *rsa.PublicKey) error {
	_, err := verifyJWSHeader(sig, body, pub)
	return err
}

func verifyJWSHeader(sig string, body []byte, pub *rsa.PublicKey) (map[string]any, error) {
	parts := strings.Split(sig, ".")
	if len(parts) != 3 || parts[1] != "" {
		return nil, fmt.Errorf("not a detached compact JWS: %d parts, payload %q", len(parts), parts[min(1, len(parts)-1)])
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	var h map[string]any
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	s, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	input := parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)
	sum := sha256.Sum256([]byte(input))
	if err := rsa.VerifyPSS(pub, crypto.SHA256, sum[:], s, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto}); err != nil {
		return nil, fmt.Errorf("signature does not verify: %w", err)
	}
	return h, nil
}

// testTokenKey is the token key of the tests' clients.
const testTokenKey = "c2V0dGxlLXRlc3QtdG9rZW4ta2V5LTMyLWJ5dGVzISE="

// grant runs the account holder's authorisation of consent id at the bank
// (its page decides at once), opening the link with browser (nil: plain
// HTTP), and returns the sealed grant for PaymentRequest.Grant.
func grant(t testing.TB, c *obie.Client, browser *http.Client, id string) string {
	t.Helper()
	const redirect = "http://127.0.0.1:9/console/authorise/callback"
	if browser == nil {
		browser = &http.Client{}
	}
	b := *browser
	b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	link, err := c.AuthorisationURL(id, "state-"+id, redirect)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back, err := url.Parse(res.Header.Get("Location"))
	if err != nil || back.Query().Get("code") == "" {
		t.Fatalf("authorising consent %s: %d to %q", id, res.StatusCode, res.Header.Get("Location"))
	}
	g, err := c.ExchangeCode(context.Background(), id, "state-"+id, back.Query().Get("code"), redirect)
	if err != nil {
		t.Fatalf("exchanging the code of consent %s: %v", id, err)
	}
	return g.Sealed
}
