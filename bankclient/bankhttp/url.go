package bankhttp

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/settle/settle/bankclient"
)

// ParseBaseURL parses a bank's base URL as every client takes it: http or
// https, a host, no query or fragment, and no user info: where the
// credential belongs instead is said by credential ("the token belongs in
// SETTLE_BANK_TOKEN"). Its errors never hold the URL's user info.
func ParseBaseURL(raw, credential string) (*url.URL, error) {
	base, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, err
	case base.Scheme != "http" && base.Scheme != "https":
		return nil, fmt.Errorf("scheme %q is not http or https", base.Scheme)
	case base.Host == "":
		return nil, errors.New("no host")
	case base.User != nil:
		return nil, fmt.Errorf("%s, not in the URL", credential)
	case base.RawQuery != "" || base.Fragment != "":
		return nil, errors.New("it must not carry a query or fragment")
	}
	return base, nil
}

// CheckToken refuses a credential that cannot travel in a header, named
// name in the error. Its errors never contain the credential.
func CheckToken(tok, name string) error {
	for i := 0; i < len(tok); i++ {
		if b := tok[i]; b <= ' ' || b >= 0x7f {
			return fmt.Errorf("%s contains a space, control or non-ASCII byte", name)
		}
	}
	return nil
}

// ParseRemote is what a connector's New checks before anything else: the
// base URL (ParseBaseURL), no credential over plain http to a bank not on
// this machine, a credential for such a bank at all, one that can travel
// in a header, and a rate that is not negative. bank names the bank and
// credential the kind of token in the errors ("Stripe", "secret key"),
// which never contain either. It returns the URL and whether the bank is
// on this machine.
func ParseRemote(baseURL string, opts bankclient.Options, bank, credential string) (*url.URL, bool, error) {
	base, err := ParseBaseURL(baseURL, "the "+credential+" belongs in "+bankclient.EnvToken)
	if err != nil {
		return nil, false, fmt.Errorf("error parsing %s URL: %w", bank, err)
	}
	loopback, err := CheckScheme(base, opts, bank, credential)
	if err != nil {
		return nil, false, err
	}
	if opts.Token == "" && !loopback {
		return nil, false, fmt.Errorf("error configuring %s: no %s (set %s)", bank, credential, bankclient.EnvToken)
	}
	if err := CheckToken(string(opts.Token), "the "+credential); err != nil {
		return nil, false, fmt.Errorf("error configuring %s: %w", bank, err)
	}
	if opts.RatePerSecond < 0 {
		return nil, false, fmt.Errorf("error configuring the bank rate: %g requests a second is negative", opts.RatePerSecond)
	}
	return base, loopback, nil
}

// ErrPlainHTTP is matched by the refusal to talk plain http to a bank that
// is not on this machine: anyone on the path could read the payments and
// answer "settled" for them.
var ErrPlainHTTP = errors.New("refusing plain http to a bank that is not on this machine")

// CheckScheme is the transport check every client makes: https, or plain
// http to a bank on this machine (the fakebank), or, with
// opts.InsecureHTTP, to any bank but never with a credential; the last
// logs a loud line to opts.Logger. It reports whether the bank is on this
// machine. bank and credential name them in the errors.
func CheckScheme(base *url.URL, opts bankclient.Options, bank, credential string) (loopback bool, err error) {
	loopback = IsLoopback(base.Hostname())
	if base.Scheme == "https" || loopback {
		return loopback, nil
	}
	switch {
	case !opts.InsecureHTTP:
		return false, fmt.Errorf("error configuring %s: %w (%s): use https, or accept the risk with --bank-insecure-http (SETTLE_BANK_INSECURE_HTTP=true)", bank, ErrPlainHTTP, base.Host)
	case opts.Token != "":
		return false, fmt.Errorf("error configuring %s: %w (%s) with the %s, even with --bank-insecure-http", bank, ErrPlainHTTP, base.Host, credential)
	}
	if opts.Logger != nil {
		opts.Logger.Warn("INSECURE: the bank is reached over plain http (--bank-insecure-http): anyone on the network path can read every payment and answer \"settled\" for it; use https",
			"bank", bank, "host", base.Host)
	}
	return false, nil
}

// IsLoopback reports whether host names this machine.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
