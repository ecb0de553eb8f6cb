package obie

import (
	"encoding/json"
	"fmt"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie/obwire"
)

// The JSON bodies of the OpenAPI document (obie-payment-initiation-3.1.11
// .yaml), as much of them as the connector sends or reads. Field names
// are the spec's; optional fields are omitted when empty, as the profile
// requires ("the field must be excluded from the JSON payload").

// Initiation is the Initiation of OBWriteDomesticConsent4 and
// OBWriteDomestic2: identical in the consent and the payment.
type Initiation struct {
	InstructionIdentification string         `json:"InstructionIdentification"`
	EndToEndIdentification    string         `json:"EndToEndIdentification"`
	InstructedAmount          obwire.Amount  `json:"InstructedAmount"`
	CreditorAccount           obwire.Account `json:"CreditorAccount"`
}

// Risk is OBRisk1, the risk indicators: identical in the consent and the
// payment. settle pays a third party's account it names itself.
type Risk struct {
	PaymentContextCode string `json:"PaymentContextCode,omitempty"`
}

// risk is the Risk every request carries.
var risk = Risk{PaymentContextCode: "TransferToThirdParty"}

// ConsentRequest is OBWriteDomesticConsent4, the body of POST
// /domestic-payment-consents.
type ConsentRequest struct {
	Data struct {
		Initiation Initiation `json:"Initiation"`
	} `json:"Data"`
	Risk Risk `json:"Risk"`
}

// PaymentRequest is OBWriteDomestic2, the body of POST /domestic-payments.
type PaymentRequest struct {
	Data struct {
		ConsentID  string     `json:"ConsentId"`
		Initiation Initiation `json:"Initiation"`
	} `json:"Data"`
	Risk Risk `json:"Risk"`
}

// initiationOf is the Initiation of req: the same for the same request,
// byte for byte, so the consent and the payment match and a replay is the
// identical request.
//
// InstructionIdentification is the reference itself. The profile wants it
// unique for all time and identical in the consent and the payment (so it
// cannot come from either idempotency key, which differ); the stored
// reference is unique per settlement, stable, at most 31 characters of the
// Faster Payments set, and within the field's 35.
//
// Every error is an Unsendable *bankclient.RejectedError: the request is
// made of the settlement alone, so one that cannot be built now never can
// be, and the engine fails the settlement rather than retry it for ever.
func initiationOf(req bankclient.PaymentRequest) (Initiation, error) {
	in, err := buildInitiation(req)
	if err != nil && !bankclient.IsRejected(err) {
		err = bankclient.Unsendable(err)
	}
	if err != nil {
		return Initiation{}, err
	}
	return in, nil
}

// buildInitiation is initiationOf's work.
func buildInitiation(req bankclient.PaymentRequest) (Initiation, error) {
	if err := Capabilities.CheckRequest(req); err != nil {
		return Initiation{}, err
	}
	switch n := len(req.Reference); {
	case n == 0:
		return Initiation{}, fmt.Errorf("empty reference")
	case n > 35:
		return Initiation{}, fmt.Errorf("reference of %d characters, EndToEndIdentification takes 35", n)
	}
	cred, err := ParseBeneficiary(req.CreditorAccount)
	if err != nil {
		return Initiation{}, fmt.Errorf("creditor account: %w", err)
	}
	amount, err := FormatAmount(req.AmountCents, req.Currency)
	if err != nil {
		return Initiation{}, err
	}
	scheme := obSchemeSortCode
	if cred.Scheme == SchemeIBAN {
		scheme = obSchemeIBAN
	}
	return Initiation{
		InstructionIdentification: req.Reference,
		EndToEndIdentification:    req.Reference,
		InstructedAmount:          obwire.Amount{Amount: amount, Currency: req.Currency},
		CreditorAccount:           obwire.Account{SchemeName: scheme, Identification: cred.Identification, Name: cred.Name},
	}, nil
}

// consentBody is the body of the consent to req.
func consentBody(req bankclient.PaymentRequest) ([]byte, Initiation, error) {
	in, err := initiationOf(req)
	if err != nil {
		return nil, Initiation{}, err
	}
	var body ConsentRequest
	body.Data.Initiation = in
	body.Risk = risk
	b, err := json.Marshal(body)
	return b, in, err
}

// paymentBody is the body of the payment of req under its consent.
func paymentBody(req bankclient.PaymentRequest) ([]byte, Initiation, error) {
	if req.ConsentID == "" {
		return nil, Initiation{}, fmt.Errorf("no consent id: the payment needs an authorised consent")
	}
	if len(req.ConsentID) > 128 {
		return nil, Initiation{}, fmt.Errorf("consent id of %d characters, ConsentId takes 128", len(req.ConsentID))
	}
	in, err := initiationOf(req)
	if err != nil {
		return nil, Initiation{}, err
	}
	var body PaymentRequest
	body.Data.ConsentID = req.ConsentID
	body.Data.Initiation = in
	body.Risk = risk
	b, err := json.Marshal(body)
	return b, in, err
}

// paymentResponse is OBWriteDomesticResponse5, the answer of POST
// /domestic-payments and GET /domestic-payments/{DomesticPaymentId}.
type paymentResponse struct {
	Data *struct {
		DomesticPaymentID    string      `json:"DomesticPaymentId"`
		ConsentID            string      `json:"ConsentId"`
		CreationDateTime     string      `json:"CreationDateTime"`
		Status               string      `json:"Status"`
		StatusUpdateDateTime string      `json:"StatusUpdateDateTime"`
		Initiation           *Initiation `json:"Initiation"`
		Debtor               *struct {
			Identification string `json:"Identification"`
		} `json:"Debtor"`
	} `json:"Data"`
}

// consentResponse is OBWriteDomesticConsentResponse5, the answer of POST
// /domestic-payment-consents and GET /domestic-payment-consents/{ConsentId}.
type consentResponse struct {
	Data *struct {
		ConsentID            string      `json:"ConsentId"`
		CreationDateTime     string      `json:"CreationDateTime"`
		Status               string      `json:"Status"`
		StatusUpdateDateTime string      `json:"StatusUpdateDateTime"`
		CutOffDateTime       string      `json:"CutOffDateTime"`
		Initiation           *Initiation `json:"Initiation"`
		Authorisation        *struct {
			CompletionDateTime string `json:"CompletionDateTime"`
		} `json:"Authorisation"`
	} `json:"Data"`
}

// ErrorResponse is OBErrorResponse1, the body of every error answer.
type ErrorResponse = obwire.OBErrorResponse

// OBError is OBError1, one error of an ErrorResponse.
type OBError = obwire.OBError
