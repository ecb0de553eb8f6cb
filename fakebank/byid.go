package fakebank

import (
	"fmt"
	"net/http"

	"github.com/settle/settle/bankclient"
)

// handlePaymentByID serves GET /v1/payments/{id}: the payment by the bank's
// own id, as banks that do not look payments up by our key offer (an
// addition to the protocol of DESIGN.md section 7). It has the faults of a
// status call.
func (b *Bank) handlePaymentByID(w http.ResponseWriter, r *http.Request) {
	if !b.statusFaults(w, r) {
		return
	}
	p, ok := b.byID(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, errorCodeNotFound, "no payment with this id")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// byID returns the payment with the bank's id. Ids are never forgotten.
func (b *Bank) byID(id string) (bankclient.Payment, bool) {
	var seq int64
	if _, err := fmt.Sscanf(id, "pay_%d", &seq); err != nil || paymentID(seq) != id {
		return bankclient.Payment{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq < 1 || seq > int64(len(b.books.payments)) {
		return bankclient.Payment{}, false
	}
	return b.books.payments[seq-1].view(b.now().UTC()), true
}

// PaymentByID returns the payment with the bank's id as the bank's books
// hold it now (in the settle protocol's terms, whatever the profile).
func (b *Bank) PaymentByID(id string) (bankclient.Payment, bool) {
	return b.byID(id)
}
