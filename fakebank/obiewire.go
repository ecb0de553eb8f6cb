package fakebank

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/settle/settle/bankclient/obie/jws"
	"github.com/settle/settle/bankclient/obie/obwire"
	"github.com/settle/settle/settlement"
)

// The request and response bodies of Open Banking's domestic payments
// (OpenAPI document obie-payment-initiation-3.1.11.yaml, schemas
// OBWriteDomesticConsent4, OBWriteDomesticConsentResponse5,
// OBWriteDomestic2, OBWriteDomesticResponse5, OBErrorResponse1). Requests
// are decoded strictly (unknown fields refused) and checked against the
// document's lengths, patterns and enumerations, so that whatever the bank
// accepts it can echo back in a response the document allows. Optional
// fields left out are left out of the answers too, as the read-write
// profile's "Optional Fields" requires.
//
// The bank owns the document's whole shapes, every optional field
// included, and decodes them itself rather than with the obie connector's
// types, which hold only what the connector sends and reads: a connector
// that misnames a field or leaves one out is refused here, not agreed
// with. Only the leaves that are the same in both (obwire's Amount,
// Account and error bodies) are shared.

// obPostalAddress is OBPostalAddress6 (and the Risk's DeliveryAddress,
// a subset of it).
type obPostalAddress struct {
	AddressType        string   `json:"AddressType,omitempty"`
	Department         string   `json:"Department,omitempty"`
	SubDepartment      string   `json:"SubDepartment,omitempty"`
	StreetName         string   `json:"StreetName,omitempty"`
	BuildingNumber     string   `json:"BuildingNumber,omitempty"`
	PostCode           string   `json:"PostCode,omitempty"`
	TownName           string   `json:"TownName,omitempty"`
	CountrySubDivision string   `json:"CountrySubDivision,omitempty"`
	Country            string   `json:"Country,omitempty"`
	AddressLine        []string `json:"AddressLine,omitempty"`
}

// obDeliveryAddress is OBRisk1's DeliveryAddress.
type obDeliveryAddress struct {
	AddressLine        []string `json:"AddressLine,omitempty"`
	StreetName         string   `json:"StreetName,omitempty"`
	BuildingNumber     string   `json:"BuildingNumber,omitempty"`
	PostCode           string   `json:"PostCode,omitempty"`
	TownName           string   `json:"TownName,omitempty"`
	CountrySubDivision string   `json:"CountrySubDivision,omitempty"`
	Country            string   `json:"Country"`
}

type obRemittance struct {
	Unstructured string `json:"Unstructured,omitempty"`
	Reference    string `json:"Reference,omitempty"`
}

// obInitiation is the Initiation of a domestic payment (OBDomestic2).
type obInitiation struct {
	InstructionIdentification string           `json:"InstructionIdentification"`
	EndToEndIdentification    string           `json:"EndToEndIdentification"`
	LocalInstrument           string           `json:"LocalInstrument,omitempty"`
	InstructedAmount          obwire.Amount    `json:"InstructedAmount"`
	DebtorAccount             *obwire.Account  `json:"DebtorAccount,omitempty"`
	CreditorAccount           obwire.Account   `json:"CreditorAccount"`
	CreditorPostalAddress     *obPostalAddress `json:"CreditorPostalAddress,omitempty"`
	RemittanceInformation     *obRemittance    `json:"RemittanceInformation,omitempty"`
	SupplementaryData         map[string]any   `json:"SupplementaryData,omitempty"`
}

// obRisk is OBRisk1 (its field ContractPresentInidicator is spelt as the
// document spells it).
type obRisk struct {
	PaymentContextCode               string             `json:"PaymentContextCode,omitempty"`
	MerchantCategoryCode             string             `json:"MerchantCategoryCode,omitempty"`
	MerchantCustomerIdentification   string             `json:"MerchantCustomerIdentification,omitempty"`
	ContractPresentInidicator        *bool              `json:"ContractPresentInidicator,omitempty"`
	BeneficiaryPrepopulatedIndicator *bool              `json:"BeneficiaryPrepopulatedIndicator,omitempty"`
	PaymentPurposeCode               string             `json:"PaymentPurposeCode,omitempty"`
	BeneficiaryAccountType           string             `json:"BeneficiaryAccountType,omitempty"`
	DeliveryAddress                  *obDeliveryAddress `json:"DeliveryAddress,omitempty"`
}

type obAuthorisation struct {
	AuthorisationType  string `json:"AuthorisationType"`
	CompletionDateTime string `json:"CompletionDateTime,omitempty"`
}

type obSCASupportData struct {
	RequestedSCAExemptionType     string `json:"RequestedSCAExemptionType,omitempty"`
	AppliedAuthenticationApproach string `json:"AppliedAuthenticationApproach,omitempty"`
	ReferencePaymentOrderID       string `json:"ReferencePaymentOrderId,omitempty"`
}

// obConsentRequest is OBWriteDomesticConsent4.
type obConsentRequest struct {
	Data struct {
		ReadRefundAccount string            `json:"ReadRefundAccount,omitempty"`
		Initiation        *obInitiation     `json:"Initiation"`
		Authorisation     *obAuthorisation  `json:"Authorisation,omitempty"`
		SCASupportData    *obSCASupportData `json:"SCASupportData,omitempty"`
	} `json:"Data"`
	Risk *obRisk `json:"Risk"`
}

// obPaymentRequest is OBWriteDomestic2.
type obPaymentRequest struct {
	Data struct {
		ConsentID  string        `json:"ConsentId"`
		Initiation *obInitiation `json:"Initiation"`
	} `json:"Data"`
	Risk *obRisk `json:"Risk"`
}

type obLinks struct {
	Self string `json:"Self"`
}

type obMeta struct{}

// obConsentResponse is OBWriteDomesticConsentResponse5.
type obConsentResponse struct {
	Data struct {
		ConsentID            string            `json:"ConsentId"`
		CreationDateTime     string            `json:"CreationDateTime"`
		Status               ConsentStatus     `json:"Status"`
		StatusUpdateDateTime string            `json:"StatusUpdateDateTime"`
		ReadRefundAccount    string            `json:"ReadRefundAccount,omitempty"`
		Initiation           *obInitiation     `json:"Initiation"`
		Authorisation        *obAuthorisation  `json:"Authorisation,omitempty"`
		SCASupportData       *obSCASupportData `json:"SCASupportData,omitempty"`
	} `json:"Data"`
	Risk  *obRisk `json:"Risk"`
	Links obLinks `json:"Links"`
	Meta  obMeta  `json:"Meta"`
}

// obPaymentResponse is OBWriteDomesticResponse5.
type obPaymentResponse struct {
	Data struct {
		DomesticPaymentID          string        `json:"DomesticPaymentId"`
		ConsentID                  string        `json:"ConsentId"`
		CreationDateTime           string        `json:"CreationDateTime"`
		Status                     string        `json:"Status"`
		StatusUpdateDateTime       string        `json:"StatusUpdateDateTime"`
		ExpectedExecutionDateTime  string        `json:"ExpectedExecutionDateTime,omitempty"`
		ExpectedSettlementDateTime string        `json:"ExpectedSettlementDateTime,omitempty"`
		Initiation                 *obInitiation `json:"Initiation"`
	} `json:"Data"`
	Links obLinks `json:"Links"`
	Meta  obMeta  `json:"Meta"`
}

// OBErrorResponse is the error body of every 4xx and 5xx the obie profile
// answers with a body (OBErrorResponse1).
type OBErrorResponse = obwire.OBErrorResponse

// OBError is one error of an OBErrorResponse (OBError1).
type OBError = obwire.OBError

// The error codes of OBError1 (its x-namespaced-enum) the obie profile
// answers with.
const (
	OBFieldInvalid            = "UK.OBIE.Field.Invalid"
	OBFieldMissing            = "UK.OBIE.Field.Missing"
	OBFieldUnexpected         = "UK.OBIE.Field.Unexpected"
	OBHeaderInvalid           = "UK.OBIE.Header.Invalid"
	OBHeaderMissing           = "UK.OBIE.Header.Missing"
	OBResourceConsentMismatch = "UK.OBIE.Resource.ConsentMismatch"
	OBResourceInvalidConsent  = "UK.OBIE.Resource.InvalidConsentStatus"
	OBResourceInvalidFormat   = "UK.OBIE.Resource.InvalidFormat"
	OBResourceNotFound        = "UK.OBIE.Resource.NotFound"
	OBReauthenticate          = "UK.OBIE.Reauthenticate"
	OBSignatureInvalid        = jws.CodeInvalid
	OBSignatureInvalidClaim   = jws.CodeInvalidClaim
	OBSignatureMalformed      = jws.CodeMalformed
	OBSignatureMissing        = jws.CodeMissing
	OBSignatureMissingClaim   = jws.CodeMissingClaim
	OBUnexpectedError         = "UK.OBIE.UnexpectedError"
	OBUnsupportedCurrency     = "UK.OBIE.Unsupported.Currency"
	OBUnsupportedScheme       = "UK.OBIE.Unsupported.Scheme"
	OBUnsupportedIdentifier   = "UK.OBIE.Unsupported.AccountIdentifier"
)

// obFieldError is a request the bank refuses with 400: one OBError.
type obFieldError struct{ OBError }

func (e *obFieldError) Error() string { return e.Path + ": " + e.Message }

func fieldErr(code, path, format string, args ...any) error {
	return &obFieldError{OBError{ErrorCode: code, Path: path, Message: fmt.Sprintf(format, args...)}}
}

// checker collects the first violation of a request.
type checker struct{ err error }

func (c *checker) fail(code, path, format string, args ...any) {
	if c.err == nil {
		c.err = fieldErr(code, path, format, args...)
	}
}

// text checks an optional (or, with required, mandatory) string's length
// in characters.
func (c *checker) text(path, s string, minLen, maxLen int, required bool) {
	n := utf8.RuneCountInString(s)
	switch {
	case s == "" && required:
		c.fail(OBFieldMissing, path, "%s is required", path)
	case s == "":
	case !utf8.ValidString(s):
		c.fail(OBFieldInvalid, path, "%s is not UTF-8", path)
	case n < minLen || (maxLen > 0 && n > maxLen):
		c.fail(OBFieldInvalid, path, "%s must have %d to %d characters, got %d", path, minLen, maxLen, n)
	}
}

func (c *checker) enum(path, s string, allowed ...string) {
	if s != "" && !slices.Contains(allowed, s) {
		c.fail(OBFieldInvalid, path, "%s must be one of %s", path, strings.Join(allowed, ", "))
	}
}

func (c *checker) pattern(path, s string, re *regexp.Regexp) {
	if s != "" && !re.MatchString(s) {
		c.fail(OBFieldInvalid, path, "%s must match %s", path, re)
	}
}

var (
	obAmountPattern   = regexp.MustCompile(`^\d{1,13}$|^\d{1,13}\.\d{1,5}$`)
	obCurrencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
	obCountryPattern  = regexp.MustCompile(`^[A-Z]{2}$`)
	sortCodeAccount   = regexp.MustCompile(`^[0-9]{14}$`)
	// dateTime is the shape of an ISO 8601 date-time with its zone.
	dateTime = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$`)
)

// The creditor account schemes the profile pays to (DESIGN.md section 13:
// a beneficiary SortCodeAccountNumber:... or IBAN:...).
const (
	SchemeSortCodeAccountNumber = "UK.OBIE.SortCodeAccountNumber"
	SchemeIBAN                  = "UK.OBIE.IBAN"
)

var addressTypes = []string{"Business", "Correspondence", "DeliveryTo", "MailTo", "POBox", "Postal", "Residential", "Statement"}

func (c *checker) account(path string, a *obwire.Account, creditor bool) {
	c.text(path+".SchemeName", a.SchemeName, 1, 0, true)
	c.text(path+".Identification", a.Identification, 1, 256, true)
	c.text(path+".Name", a.Name, 1, 350, creditor)
	c.text(path+".SecondaryIdentification", a.SecondaryIdentification, 1, 34, false)
	if c.err != nil || !creditor {
		return
	}
	switch a.SchemeName {
	case SchemeSortCodeAccountNumber:
		if !sortCodeAccount.MatchString(a.Identification) {
			c.fail(OBFieldInvalid, path+".Identification", "a %s is 14 digits (sort code and account number)", SchemeSortCodeAccountNumber)
		}
	case SchemeIBAN:
		if !iban.MatchString(a.Identification) {
			c.fail(OBFieldInvalid, path+".Identification", "not an IBAN")
		}
	default:
		c.fail(OBUnsupportedScheme, path+".SchemeName", "this bank pays to %s or %s", SchemeSortCodeAccountNumber, SchemeIBAN)
	}
}

func (c *checker) address(path string, a *obPostalAddress) {
	c.enum(path+".AddressType", a.AddressType, addressTypes...)
	c.text(path+".Department", a.Department, 1, 70, false)
	c.text(path+".SubDepartment", a.SubDepartment, 1, 70, false)
	c.text(path+".StreetName", a.StreetName, 1, 70, false)
	c.text(path+".BuildingNumber", a.BuildingNumber, 1, 16, false)
	c.text(path+".PostCode", a.PostCode, 1, 16, false)
	c.text(path+".TownName", a.TownName, 1, 35, false)
	c.text(path+".CountrySubDivision", a.CountrySubDivision, 1, 35, false)
	c.pattern(path+".Country", a.Country, obCountryPattern)
	c.lines(path+".AddressLine", a.AddressLine, 7)
}

func (c *checker) lines(path string, lines []string, maxItems int) {
	if len(lines) > maxItems {
		c.fail(OBFieldInvalid, path, "%s has at most %d lines", path, maxItems)
	}
	for i, l := range lines {
		c.text(fmt.Sprintf("%s[%d]", path, i), l, 1, 70, true)
	}
}

// initiation checks an Initiation and returns its amount in minor units.
func (c *checker) initiation(path string, in *obInitiation) int64 {
	if in == nil {
		c.fail(OBFieldMissing, path, "%s is required", path)
		return 0
	}
	c.text(path+".InstructionIdentification", in.InstructionIdentification, 1, 35, true)
	c.text(path+".EndToEndIdentification", in.EndToEndIdentification, 1, 35, true)
	c.text(path+".LocalInstrument", in.LocalInstrument, 1, 0, false)
	if in.DebtorAccount != nil {
		c.account(path+".DebtorAccount", in.DebtorAccount, false)
	}
	c.account(path+".CreditorAccount", &in.CreditorAccount, true)
	if in.CreditorPostalAddress != nil {
		c.address(path+".CreditorPostalAddress", in.CreditorPostalAddress)
	}
	if r := in.RemittanceInformation; r != nil {
		c.text(path+".RemittanceInformation.Unstructured", r.Unstructured, 1, 140, false)
		c.text(path+".RemittanceInformation.Reference", r.Reference, 1, 35, false)
	}
	amt := path + ".InstructedAmount"
	c.text(amt+".Amount", in.InstructedAmount.Amount, 1, 0, true)
	c.text(amt+".Currency", in.InstructedAmount.Currency, 1, 0, true)
	c.pattern(amt+".Amount", in.InstructedAmount.Amount, obAmountPattern)
	c.pattern(amt+".Currency", in.InstructedAmount.Currency, obCurrencyPattern)
	if c.err != nil {
		return 0
	}
	cur, err := settlement.LookupCurrency(in.InstructedAmount.Currency)
	if err != nil {
		c.fail(OBUnsupportedCurrency, amt+".Currency", "%s is not an ISO 4217 currency this bank serves", in.InstructedAmount.Currency)
		return 0
	}
	minor, err := parseOBAmount(in.InstructedAmount.Amount, cur.Exponent)
	if err != nil {
		c.fail(OBFieldInvalid, amt+".Amount", "%v", err)
		return 0
	}
	return minor
}

var (
	paymentContextCodes = []string{"BillingGoodsAndServicesInAdvance", "BillingGoodsAndServicesInArrears", "PispPayee",
		"EcommerceMerchantInitiatedPayment", "FaceToFacePointOfSale", "TransferToSelf", "TransferToThirdParty",
		"BillPayment", "EcommerceGoods", "EcommerceServices", "Other", "PartyToParty"}
	accountTypes = []string{"Business", "BusinessSavingsAccount", "Charity", "Collection", "Corporate", "Ewallet", "Government",
		"Investment", "ISA", "JointPersonal", "Pension", "Personal", "PersonalSavingsAccount", "Premier", "Wealth"}
)

func (c *checker) risk(r *obRisk) {
	if r == nil {
		c.fail(OBFieldMissing, "Risk", "Risk is required (it may be empty)")
		return
	}
	c.enum("Risk.PaymentContextCode", r.PaymentContextCode, paymentContextCodes...)
	c.text("Risk.MerchantCategoryCode", r.MerchantCategoryCode, 3, 4, false)
	c.text("Risk.MerchantCustomerIdentification", r.MerchantCustomerIdentification, 1, 70, false)
	c.text("Risk.PaymentPurposeCode", r.PaymentPurposeCode, 3, 4, false)
	c.enum("Risk.BeneficiaryAccountType", r.BeneficiaryAccountType, accountTypes...)
	if d := r.DeliveryAddress; d != nil {
		c.lines("Risk.DeliveryAddress.AddressLine", d.AddressLine, 2)
		c.text("Risk.DeliveryAddress.StreetName", d.StreetName, 1, 70, false)
		c.text("Risk.DeliveryAddress.BuildingNumber", d.BuildingNumber, 1, 16, false)
		c.text("Risk.DeliveryAddress.PostCode", d.PostCode, 1, 16, false)
		c.text("Risk.DeliveryAddress.TownName", d.TownName, 1, 35, false)
		c.text("Risk.DeliveryAddress.CountrySubDivision", d.CountrySubDivision, 1, 35, false)
		c.text("Risk.DeliveryAddress.Country", d.Country, 1, 0, true)
		c.pattern("Risk.DeliveryAddress.Country", d.Country, obCountryPattern)
	}
}

// check validates a consent request and returns its amount in minor units.
func (req *obConsentRequest) check() (int64, error) {
	var c checker
	minor := c.initiation("Data.Initiation", req.Data.Initiation)
	c.enum("Data.ReadRefundAccount", req.Data.ReadRefundAccount, "No", "Yes")
	if a := req.Data.Authorisation; a != nil {
		c.text("Data.Authorisation.AuthorisationType", a.AuthorisationType, 1, 0, true)
		c.enum("Data.Authorisation.AuthorisationType", a.AuthorisationType, "Any", "Single")
		c.pattern("Data.Authorisation.CompletionDateTime", a.CompletionDateTime, dateTime)
	}
	if s := req.Data.SCASupportData; s != nil {
		c.enum("Data.SCASupportData.RequestedSCAExemptionType", s.RequestedSCAExemptionType,
			"BillPayment", "ContactlessTravel", "EcommerceGoods", "EcommerceServices", "Kiosk", "Parking", "PartyToParty")
		c.enum("Data.SCASupportData.AppliedAuthenticationApproach", s.AppliedAuthenticationApproach, "CA", "SCA")
		c.text("Data.SCASupportData.ReferencePaymentOrderId", s.ReferencePaymentOrderID, 1, 40, false)
	}
	c.risk(req.Risk)
	return minor, c.err
}

// check validates a payment request and returns its amount in minor units.
func (req *obPaymentRequest) check() (int64, error) {
	var c checker
	c.text("Data.ConsentId", req.Data.ConsentID, 1, 128, true)
	minor := c.initiation("Data.Initiation", req.Data.Initiation)
	c.risk(req.Risk)
	return minor, c.err
}

// errNotExact: an amount with more decimals than its currency has.
var errNotExact = errors.New("amount is not a whole number of the currency's minor units")

// parseOBAmount converts an Open Banking decimal amount ("12.50") to
// minor units by the currency's ISO 4217 exponent, exactly: decimals
// beyond the exponent must be zeros. It must be positive.
func parseOBAmount(s string, exponent int) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) > exponent {
		if frac[len(frac)-1] != '0' {
			return 0, fmt.Errorf("%q: %w (%d decimals)", s, errNotExact, exponent)
		}
		frac = frac[:len(frac)-1]
	}
	frac += strings.Repeat("0", exponent-len(frac))
	v, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("amount %q: %w", s, err)
	}
	if v <= 0 {
		return 0, fmt.Errorf("amount %q must be positive", s)
	}
	return v, nil
}

// formatOBAmount writes minor units as an Open Banking decimal amount
// with the currency's exponent ("12.50"; "5" without minor units).
func formatOBAmount(minor int64, exponent int) string {
	return decimal(minor, exponent, ".", false)
}

// canonical is the JSON of v as the bank compares bodies: the re-encoded
// typed request, so key order and whitespace do not matter.
func canonical(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		// The request types hold only strings, bools, slices and maps
		// decoded from JSON: they always encode.
		panic(fmt.Sprintf("fakebank: encoding a decoded request: %v", err))
	}
	return string(data)
}
