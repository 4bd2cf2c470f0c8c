package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DecodeStrict decodes one JSON value, refusing unknown fields and
// anything after it: a misspelt field in a file the agent keeps is an
// error, not a default.
func DecodeStrict(data []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value in the file")
	}
	return nil
}

// WriteFileAtomic replaces path with data so that a crash leaves either the
// old file or the new one, never a torn one: write a temporary file in the
// same directory, fsync it, rename it over path, fsync the directory.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ReadOptional reads a file the agent keeps (a seed record, a formed
// marker, a leave request): ok false when there is none, an error naming
// the file when it cannot be read or is not one strict JSON value of T.
func ReadOptional[T any](path string) (v T, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	if err := DecodeStrict(data, &v); err != nil {
		var zero T
		return zero, false, fmt.Errorf("%s: %w", path, err)
	}
	return v, true, nil
}

// RemoveStaleTemps removes the temporary files WriteFileAtomic left in
// dir when it was cut off (a kill, a power cut: its own clean-up never
// ran), and returns their paths. Only names of WriteFileAtomic's pattern
// (".NAME.tmp-DIGITS") directly in dir go; the files they were for stay,
// whole, as the rename left them. Call it while nothing writes in dir (the
// agent at its start, holding its instance lock): a write under way would
// lose its temporary file and fail. A missing dir has none.
func RemoveStaleTemps(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !isAtomicTemp(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// isAtomicTemp reports whether name is a WriteFileAtomic temporary file:
// "." + the file's name + ".tmp-" + os.CreateTemp's digits.
func isAtomicTemp(name string) bool {
	i := strings.LastIndex(name, ".tmp-")
	if !strings.HasPrefix(name, ".") || i <= 1 || i+len(".tmp-") == len(name) {
		return false
	}
	for _, c := range name[i+len(".tmp-"):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
