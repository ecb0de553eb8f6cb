package bankhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/settle/settle/bankclient"
)

// maxJSONDepth bounds the nesting of a bank answer.
const maxJSONDepth = 32

// ErrDuplicateKey and ErrTooDeep are the causes CheckJSONKeys reports.
var (
	ErrDuplicateKey = errors.New("duplicate object key")
	ErrTooDeep      = errors.New("nesting too deep")
)

// CheckJSONKeys refuses a JSON document with a repeated key in any object,
// or nested deeper than 32 levels: an answer whose meaning depends on
// which of two values a parser keeps ({"status":"failed","status":
// "settled"}) is not an answer to act on. Syntax errors are left to the
// decoder that follows. A connector calls it on every bank answer before
// decoding it.
func CheckJSONKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]struct{}
		expect bool // in an object: the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			// A syntax error: the json.Unmarshal that follows reports it,
			// classified with the rest of the body's problems.
			return nil //nolint:nilerr // deliberate, see above
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if len(stack) >= maxJSONDepth {
					return ErrTooDeep
				}
				if top != nil && top.object {
					top.expect = true // this value ends; a key comes next
				}
				stack = append(stack, &frame{object: d == '{', keys: map[string]struct{}{}, expect: d == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if top == nil || !top.object {
			continue
		}
		if top.expect {
			k, _ := tok.(string)
			if _, dup := top.keys[k]; dup {
				return fmt.Errorf("%w %q", ErrDuplicateKey, bankclient.Sanitize(k))
			}
			top.keys[k] = struct{}{}
			top.expect = false
			continue
		}
		top.expect = true // a scalar value ends; a key comes next
	}
}
