package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"path"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// DefaultMaxBytes caps a bundle's contents: enough for a site's objects
// and several logs' tails, small enough to send from a site on a slow link.
const DefaultMaxBytes = 50 << 20

// ManifestName is the manifest's name inside the bundle's directory.
const ManifestName = "manifest.json"

// ReadOnlyNote is what the manifest (and the command's help) says of
// the cluster.
const ReadOnlyNote = "read only: nothing was created or changed in the cluster; no Secret was collected"

// Manifest is manifest.json: what the bundle holds, what did not arrive,
// what the size cap cut, and what was redacted.
type Manifest struct {
	Created time.Time `json:"created"`
	// Host is the machine the bundle was taken on.
	Host    string `json:"host"`
	Version string `json:"version,omitempty"`
	Note    string `json:"note"`
	// Complete: every source arrived and nothing was cut.
	Complete bool `json:"complete"`
	// MaxBytes caps the files' contents (the manifest is not counted).
	MaxBytes int64       `json:"maxBytes"`
	Files    []FileEntry `json:"files"`
	Missing  []Missing   `json:"missing"`
	Cut      []Cut       `json:"cut"`
	// Redacted counts, per file, the token and password values replaced
	// by "[redacted]".
	Redacted map[string]int `json:"redacted,omitempty"`
	// Notes are what the reader should know (the API server answered but
	// said it is not ready; which secret values were scrubbed by).
	Notes []string `json:"notes,omitempty"`
}

// FileEntry is one file in the bundle.
type FileEntry struct {
	Name   string `json:"name"`
	Source string `json:"source,omitempty"`
	Bytes  int64  `json:"bytes"`
}

// Cut is a file the size cap shortened or left out.
type Cut struct {
	File string `json:"file"`
	// Bytes is its size as collected; Kept what of it is in the bundle
	// (0: left out).
	Bytes int64  `json:"bytes"`
	Kept  int64  `json:"kept"`
	Why   string `json:"why"`
}

// Archive is a bundle ready to be written.
type Archive struct {
	// Dir is the directory every file is under inside the archive.
	Dir      string
	Manifest Manifest
	items    []Item
}

// Build scrubs every item with r, applies the size cap in the items'
// order (earlier items keep their place; a log's tail is shortened from
// its start, any other file that does not fit is left out) and lists it
// all in the manifest, which m starts.
func Build(dir string, items []Item, missing []Missing, r *Redactor, m Manifest) *Archive {
	if m.MaxBytes <= 0 {
		m.MaxBytes = DefaultMaxBytes
	}
	m.Note = ReadOnlyNote
	m.Missing = append([]Missing{}, missing...)
	m.Cut = []Cut{}
	m.Files = []FileEntry{}
	left := m.MaxBytes
	var kept []Item
	for _, it := range items {
		data, n := r.Scrub(it.Name, it.Data)
		if n > 0 {
			if m.Redacted == nil {
				m.Redacted = map[string]int{}
			}
			m.Redacted[it.Name] += n
		}
		it.Data = data
		size := int64(len(data))
		switch {
		case size <= left:
		case it.Tail && left > 0:
			keep := tailFrom(data, left)
			m.Cut = append(m.Cut, Cut{File: it.Name, Bytes: size, Kept: int64(len(keep)),
				Why: fmt.Sprintf("the size cap (%d bytes): only the newest lines were kept", m.MaxBytes)})
			it.Data = keep
		default:
			m.Cut = append(m.Cut, Cut{File: it.Name, Bytes: size,
				Why: fmt.Sprintf("the size cap (%d bytes): left out, %d bytes were left for it", m.MaxBytes, left)})
			continue
		}
		left -= int64(len(it.Data))
		kept = append(kept, it)
		m.Files = append(m.Files, FileEntry{Name: it.Name, Source: it.Source, Bytes: int64(len(it.Data))})
	}
	m.Complete = len(m.Missing) == 0 && len(m.Cut) == 0
	return &Archive{Dir: dir, Manifest: m, items: kept}
}

// tailFrom is the end of a log of at most n bytes, from the start of a
// line when there is one in it.
func tailFrom(data []byte, n int64) []byte {
	if int64(len(data)) <= n {
		return data
	}
	out := data[int64(len(data))-n:]
	if i := bytes.IndexByte(out, '\n'); i >= 0 && i+1 < len(out) {
		out = out[i+1:]
	}
	return out
}

// Bytes is the archive as a tar.gz: the manifest first, then the files,
// every one under Dir, mode 0600.
func (a *Archive) Bytes() ([]byte, error) {
	manifest, err := json.MarshalIndent(a.Manifest, "", "  ")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, data []byte) error {
		hdr := &tar.Header{Name: path.Join(a.Dir, name), Mode: 0o600, Size: int64(len(data)),
			ModTime: a.Manifest.Created, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add(ManifestName, append(manifest, '\n')); err != nil {
		return nil, err
	}
	for _, it := range a.items {
		if err := add(it.Name, it.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", it.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFile writes the archive to path (temp file, fsync, rename), mode
// 0600: it holds the site's names, addresses and logs.
func (a *Archive) WriteFile(path string) error {
	data, err := a.Bytes()
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, data, 0o600)
}
