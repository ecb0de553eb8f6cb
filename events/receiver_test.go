package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/settle/settle/events"
)

// TestReceiver: the demo's receiver accepts what the webhook sink signs,
// refuses another secret and a stale timestamp, handles each id once and
// reports a settlement's event that skips one.
func TestReceiver(t *testing.T) {
	t.Parallel()
	rcv, err := events.NewReceiver("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS, " + secret)
	if err != nil {
		t.Fatal(err)
	}
	rcv.Fail = func(n int) bool { return n == 1 }
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	send := func(w *events.Webhook, id string) events.Result {
		return w.Deliver(ctx, events.Event{ID: id, SettlementID: "r1", Type: "settlement.pending", Payload: json.RawMessage(`{}`), CreatedAt: time.Now()})
	}
	good := webhook(t, srv.URL, time.Second)
	for i, tc := range []struct {
		id     string
		status int
	}{{"r1:1", 503}, {"r1:1", 204}, {"r1:2", 204}, {"r1:2", 204}, {"r1:4", 204}} {
		if res := send(good, tc.id); res.Status != tc.status {
			t.Errorf("call %d (%s): %d, want %d (%v)", i+1, tc.id, res.Status, tc.status, res.Err)
		}
	}
	other, err := events.ParseSecrets("whsec_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := events.NewWebhook(events.WebhookConfig{URL: srv.URL, Signer: other})
	if err != nil {
		t.Fatal(err)
	}
	if res := send(forged, "r1:3"); res.Status != http.StatusUnauthorized {
		t.Errorf("another secret's signature: %d", res.Status)
	}
	s, _ := events.ParseSecrets(secret)
	old := time.Now().Add(-time.Hour)
	body := []byte(`{}`)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
	req.Header.Set("webhook-id", "r1:3")
	req.Header.Set("webhook-timestamp", "1")
	req.Header.Set("webhook-signature", s.Sign("r1:3", old, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a stale timestamp: %d", resp.StatusCode)
	}
	st := rcv.Stats()
	if st.Calls != 7 || st.Refused != 1 || st.Bad != 2 || st.Accepted != 3 || st.Duplicates != 1 || st.Last["r1"] != 2 || len(st.Problems) != 1 {
		t.Errorf("stats %+v", st)
	}
}
