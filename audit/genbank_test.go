package audit

import (
	"context"
	"fmt"
	"strconv"

	"github.com/settle/settle/bankclient"
)

// genBank is a bank whose statement is computed, not stored: n settled
// payments bulk-0 … bulk-(n-1), so that measuring the report's memory does
// not measure the bank's.
type genBank struct{ n int }

func (g *genBank) payment(i int) bankclient.Payment {
	return bankclient.Payment{ID: fmt.Sprintf("pay_%012d", i), IdempotencyKey: "key-" + strconv.Itoa(i),
		Reference: "bulk-" + strconv.Itoa(i), Status: bankclient.StatusSettled, AmountCents: int64(100 + i), Currency: "EUR"}
}

func (g *genBank) Send(context.Context, string, bankclient.PaymentRequest) (bankclient.SendResult, error) {
	return bankclient.SendResult{}, fmt.Errorf("genBank: read only")
}

func (g *genBank) StatusByKey(_ context.Context, key string) (bankclient.Payment, error) {
	var i int
	if _, err := fmt.Sscanf(key, "key-%d", &i); err != nil || i < 0 || i >= g.n {
		return bankclient.Payment{}, bankclient.ErrNotFound
	}
	return g.payment(i), nil
}

func (g *genBank) Statement(_ context.Context, after string, limit int) (bankclient.StatementPage, error) {
	start := 0
	if after != "" {
		var err error
		if start, err = strconv.Atoi(after); err != nil {
			return bankclient.StatementPage{}, err
		}
	}
	end := min(start+limit, g.n)
	p := bankclient.StatementPage{Payments: make([]bankclient.Payment, 0, end-start)}
	for i := start; i < end; i++ {
		p.Payments = append(p.Payments, g.payment(i))
	}
	if end < g.n {
		p.Next = strconv.Itoa(end)
	}
	return p, nil
}
