package fakebank

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// stateVersion is the format version of the state file.
const stateVersion = 1

// stateFile is the on-disk form of the books.
type stateFile struct {
	Version           int         `json:"version"`
	Payments          []*payment  `json:"payments"`
	Keys              []*keyEntry `json:"keys"`
	Replays           int64       `json:"replays"`
	KeyReuseConflicts int64       `json:"key_reuse_conflicts"`
	// The obie profile's consents; absent in files of the other profiles.
	Consents                 []*consent    `json:"consents,omitempty"`
	ConsentKeys              []*consentKey `json:"consent_keys,omitempty"`
	ConsentReplays           int64         `json:"consent_replays,omitempty"`
	ConsentKeyReuseConflicts int64         `json:"consent_key_reuse_conflicts,omitempty"`
	// The obie authorisation server's codes and tokens, by hash.
	AuthCodes []*authCode    `json:"auth_codes,omitempty"`
	Tokens    []*issuedToken `json:"tokens,omitempty"`
}

// snapshot encodes the books. The caller holds Bank.mu.
func (bk *books) snapshot() ([]byte, error) {
	sf := stateFile{
		Version:           stateVersion,
		Payments:          bk.payments,
		Keys:              make([]*keyEntry, 0, len(bk.keys)),
		Replays:           bk.replays,
		KeyReuseConflicts: bk.keyReuseConflicts,
	}
	for _, e := range bk.keys {
		sf.Keys = append(sf.Keys, e)
	}
	slices.SortFunc(sf.Keys, func(a, b *keyEntry) int { return strings.Compare(a.Key, b.Key) })
	sf.Consents, sf.ConsentReplays, sf.ConsentKeyReuseConflicts = bk.consents, bk.consentReplays, bk.consentKeyReuseConflicts
	for _, e := range bk.consentKeys {
		sf.ConsentKeys = append(sf.ConsentKeys, e)
	}
	slices.SortFunc(sf.ConsentKeys, func(a, b *consentKey) int { return strings.Compare(a.Key, b.Key) })
	for _, c := range bk.codes {
		sf.AuthCodes = append(sf.AuthCodes, c)
	}
	slices.SortFunc(sf.AuthCodes, func(a, b *authCode) int { return strings.Compare(a.Hash, b.Hash) })
	for _, t := range bk.tokens {
		sf.Tokens = append(sf.Tokens, t)
	}
	slices.SortFunc(sf.Tokens, func(a, b *issuedToken) int { return strings.Compare(a.Hash, b.Hash) })
	data, err := json.Marshal(sf)
	if err != nil {
		return nil, fmt.Errorf("error encoding fakebank state: %w", err)
	}
	return data, nil
}

// loadState reads the books from path; a missing file is an empty bank.
// Temporary files left by a crash in the middle of a write are removed.
func loadState(path string) (*books, error) {
	if tmps, err := filepath.Glob(path + ".tmp-*"); err == nil {
		for _, t := range tmps {
			_ = os.Remove(t)
		}
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return newBooks(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("error reading fakebank state: %w", err)
	}
	var sf stateFile
	if err := json.Unmarshal(data, &sf); err != nil {
		return nil, fmt.Errorf("error decoding fakebank state %s: %w", path, err)
	}
	if sf.Version != stateVersion {
		return nil, fmt.Errorf("error loading fakebank state %s: unknown version %d", path, sf.Version)
	}
	bk := newBooks()
	bk.replays, bk.keyReuseConflicts = sf.Replays, sf.KeyReuseConflicts
	for i, p := range sf.Payments {
		if p == nil || p.Seq != int64(i)+1 {
			return nil, fmt.Errorf("error loading fakebank state %s: payment %d out of sequence", path, i+1)
		}
		bk.payments = append(bk.payments, p)
		bk.count(p)
	}
	for _, e := range sf.Keys {
		if e == nil || e.PaymentSeq < 0 || e.PaymentSeq > int64(len(bk.payments)) {
			return nil, fmt.Errorf("error loading fakebank state %s: key entry points at no payment", path)
		}
		bk.keys[e.Key] = e
	}
	bk.consentReplays, bk.consentKeyReuseConflicts = sf.ConsentReplays, sf.ConsentKeyReuseConflicts
	for i, c := range sf.Consents {
		if c == nil || c.Seq != int64(i)+1 || c.PaymentSeq < 0 || c.PaymentSeq > int64(len(bk.payments)) {
			return nil, fmt.Errorf("error loading fakebank state %s: consent %d out of sequence", path, i+1)
		}
		bk.consents = append(bk.consents, c)
	}
	for _, e := range sf.ConsentKeys {
		if e == nil || e.ConsentSeq < 1 || e.ConsentSeq > int64(len(bk.consents)) {
			return nil, fmt.Errorf("error loading fakebank state %s: consent key points at no consent", path)
		}
		bk.consentKeys[e.Key] = e
	}
	for _, c := range sf.AuthCodes {
		if c == nil || c.ConsentSeq < 1 || c.ConsentSeq > int64(len(bk.consents)) {
			return nil, fmt.Errorf("error loading fakebank state %s: authorisation code of no consent", path)
		}
		bk.codes[c.Hash] = c
	}
	for _, t := range sf.Tokens {
		if t == nil || t.ConsentSeq < 0 || t.ConsentSeq > int64(len(bk.consents)) {
			return nil, fmt.Errorf("error loading fakebank state %s: token of no consent", path)
		}
		bk.tokens[t.Hash] = t
	}
	return bk, nil
}

// persist makes sure the books as of version v are in the state file. A
// caller answers a request only after persist returns nil for the version
// its mutation produced. Concurrent callers share writes: whoever writes
// takes the newest books, and the others find their version already durable.
func (b *Bank) persist(v uint64) error {
	if b.statePath == "" {
		return nil
	}
	b.persistMu.Lock()
	defer b.persistMu.Unlock()
	if b.durable >= v {
		return nil
	}
	b.mu.Lock()
	cur := b.version
	data, err := b.books.snapshot()
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if err := writeFileAtomic(b.statePath, data); err != nil {
		return err
	}
	b.durable = cur
	return nil
}

// writeFileAtomic replaces path with data so that a crash at any moment
// leaves either the old or the new content: it writes a temporary file in
// the same directory, syncs it, renames it over path and syncs the directory.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("error creating temporary state file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("error writing temporary state file: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("error syncing temporary state file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("error closing temporary state file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("error replacing state file: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("error opening state directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("error syncing state directory: %w", err)
	}
	return nil
}
