package main

// The bank connectors besides settle's own, registered for --bank by
// their packages' init.
import (
	"strings"

	"github.com/settle/settle/bankclient"
	_ "github.com/settle/settle/bankclient/obie"
	_ "github.com/settle/settle/bankclient/stripe"
)

// connectorURLs lists each connector's default bank URL, for --help.
func connectorURLs() string {
	var parts []string
	for _, n := range bankclient.Names() {
		c, _ := bankclient.Lookup(n)
		parts = append(parts, n+": "+c.URL())
	}
	return strings.Join(parts, ", ")
}
