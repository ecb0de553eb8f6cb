package fakebank

import (
	"context"

	"github.com/settle/settle/bankclient"
)

// Books returns one page of every payment the bank holds, whatever its
// profile, as settle's own protocol reports them (the statement of DESIGN.md
// section 7), starting after the cursor.
func (b *Bank) Books(after string, limit int) (bankclient.StatementPage, error) {
	return b.statement(after, limit)
}

// BooksClient returns the bank's books, whatever its profile, as a
// bankclient.Bank that can only list them (Statement; Send and StatusByKey
// answer bankclient.ErrUnsupported): how code in the same process (a test,
// settle demo) reads the books of a bank whose API has no list of payments
// (Open Banking) to check the exactly-once invariants against them.
func (b *Bank) BooksClient() bankclient.Bank { return booksClient{b} }

type booksClient struct{ b *Bank }

func (booksClient) Send(context.Context, string, bankclient.PaymentRequest) (bankclient.SendResult, error) {
	return bankclient.SendResult{}, bankclient.ErrUnsupported
}

func (booksClient) StatusByKey(context.Context, string) (bankclient.Payment, error) {
	return bankclient.Payment{}, bankclient.ErrUnsupported
}

func (c booksClient) Statement(_ context.Context, after string, limit int) (bankclient.StatementPage, error) {
	return c.b.Books(after, limit)
}
