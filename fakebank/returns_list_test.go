package fakebank_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/fakebank"
)

// TestReturnsList: GET /v1/returns lists the returned payments created
// since a time, a page at a time with the statement's cursor, and refuses
// a bad since, limit or cursor with 400; settle's client reads it page by
// page, and a bank without it is unsupported, not an error of the bank.
func TestReturnsList(t *testing.T) {
	t.Parallel()
	tb := setup(t, fakebank.Options{})
	var ids []string
	for i := range 5 {
		a := tb.post(t, fmt.Sprintf("k%d", i), paymentReq(fmt.Sprintf("settlement-%d", i)))
		if a.status != http.StatusCreated {
			t.Fatalf("post %d: %d %s", i, a.status, a.body)
		}
		ids = append(ids, a.payment(t).ID)
	}
	tb.clock.Advance(time.Second) // every payment settled
	for _, i := range []int{0, 2, 4} {
		if err := tb.bank.Return(ids[i], "AC04"); err != nil {
			t.Fatal(err)
		}
	}
	client, err := settle.New(tb.url, bankclient.Options{Timeout: 2 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := client.ReturnedSince(ctx, t0, "", 2)
	if err != nil || len(first.Payments) != 2 || first.Next == "" {
		t.Fatalf("first page: %+v, %v; want two returns and a cursor", first, err)
	}
	rest, err := client.ReturnedSince(ctx, t0, first.Next, 2)
	if err != nil || len(rest.Payments) != 1 || rest.Next != "" || rest.Payments[0].ID != ids[4] {
		t.Fatalf("second page: %+v, %v; want %s alone, no cursor", rest, err, ids[4])
	}
	for _, p := range append(first.Payments, rest.Payments...) {
		if p.Status != bankclient.StatusReturned {
			t.Errorf("listed %s is %s", p.ID, p.Status)
		}
	}
	if later, err := client.ReturnedSince(ctx, t0.Add(time.Hour), "", 0); err != nil || len(later.Payments) != 0 {
		t.Errorf("since after every payment: %+v, %v; want none", later, err)
	}
	for _, q := range []url.Values{{"since": {"yesterday"}}, {"limit": {"0"}}, {"limit": {"1001"}}, {"after": {"x"}}} {
		if a := tb.do(t, http.MethodGet, "/v1/returns?"+q.Encode(), "", nil); a.status != http.StatusBadRequest {
			t.Errorf("GET /v1/returns?%s: %d %s, want 400", q.Encode(), a.status, a.body)
		}
	}

	stripe := setup(t, fakebank.Options{Profile: "stripe"})
	other, err := settle.New(stripe.url, bankclient.Options{Timeout: 2 * time.Second, Retry: bankclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ReturnedSince(ctx, t0, "", 0); !errors.Is(err, bankclient.ErrUnsupported) {
		t.Errorf("a bank without the list: %v, want ErrUnsupported", err)
	}
}
