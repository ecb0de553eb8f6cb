package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxOperatorName is the longest operator name (operator_actions.operator).
const MaxOperatorName = 128

// Operators are the console's operators, each with a credential of their
// own (settle worker --operators-file): a name and the SHA-256 of that
// operator's token. An operator signs in to the console with HTTP Basic,
// their name as the user name and their token as the password, so the name
// recorded with an action is one the worker checked, not one the person
// typed. Only hashes are kept: the file gives away no token.
type Operators struct {
	hashes map[string][sha256.Size]byte
}

// ParseOperators reads an operators file: one operator a line,
//
//	NAME:SHA256HEX
//
// where SHA256HEX is the hex SHA-256 of the operator's token (printf %s
// "$TOKEN" | sha256sum). Blank lines and lines starting with # are skipped.
// A name is 1 to 128 printable characters without ':'; each appears once.
func ParseOperators(r io.Reader) (*Operators, error) {
	o := &Operators{hashes: map[string][sha256.Size]byte{}}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, sum, ok := strings.Cut(line, ":")
		name, sum = strings.TrimSpace(name), strings.ToLower(strings.TrimSpace(sum))
		if !ok {
			return nil, fmt.Errorf("line %d: want NAME:SHA256HEX (the hex SHA-256 of the operator's token)", n)
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		b, err := hex.DecodeString(sum)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d: operator %q: want the 64 hex digits of the SHA-256 of the token (printf %%s \"$TOKEN\" | sha256sum), not a token", n, name)
		}
		if _, dup := o.hashes[name]; dup {
			return nil, fmt.Errorf("line %d: operator %q is listed twice", n, name)
		}
		o.hashes[name] = [sha256.Size]byte(b)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("error reading the operators: %w", err)
	}
	if len(o.hashes) == 0 {
		return nil, errors.New("no operator listed: want one NAME:SHA256HEX a line")
	}
	return o, nil
}

// LoadOperators reads the operators file at path (see ParseOperators).
func LoadOperators(path string) (*Operators, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("error reading --operators-file: %w", err)
	}
	defer f.Close()
	o, err := ParseOperators(f)
	if err != nil {
		return nil, fmt.Errorf("--operators-file %s: %w", path, err)
	}
	return o, nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty operator name")
	case !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxOperatorName:
		return fmt.Errorf("operator name %q: want at most %d characters of UTF-8", name, MaxOperatorName)
	}
	for _, r := range name {
		if !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("operator name %q holds a character that is not printable", name)
		}
	}
	return nil
}

// Len is the number of operators.
func (o *Operators) Len() int { return len(o.hashes) }

// Check reports which operator r signed in as: the Basic user name, when
// it is listed and the password is that operator's token. The comparison
// is constant-time over SHA-256 sums, and an unknown name costs what a
// known one does.
func (o *Operators) Check(r *http.Request) (name string, ok bool) {
	user, pass, presented := r.BasicAuth()
	if !presented {
		return "", false
	}
	sum := sha256.Sum256([]byte(pass))
	want, known := o.hashes[user]
	match := subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	if !known || !match {
		return "", false
	}
	return user, true
}
