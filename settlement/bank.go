package settlement

import "fmt"

// MaxBankNameLen is the longest name of a bank.
const MaxBankNameLen = 32

// CheckBankName reports whether name can name a bank: the configured name
// of a connector (settle, stripe, obie), recorded in settlements.bank and
// used in a River queue (bank_<name>) and in the environment
// (SETTLE_BANK_<NAME>_TOKEN). It is 1 to MaxBankNameLen lower-case ASCII
// letters, digits and underscores, starting with a letter (the schema's
// CHECK says the same).
func CheckBankName(name string) error {
	if name == "" || len(name) > MaxBankNameLen {
		return fmt.Errorf("a bank name is 1 to %d characters long", MaxBankNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_'):
		default:
			return fmt.Errorf("a bank name holds lower-case letters, digits and underscores and starts with a letter, not %q", name)
		}
	}
	return nil
}
