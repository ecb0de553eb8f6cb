package fakebanktest

import (
	"context"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/fakebank"
)

// Books returns fb's books, whatever its profile, as a bankclient.Bank
// that can only list them (Statement; Send and StatusByKey answer
// bankclient.ErrUnsupported): how a test in the same process checks the
// exactly-once invariants against a bank whose API has no list of
// payments (Open Banking).
func Books(fb *fakebank.Bank) bankclient.Bank { return books{fb} }

type books struct{ fb *fakebank.Bank }

func (books) Send(context.Context, string, bankclient.PaymentRequest) (bankclient.SendResult, error) {
	return bankclient.SendResult{}, bankclient.ErrUnsupported
}

func (books) StatusByKey(context.Context, string) (bankclient.Payment, error) {
	return bankclient.Payment{}, bankclient.ErrUnsupported
}

func (b books) Statement(_ context.Context, after string, limit int) (bankclient.StatementPage, error) {
	return b.fb.Books(after, limit)
}
