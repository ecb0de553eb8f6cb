package main

// The bank connectors settle offers, listed here and passed to what uses
// them: no connector registers itself, and each one's configuration is
// read here, at the edge.
import (
	"os"
	"strings"

	"github.com/settle/settle/bankclient"
	"github.com/settle/settle/bankclient/obie"
	"github.com/settle/settle/bankclient/settle"
	"github.com/settle/settle/bankclient/stripe"
)

// connectors are the connectors of --bank: settle's own protocol (the
// default), Stripe's payouts, and UK Open Banking with its configuration
// from the environment (obie.ConfigFromEnv).
func connectors() bankclient.Connectors {
	return bankclient.Connectors{settle.Connector, stripe.Connector, obie.NewConnector(obie.ConfigFromEnv(os.Getenv))}
}

// connectorNames lists the connectors for --help: "obie, settle, stripe".
func connectorNames() string { return strings.Join(connectors().Names(), ", ") }

// connectorURLs lists each connector's default bank URL, for --help.
func connectorURLs() string {
	var parts []string
	conns := connectors()
	for _, n := range conns.Names() {
		c, _ := conns.Lookup(n)
		parts = append(parts, n+": "+c.URL())
	}
	return strings.Join(parts, ", ")
}
