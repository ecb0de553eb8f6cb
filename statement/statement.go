package statement

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Format is the kind of a statement file, as the contract names it.
type Format string

// The formats Decoder reads.
const (
	FormatCamt053 Format = "camt.053"
	FormatCamt054 Format = "camt.054"
	FormatBAI2    Format = "bai2"
	FormatMT940   Format = "mt940"
)

// Direction says which way an entry moved the account. Amounts are always
// positive; the direction carries the sign.
type Direction string

// The two directions of an entry.
const (
	Credit Direction = "credit"
	Debit  Direction = "debit"
)

// File is one statement file, normalised.
type File struct {
	// File is the name the file was read under (as given to Parse).
	File   string `json:"file"`
	Format Format `json:"format"`
	// Statements in file order.
	Statements []Statement `json:"statements"`
}

// Statement is what counts as one statement (DESIGN section 14): a camt
// Stmt, Ntfctn or Rpt; a BAI2 account (03 record); an MT940 message (each
// page of a multi-page statement is a statement of its own).
//
// In this and the other types an empty string means "not in the file"; it
// is written as null in JSON.
type Statement struct {
	// Account is camt Acct/Id/IBAN, else Acct/Id/Othr/Id; the BAI2 03
	// account number; MT940 :25:; exactly as written.
	Account string
	// Currency is camt Acct/Ccy, else the one currency of the balances;
	// the BAI2 03 currency, else the 02 group's, else USD; the MT940
	// :60a: currency.
	Currency string
	// OpeningMinor and ClosingMinor are the signed booked balances in minor
	// units of Currency: camt OPBD (else PRCD) and CLBD, BAI2 010 and 015,
	// MT940 :60F:/:60M: and :62F:/:62M:. Nil when the file has none.
	OpeningMinor *int64
	ClosingMinor *int64
	// Balanced says whether opening + credits - debits == closing, over the
	// entries in the balance currency. Nil when a balance is missing.
	Balanced *bool
	// Entries in file order.
	Entries []Entry
}

// Entry is one booking on the account: a camt Ntry, a BAI2 16 record, an
// MT940 :61: line. Every entry counts, whatever its status.
type Entry struct {
	// EntryRef is the bank's own reference: camt AcctSvcrRef, else NtryRef;
	// the BAI2 16 bank reference; the part of the MT940 :61: after //.
	EntryRef    string
	AmountMinor int64
	Currency    string
	// Direction comes from the entry, never from its transaction details.
	Direction Direction
	// BookedOn and ValueOn are dates as YYYY-MM-DD.
	BookedOn string
	ValueOn  string
	// Reversal is camt RvslInd, MT940 RC/RD. BAI2 has no reversal mark.
	Reversal bool
	// ReturnReason is set when the entry is a return: the first return
	// reason of its transactions.
	ReturnReason string
	// Transactions are the camt NtryDtls/TxDtls (none for an entry without
	// them, whatever a batch's NbOfTxs says); in BAI2 and MT940 exactly one.
	Transactions []Transaction
}

// Transaction is one underlying payment of an entry.
type Transaction struct {
	// Reference is the originator's end-to-end reference as the bank
	// reports it: camt Refs/EndToEndId, the EREF of the MT940 :86:, the
	// BAI2 16 customer reference. NOTPROVIDED and NONREF are no reference.
	Reference string
	// AmountMinor is in the entry's currency: the detail's own amount in
	// that currency, else the entry amount when the entry has this one
	// transaction only. Nil when the bank gives the detail's amount only in
	// another currency (a camt batch of foreign-currency payments).
	AmountMinor *int64
	// ReturnReason is the return reason code: camt RtrInf/Rsn/Cd, else
	// Rsn/Prtry, else NARR (ISO's code for a reason given only as text);
	// the BAI2 type code of a return item; the MT940 /RTRN/ code, else RTI
	// for a returned-item transaction type. Empty when not a return.
	ReturnReason string
	// Counterparty is the other party's name as the bank reports it: camt
	// RltdPties Cdtr/Nm of a debit, Dbtr/Nm of a credit (Cdtr/Pty/Nm and
	// Dbtr/Pty/Nm from .001.08); the MT940 /NAME/ of :86:, or the German
	// ?32 and ?33; empty in BAI2. It is not part of the contract's JSON
	// (DESIGN section 14); statement import stores it, shows it and uses
	// it for suggestions.
	Counterparty string
	// CounterpartyAccount is the other party's account where the file
	// names it, spaces removed: camt RltdPties CdtrAcct of a debit,
	// DbtrAcct of a credit (Id/IBAN, else Id/Othr/Id); the MT940 /IBAN/ or
	// the account of /CNTP/ in :86:, or the German ?31; empty in BAI2,
	// whose detail records carry no structured counterparty.
	CounterpartyAccount string
}

// Handler receives a file's contents in file order while Decoder.Decode
// reads it. An error it returns stops the decoding and is returned as is.
type Handler interface {
	// Entry is called for each entry as soon as it is read. st holds the
	// statement's header as far as it is read (camt and BAI2 balances come
	// before the entries, MT940's closing balance after them); its Entries
	// is never filled in by the decoder. The handler owns e.
	Entry(st *Statement, e Entry) error
	// EndStatement is called when st is complete; its balances and
	// Balanced are final. st is not reused after the call.
	EndStatement(st *Statement) error
}

// Errors that Decoder's errors match with errors.Is.
var (
	// ErrNotStatement: the file is not a statement in a format read here
	// (empty, a PDF, another XML document, another text format).
	ErrNotStatement = errors.New("not a bank statement (camt.053, camt.054, BAI2 or MT940)")
	// ErrMalformed: the file claims a format but breaks it (bad syntax,
	// missing mandatory parts, truncation, impossible dates, hostile XML).
	ErrMalformed = errors.New("malformed statement")
	// ErrInexactAmount: an amount has more decimals than its currency's
	// minor unit allows; it is never rounded.
	ErrInexactAmount = errors.New("amount not exact in the currency's minor units")
)

// Error is a file refused: which file, where, and why. Err matches
// ErrNotStatement, ErrMalformed or ErrInexactAmount, or wraps
// settlement.ErrUnknownCurrency.
type Error struct {
	File string
	// Line is 1-based; 0 when it does not apply.
	Line int
	// Element is the camt element path (BkToCstmrStmt/Stmt[1]/Ntry[3]/Amt)
	// or the BAI2 record / MT940 field; empty when it does not apply.
	Element string
	Err     error
}

// Error reads "file: line N: element: what was wrong".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ": line %d", e.Line)
	}
	if e.Element != "" {
		b.WriteString(": ")
		b.WriteString(e.Element)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns Err, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// errorf returns an error that says what was wrong and matches kind.
func errorf(kind error, format string, args ...any) error {
	if kind == ErrNotStatement { //nolint:errorlint // choosing the wording of our own sentinel
		return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), kind)
}

// nullable is s, or nil (JSON null) when s is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalJSON writes the statement in the contract's shape (DESIGN section
// 14), with null for what the file does not give.
func (s Statement) MarshalJSON() ([]byte, error) {
	entries := s.Entries
	if entries == nil {
		entries = []Entry{}
	}
	return json.Marshal(struct {
		Account      *string `json:"account"`
		Currency     *string `json:"currency"`
		OpeningMinor *int64  `json:"opening_minor"`
		ClosingMinor *int64  `json:"closing_minor"`
		Balanced     *bool   `json:"balanced"`
		Entries      []Entry `json:"entries"`
	}{nullable(s.Account), nullable(s.Currency), s.OpeningMinor, s.ClosingMinor, s.Balanced, entries})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Statement) UnmarshalJSON(data []byte) error {
	var w struct {
		Account      *string `json:"account"`
		Currency     *string `json:"currency"`
		OpeningMinor *int64  `json:"opening_minor"`
		ClosingMinor *int64  `json:"closing_minor"`
		Balanced     *bool   `json:"balanced"`
		Entries      []Entry `json:"entries"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*s = Statement{deref(w.Account), deref(w.Currency), w.OpeningMinor, w.ClosingMinor, w.Balanced, w.Entries}
	return nil
}

// entryJSON is Entry in the contract's shape.
type entryJSON struct {
	EntryRef     *string       `json:"entry_ref"`
	AmountMinor  int64         `json:"amount_minor"`
	Currency     *string       `json:"currency"`
	Direction    Direction     `json:"direction"`
	BookedOn     *string       `json:"booked_on"`
	ValueOn      *string       `json:"value_on"`
	Reversal     bool          `json:"reversal"`
	ReturnReason *string       `json:"return_reason"`
	Transactions []Transaction `json:"transactions"`
}

// MarshalJSON writes the entry in the contract's shape.
func (e Entry) MarshalJSON() ([]byte, error) {
	txs := e.Transactions
	if txs == nil {
		txs = []Transaction{}
	}
	return json.Marshal(entryJSON{
		nullable(e.EntryRef), e.AmountMinor, nullable(e.Currency), e.Direction,
		nullable(e.BookedOn), nullable(e.ValueOn), e.Reversal, nullable(e.ReturnReason), txs,
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(data []byte) error {
	var w entryJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = Entry{
		deref(w.EntryRef), w.AmountMinor, deref(w.Currency), w.Direction,
		deref(w.BookedOn), deref(w.ValueOn), w.Reversal, deref(w.ReturnReason), w.Transactions,
	}
	return nil
}

// transactionJSON is Transaction in the contract's shape.
type transactionJSON struct {
	Reference    *string `json:"reference"`
	AmountMinor  *int64  `json:"amount_minor"`
	ReturnReason *string `json:"return_reason"`
}

// MarshalJSON writes the transaction in the contract's shape.
func (t Transaction) MarshalJSON() ([]byte, error) {
	return json.Marshal(transactionJSON{nullable(t.Reference), t.AmountMinor, nullable(t.ReturnReason)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Transaction) UnmarshalJSON(data []byte) error {
	var w transactionJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*t = Transaction{Reference: deref(w.Reference), AmountMinor: w.AmountMinor, ReturnReason: deref(w.ReturnReason)}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
