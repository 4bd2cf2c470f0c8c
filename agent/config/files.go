package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
