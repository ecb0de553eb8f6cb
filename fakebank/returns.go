package fakebank

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/settle/settle/bankclient"
)

// Errors of Bank.Return.
var (
	ErrNoSuchPayment = errors.New("no such payment")
	ErrNotSettled    = errors.New("the payment has not settled (or came back already)")
	ErrReturnReason  = errors.New("not an ISO 20022 return reason code (four letters or digits, such as AC04)")
)

// returnReason is an ISO 20022 ExternalReturnReason1Code: four letters or
// digits, such as AC04 (account closed) or MD06 (refund requested).
var returnReason = regexp.MustCompile(`^[A-Z0-9]{4}$`)

// DefaultReturnReason is the reason of a return made without one: AC04,
// the creditor's account is closed.
const DefaultReturnReason = "AC04"

// Return makes the settled payment id come back now, as an ACH or SEPA
// return does days after settlement: from now on the bank reports it
// returned, and its statements book the money back on today's date.
// reason is an ISO 20022 return reason code (default DefaultReturnReason).
// It is also POST /admin/returns {"payment_id","reason"}.
func (b *Bank) Return(id, reason string) error {
	if reason == "" {
		reason = DefaultReturnReason
	}
	if !returnReason.MatchString(reason) {
		return fmt.Errorf("return reason %q: %w", reason, ErrReturnReason)
	}
	b.mu.Lock()
	now := b.now().UTC()
	p := b.books.byID(id)
	switch {
	case p == nil:
		b.mu.Unlock()
		return fmt.Errorf("payment %q: %w", id, ErrNoSuchPayment)
	case !p.settledAt(now) || p.returnedAt(now):
		b.mu.Unlock()
		return fmt.Errorf("payment %q: %w", id, ErrNotSettled)
	}
	p.ReturnAt, p.ReturnReason = now, reason
	b.changed(p, now)
	b.version++
	v := b.version
	ref := p.Request.Reference
	b.mu.Unlock()
	b.log.Info("fakebank: payment returned", "id", id, "reference", ref, "reason", reason)
	return b.persist(v)
}

// byID returns the payment with identifier id, or nil.
func (bk *books) byID(id string) *payment {
	s, ok := strings.CutPrefix(id, "pay_")
	if !ok {
		return nil
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 1 || seq > int64(len(bk.payments)) || bk.payments[seq-1].ID != id {
		return nil
	}
	return bk.payments[seq-1]
}

// payment returns the payment id as the bank reports it now.
func (b *Bank) payment(id string) (bankclient.Payment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.books.byID(id)
	if p == nil {
		return bankclient.Payment{}, false
	}
	return p.view(b.now().UTC()), true
}

func (b *Bank) handleReturn(w http.ResponseWriter, r *http.Request) {
	var req struct {
		PaymentID string `json:"payment_id"`
		Reason    string `json:"reason"`
	}
	if status, err := decodeJSON(w, r, &req); err != nil {
		writeError(w, status, errorCodeBadRequest, err.Error())
		return
	}
	err := b.Return(req.PaymentID, req.Reason)
	switch {
	case errors.Is(err, ErrReturnReason):
		writeError(w, http.StatusBadRequest, errorCodeBadRequest, err.Error())
	case errors.Is(err, ErrNoSuchPayment):
		writeError(w, http.StatusNotFound, errorCodeNotFound, err.Error())
	case errors.Is(err, ErrNotSettled):
		writeError(w, http.StatusConflict, "not_settled", err.Error())
	case err != nil:
		b.log.Error("fakebank: error writing state", "error", err)
		writeError(w, http.StatusInternalServerError, errorCodeInternal, "could not record the return")
	default:
		p, _ := b.payment(req.PaymentID)
		writeJSON(w, http.StatusOK, p)
	}
}
