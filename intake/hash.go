package intake

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// hashVersion prefixes the canonical encoding so a future change of the
// encoding can never produce the hash of an old one.
const hashVersion = "settle-payload-v1\n"

// CanonicalHash returns the payload hash of ev: "sha256:" followed by the
// hex SHA-256 of a canonical encoding of exactly the business fields
// settlement_id, account_id, amount_cents, currency and beneficiary, in
// that order, each written as name, byte length and value, so no two
// different field tuples share an encoding. Key order, whitespace, JSON
// escapes and the transport fields (event_id, occurred_at) cannot change it.
// An event that names its bank adds the field bank last: a replay naming
// another bank is a conflict, while an event that names none hashes as
// every event did before settlements had banks, so stored receipts keep
// matching their redeliveries.
func CanonicalHash(ev Event) string {
	buf := make([]byte, 0, 128+len(ev.SettlementID)+len(ev.AccountID)+len(ev.Beneficiary))
	buf = append(buf, hashVersion...)
	buf = appendField(buf, fieldSettlementID, ev.SettlementID)
	buf = appendField(buf, fieldAccountID, ev.AccountID)
	buf = appendField(buf, fieldAmountCents, strconv.FormatInt(ev.AmountCents, 10))
	buf = appendField(buf, fieldCurrency, ev.Currency)
	buf = appendField(buf, fieldBeneficiary, ev.Beneficiary)
	if ev.Bank != "" {
		buf = appendField(buf, fieldBank, ev.Bank)
	}
	sum := sha256.Sum256(buf)
	out := make([]byte, 0, len("sha256:")+64)
	out = append(out, "sha256:"...)
	out = hex.AppendEncode(out, sum[:])
	return string(out)
}

func appendField(buf []byte, name, value string) []byte {
	buf = append(buf, name...)
	buf = append(buf, ':')
	buf = strconv.AppendInt(buf, int64(len(value)), 10)
	buf = append(buf, ':')
	buf = append(buf, value...)
	return append(buf, '\n')
}
