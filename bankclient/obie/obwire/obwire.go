// Package obwire holds the JSON bodies of Open Banking's Payment
// Initiation API (OpenAPI document obie-payment-initiation-3.1.11.yaml)
// that the obie connector and the fakebank's obie profile write and read
// alike. Field names are the document's; optional fields are omitted when
// empty, as the read-write profile's "Optional Fields" requires ("the
// field must be excluded from the JSON payload").
//
// It holds plain types only and imports nothing of settle's.
package obwire

// Amount is OBActiveOrHistoricCurrencyAndAmount: a decimal string and an
// ISO 4217 code.
type Amount struct {
	Amount   string `json:"Amount"`
	Currency string `json:"Currency"`
}

// Account is a debtor or creditor account (OBCashAccount*).
type Account struct {
	SchemeName              string `json:"SchemeName"`
	Identification          string `json:"Identification"`
	Name                    string `json:"Name,omitempty"`
	SecondaryIdentification string `json:"SecondaryIdentification,omitempty"`
}

// OBErrorResponse is OBErrorResponse1, the body of every error answer.
type OBErrorResponse struct {
	Code    string    `json:"Code"`
	ID      string    `json:"Id,omitempty"`
	Message string    `json:"Message"`
	Errors  []OBError `json:"Errors"`
}

// OBError is OBError1, one error of an OBErrorResponse.
type OBError struct {
	ErrorCode string `json:"ErrorCode"`
	Message   string `json:"Message"`
	Path      string `json:"Path,omitempty"`
	URL       string `json:"Url,omitempty"`
}
