package bankhttp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/bankhttp"
)

// TestParseSignatureHeader: exactly one decimal t= and at least one hex
// v1=; unknown keys and bad v1 values are skipped; anything else is a bad
// signature, never a guess at which t= was meant.
func TestParseSignatureHeader(t *testing.T) {
	t.Parallel()
	sig := strings.Repeat("ab", 32)
	good := map[string]int{
		"t=1700000000,v1=" + sig:                          1,
		" t=1700000000 , v1=" + sig + ",v0=zz":            1,
		"v1=" + sig + ",t=1700000000,v1=" + sig:           2,
		"t=1700000000,v1=nothex,v1=" + sig + ",scheme=ed": 1,
	}
	for h, n := range good {
		sh, err := bankhttp.ParseSignatureHeader(h)
		if err != nil || sh.Timestamp != "1700000000" || !sh.At.Equal(time.Unix(1700000000, 0)) || len(sh.Signatures) != n {
			t.Errorf("%q: %+v, %v; want t=1700000000 and %d signatures", h, sh, err, n)
		}
	}
	for _, h := range []string{
		"",
		"v1=" + sig,
		"t=1700000000",
		"t=1700000000,v1=nothex",
		"t=1700000000,t=1700000000,v1=" + sig,
		"t=1800000000,t=1700000000,v1=" + sig,
		"t=1700000000,v1=" + sig + ",t=1800000000",
		"t=1700000000,v1=" + sig + ", t =1800000000",
		"t=,v1=" + sig,
		"t=+1700000000,v1=" + sig,
		"t=-1,v1=" + sig,
		"t=17e8,v1=" + sig,
		"t=99999999999999999999,v1=" + sig,
	} {
		if sh, err := bankhttp.ParseSignatureHeader(h); !errors.Is(err, bankclient.ErrWebhookSignature) {
			t.Errorf("%q: %+v, %v; want %v", h, sh, err, bankclient.ErrWebhookSignature)
		}
	}
}
