// Package statement reads the files banks send about what actually moved on
// an account: ISO 20022 camt.053 statements and camt.054 notifications
// (versions .001.02 to .001.08 and banks' variants), BAI2 and SWIFT MT940
// (DESIGN section 14). It detects the format from the content, never from
// the file name, and turns every file into the same normalised view:
// statements of entries with exact int64 minor-unit amounts, a direction
// taken from the entry itself, the bank's and the originator's references,
// reversal and return information, and whether the balances add up.
//
// It owns parsing only. It must never reach a database, the network or a
// clock, never round an amount (one that cannot be expressed exactly in
// the currency's ISO 4217 minor units refuses the file), never use floats,
// and never hold a whole file in memory: XML is read token by token and
// the line formats through a scanner with a bounded line length, so a
// million-entry statement streams through Decoder.Decode in flat memory.
package statement
