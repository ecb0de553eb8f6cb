package intake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/settle/settle/settlement"
)

// Problem is an RFC 9457 problem details object, the body of every error
// answer of the API (Content-Type application/problem+json).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the event field at fault, when one is.
	Field        string `json:"field,omitempty"`
	SettlementID string `json:"settlement_id,omitempty"`
	// StoredHash and IncomingHash are set on a 409 conflict.
	StoredHash   string `json:"stored_hash,omitempty"`
	IncomingHash string `json:"incoming_hash,omitempty"`
	// retryAfter is the Retry-After header, in seconds (0: none).
	retryAfter int
}

// Problem types (URIs, as RFC 9457 asks).
const (
	ProblemMalformed    = "urn:settle:problem:malformed"
	ProblemInvalid      = "urn:settle:problem:invalid"
	ProblemTooOld       = "urn:settle:problem:too-old"
	ProblemTooLarge     = "urn:settle:problem:too-large"
	ProblemConflict     = "urn:settle:problem:conflict"
	ProblemUnauthorized = "urn:settle:problem:unauthorized"
	ProblemUnavailable  = "urn:settle:problem:unavailable"
	ProblemOverloaded   = "urn:settle:problem:overloaded"
	ProblemNotFound     = "urn:settle:problem:not-found"
	ProblemInternal     = "urn:settle:problem:internal"
)

// ProblemInsufficientFunds: the account's available balance does not cover
// the payout (--funds-check, DESIGN.md section 20).
const ProblemInsufficientFunds = "urn:settle:problem:insufficient-funds"

// Retry-After values, in seconds.
const (
	retryAfterUnavailable = 2
	retryAfterOverloaded  = 1
)

// problemFor maps an error of this package to its problem and status code.
// The edge decides status codes; the layers below only return typed errors.
func problemFor(err error) Problem {
	var inv *InvalidError
	var ce *ConflictError
	var fe *InsufficientFundsError
	switch {
	case errors.As(err, &inv):
		p := Problem{Field: inv.Field, Detail: inv.Error()}
		switch {
		case errors.Is(inv.Kind, ErrMalformed):
			p.Type, p.Title, p.Status = ProblemMalformed, "Malformed event", http.StatusBadRequest
		case errors.Is(inv.Kind, ErrTooOld):
			p.Type, p.Title, p.Status = ProblemTooOld, "Event older than the replay horizon", http.StatusUnprocessableEntity
		case errors.Is(inv.Kind, ErrTooLarge):
			p.Type, p.Title, p.Status = ProblemTooLarge, "Request too large", http.StatusRequestEntityTooLarge
		default:
			p.Type, p.Title, p.Status = ProblemInvalid, "Invalid event", http.StatusUnprocessableEntity
		}
		return p
	case errors.As(err, &ce):
		return Problem{Type: ProblemConflict, Title: "Settlement already received with another payload", Status: http.StatusConflict,
			Detail:       "the settlement_id was received before with a different payload; the event was not applied and the conflict was recorded",
			SettlementID: ce.SettlementID, StoredHash: ce.StoredHash, IncomingHash: ce.IncomingHash}
	case errors.As(err, &fe):
		return Problem{Type: ProblemInsufficientFunds, Title: "Insufficient funds", Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("account %s has not %d %s available; nothing was held; the refusal is recorded and a redelivery gets it again (pay it with a new settlement_id)",
				fe.AccountID, fe.AmountMinor, fe.Currency),
			SettlementID: fe.SettlementID}
	case errors.Is(err, settlement.ErrNotFound):
		return Problem{Type: ProblemNotFound, Title: "Settlement not found", Status: http.StatusNotFound}
	case errors.Is(err, ErrUnavailable):
		return Problem{Type: ProblemUnavailable, Title: "Database unavailable", Status: http.StatusServiceUnavailable,
			Detail: "nothing was acknowledged; deliver the event again later", retryAfter: retryAfterUnavailable}
	default:
		return Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
			Detail: "nothing was acknowledged; deliver the event again later"}
	}
}

// writeProblem writes p as the answer.
func writeProblem(w http.ResponseWriter, p Problem) {
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	writeJSON(w, "application/problem+json", p.Status, p)
}

func writeJSON(w http.ResponseWriter, contentType string, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "error encoding the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
