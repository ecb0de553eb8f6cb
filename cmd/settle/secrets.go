package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// minAPITokenLen is the shortest API token the worker accepts: a token is
// the only thing between the network and the payouts, and a short one is
// guessed (issue 32, item 9).
const minAPITokenLen = 16

// maxSecretFileBytes bounds a secret file: a token or a key, not a document.
const maxSecretFileBytes = 64 << 10

// readSecretFile reads a secret kept in a file (--api-token-file,
// SETTLE_*_FILE): the whole file, without its trailing line break. An empty
// file is refused, so that a missing secret is never mistaken for "none".
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("error reading the secret file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("error reading the secret file %s: %w", path, err)
	}
	if len(b) > maxSecretFileBytes {
		return "", fmt.Errorf("the secret file %s is over %d KiB: it should hold one token", path, maxSecretFileBytes>>10)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("the secret file %s is empty", path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("the secret file %s holds more than one line: it should hold one token", path)
	}
	return s, nil
}

// secretEnv reads the environment with file indirection for secrets: for a
// variable NAME, NAME_FILE names a file holding its value (as the official
// container images of PostgreSQL do), so that a secret need not sit in the
// environment of the process, where `ps e` and /proc show it. Setting both
// is an error, kept in err.
type secretEnv struct {
	getenv func(string) string
	err    error
}

// get returns NAME's value, or the content of the file NAME_FILE names.
func (e *secretEnv) get(name string) string {
	v := e.getenv(name)
	if strings.HasSuffix(name, "_FILE") {
		return v
	}
	path := e.getenv(name + "_FILE")
	if path == "" {
		return v
	}
	if v != "" {
		e.fail(fmt.Errorf("both %s and %s_FILE are set: set one", name, name))
		return ""
	}
	s, err := readSecretFile(path)
	if err != nil {
		e.fail(fmt.Errorf("%s_FILE: %w", name, err))
		return ""
	}
	return s
}

func (e *secretEnv) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// apiToken is the API token of a command: --api-token (or SETTLE_API_TOKEN)
// or the content of --api-token-file (or SETTLE_API_TOKEN_FILE), not both.
func apiToken(token, file string) (string, error) {
	if file == "" {
		return token, nil
	}
	if token != "" {
		return "", errors.New("both --api-token (SETTLE_API_TOKEN) and --api-token-file (SETTLE_API_TOKEN_FILE) are set: set one")
	}
	s, err := readSecretFile(file)
	if err != nil {
		return "", fmt.Errorf("--api-token-file: %w", err)
	}
	return s, nil
}

// checkTokenStrength refuses an API token shorter than minAPITokenLen.
func checkTokenStrength(token string) error {
	if n := utf8.RuneCountInString(token); token != "" && n < minAPITokenLen {
		return fmt.Errorf("the API token has %d characters; at least %d are required (a random one: openssl rand -hex 32)", n, minAPITokenLen)
	}
	return nil
}

// onCommandLine reports whether the flag name was given on the command line
// (not through the environment).
func onCommandLine(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}
