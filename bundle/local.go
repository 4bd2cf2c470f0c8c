package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// DefaultTailBytes is how much of each log's end a bundle takes.
const DefaultTailBytes = 8 << 20

// Local says where this machine's files are: the agent's state directory
// and log, k3s's log (the agent's --state-dir, --log-file, --k3s-log) and
// the audit log of the actions taken here.
type Local struct {
	StateDir, AgentLog, K3sLog, AuditLog string
	// AgentSocket: its presence, or the state directory's, says this
	// machine is a node.
	AgentSocket string
	// TailBytes is how much of each log's end is taken (0: DefaultTailBytes).
	TailBytes int64
}

// IsNode says whether this machine runs an agent: its state directory or
// its socket exists.
func (l Local) IsNode() bool {
	for _, p := range []string{l.StateDir, l.AgentSocket} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// localSources read this machine's files: the audit log always (actions
// are taken from any machine with a kubeconfig), the agent's state and
// the logs' tails on a node. A path that does not exist is listed as
// missing, not an error.
func localSources(l Local, deadline time.Duration) []Source {
	tail := l.TailBytes
	if tail <= 0 {
		tail = DefaultTailBytes
	}
	logSource := func(what, path, name string) Source {
		return Source{Name: what + " (" + path + ")", Deadline: deadline, Collect: func(context.Context) ([]Item, []Missing, error) {
			data, size, err := readTail(path, tail)
			if err != nil {
				return nil, nil, err
			}
			src := path
			if size > int64(len(data)) {
				src = fmt.Sprintf("%s, its last %d of %d bytes", path, len(data), size)
			}
			return []Item{{Name: name, Source: src, Data: data, Tail: true}}, nil, nil
		}}
	}
	out := []Source{logSource("the audit log", l.AuditLog, "local/audit.jsonl")}
	if !l.IsNode() {
		return out
	}
	out = append(out,
		Source{Name: "the agent's state directory (" + l.StateDir + ")", Deadline: deadline, Collect: func(context.Context) ([]Item, []Missing, error) {
			return readDir(l.StateDir, "local/state")
		}},
		logSource("the agent's log", l.AgentLog, "local/logs/agent.log"),
		logSource("k3s's log", l.K3sLog, "local/logs/k3s.log"),
	)
	return out
}

// readTail reads the last n bytes of path (from the start of a line) and
// its size.
func readTail(path string, n int64) ([]byte, int64, error) {
	if path == "" {
		return nil, 0, errors.New("no path given")
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s does not exist", path)
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file", path)
	}
	size := st.Size()
	start := max(size-n, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, start, size-start))
	if err != nil {
		return nil, 0, err
	}
	if start > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return data, size, nil
}

// readDir takes every regular file below dir (symbolic links are not
// followed), as prefix/<its path below dir); a file that cannot be read
// is missing.
func readDir(dir, prefix string) ([]Item, []Missing, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s does not exist", dir)
	}
	var items []Item
	var missing []Missing
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			missing = append(missing, Missing{Item: path, Why: err.Error()})
			if e != nil && e.IsDir() && path != dir {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			missing = append(missing, Missing{Item: path, Why: err.Error()})
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == config.TokenSeenFile {
			if data, err = withoutFingerprint(data); err != nil {
				missing = append(missing, Missing{Item: path, Why: err.Error()})
				return nil
			}
		}
		items = append(items, Item{Name: filepath.ToSlash(filepath.Join(prefix, rel)), Source: path, Data: data})
		return nil
	})
	return items, missing, err
}

// withoutFingerprint is the agent's token record without its SHA-256 of
// the cluster token: a fast hash lets anyone holding the bundle try
// tokens offline. Its dates stay (since when the node applies its token).
// A record that does not parse is left out whole.
func withoutFingerprint(data []byte) ([]byte, error) {
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("left out: it does not parse (%v), so the token's fingerprint could not be taken out", err)
	}
	if _, ok := rec["fingerprint"]; ok {
		rec["fingerprint"] = "(left out of the bundle)"
	}
	return json.MarshalIndent(rec, "", "  ")
}

// TokenFiles are where this machine may keep the cluster token: k3s's
// own files under its data directory (a server's), and the file the
// agent's config names (token_file). The bundle reads them only to scrub
// the token from everything it holds.
func TokenFiles(k3sDataDir, agentConfig string) []string {
	var out []string
	if k3sDataDir != "" {
		for _, f := range []string{"token", "agent-token", "node-token"} {
			out = append(out, filepath.Join(k3sDataDir, "server", f))
		}
	}
	if agentConfig != "" {
		if data, err := os.ReadFile(agentConfig); err == nil {
			var c struct {
				TokenFile string `json:"token_file"`
			}
			if json.Unmarshal(data, &c) == nil && c.TokenFile != "" {
				out = append(out, c.TokenFile)
			}
		}
	}
	return out
}

// AddTokenFiles makes r scrub the token in each file that exists and
// returns the ones it read.
func (r *Redactor) AddTokenFiles(paths ...string) []string {
	var read []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		r.AddToken(string(data))
		read = append(read, p)
	}
	return read
}
