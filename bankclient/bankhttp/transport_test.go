package bankhttp

import (
	"testing"

	"github.com/settle/settle/bankclient"
)

// TestTransportConns: a transport of our own keeps as many idle
// connections to the bank as the engine has requests at it at once, and
// never fewer than 32.
func TestTransportConns(t *testing.T) {
	t.Parallel()
	for conns, want := range map[int]int{0: 32, 8: 32, 100: 100, 500: 500} {
		tr, err := Transport(bankclient.Options{Conns: conns})
		if err != nil {
			t.Fatal(err)
		}
		if tr.MaxIdleConnsPerHost != want || tr.MaxIdleConns < want {
			t.Errorf("Conns %d: MaxIdleConnsPerHost %d, MaxIdleConns %d; want %d", conns, tr.MaxIdleConnsPerHost, tr.MaxIdleConns, want)
		}
	}
}
