package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

func TestRedactorScrubs(t *testing.T) {
	const token = "K10" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "::server:s3cretPassw0rd"
	const secret = "hunter2-database-password"
	r := NewRedactor()
	r.AddToken(token)
	r.AddValue(secret + "\n")
	r.AddValue("short") // too short to scrub by value
	cases := []struct {
		name, file, in string
		gone           []string
		kept           []string
	}{
		{name: "token in a log line", file: "local/logs/agent.log", in: "joining with token " + token + " now\n",
			gone: []string{token, "s3cretPassw0rd"}, kept: []string{"joining with token", "now"}},
		{name: "password alone in a log", file: "k3s.log", in: "password is s3cretPassw0rd.\n", gone: []string{"s3cretPassw0rd"}},
		{name: "a token we were not told of, by shape", file: "x.log", in: "server K10" + strings.Repeat("f", 64) + "::server:otherpass ok",
			gone: []string{"otherpass"}, kept: []string{"server", "ok"}},
		{name: "key: value in text", file: "x.log", in: "token: abcdefXYZ1\npassword=letmein99 user=bob\n",
			gone: []string{"abcdefXYZ1", "letmein99"}, kept: []string{"user=bob", "token: " + Redacted}},
		{name: "--token flag", file: "x.log", in: "k3s server --token unknownvalue1 --agent-token=other22value\n",
			gone: []string{"unknownvalue1", "other22value"}},
		{name: "a Secret's value, decoded and in base64", file: "cluster/events.json",
			in:   `[{"message":"db says ` + secret + `","note":"` + base64.StdEncoding.EncodeToString([]byte(secret+"\n")) + `"}]`,
			gone: []string{secret, base64.StdEncoding.EncodeToString([]byte(secret + "\n"))}, kept: []string{"db says"}},
		{name: "token fields in JSON, a path kept", file: "local/state/seed.json",
			in:   `{"cluster_token":"abc def ghi","token_file":"/persist/t","encrypted_cluster_token":"Zm9vYmFy","userData":"#cloud-config\npassword: x","n":5}`,
			gone: []string{"abc def ghi", "Zm9vYmFy", "#cloud-config"}, kept: []string{"/persist/t", `"n": 5`}},
		{name: "k3s's own stars left alone", file: "cluster/nodes.json", in: `{"a":"[\"--token\",\"********\"]"}`, kept: []string{"********"}},
		{name: "short values are not scrubbed by value", file: "x.log", in: "a short story", kept: []string{"short"}},
		{name: "JSON lines", file: "local/audit.jsonl", in: `{"detail":"used ` + secret + `"}` + "\n" + `{"password":"x1"}` + "\nnot json " + secret + "\n",
			gone: []string{secret, `"x1"`}, kept: []string{"not json", `{"detail":"used [redacted]"}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, n := r.Scrub(tc.file, []byte(tc.in))
			for _, g := range tc.gone {
				if bytes.Contains(out, []byte(g)) {
					t.Errorf("%q is still in it:\n%s", g, out)
				}
			}
			for _, k := range tc.kept {
				if !bytes.Contains(out, []byte(k)) {
					t.Errorf("%q was lost:\n%s", k, out)
				}
			}
			if len(tc.gone) > 0 && n == 0 {
				t.Errorf("nothing counted as redacted")
			}
			if strings.HasSuffix(tc.file, ".json") && json.Valid([]byte(tc.in)) && !json.Valid(out) {
				t.Errorf("the JSON no longer parses:\n%s", out)
			}
		})
	}
}

func TestBuildCapsInOrderAndListsTheCut(t *testing.T) {
	items := []Item{
		{Name: "cluster/status.json", Data: []byte(`{"a":1}`)},
		{Name: "cluster/events.json", Data: bytes.Repeat([]byte("x"), 60)},
		{Name: "local/logs/agent.log", Data: []byte("line one\nline two\nline three\n"), Tail: true},
		{Name: "local/state/node.json", Data: []byte(`{}`)},
	}
	a := Build("b", items, []Missing{{Item: "agent of node-c", Why: "did not answer"}}, NewRedactor(), Manifest{MaxBytes: 40})
	m := a.Manifest
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Name)
	}
	// status (9 bytes once indented) fits; events (60) does not and is
	// left out; the log keeps its newest whole lines; node.json fits.
	if got := strings.Join(files, " "); got != "cluster/status.json local/logs/agent.log local/state/node.json" {
		t.Fatalf("files kept: %s", got)
	}
	if len(m.Cut) != 2 || m.Cut[0].File != "cluster/events.json" || m.Cut[0].Kept != 0 || m.Cut[1].File != "local/logs/agent.log" || m.Cut[1].Kept == 0 {
		t.Fatalf("cut: %+v", m.Cut)
	}
	if m.Complete {
		t.Errorf("a bundle with a part missing and files cut says complete")
	}
	var total int64
	for _, f := range m.Files {
		total += f.Bytes
	}
	if total > 40 {
		t.Errorf("%d bytes kept under a cap of 40", total)
	}
	got := readArchive(t, a)
	if !strings.HasPrefix(string(got["b/local/logs/agent.log"]), "line t") {
		t.Errorf("the log's tail starts mid-line or lost its newest lines: %q", got["b/local/logs/agent.log"])
	}
	var back Manifest
	if err := json.Unmarshal(got["b/manifest.json"], &back); err != nil || len(back.Missing) != 1 || back.Note != ReadOnlyNote {
		t.Errorf("manifest: %v %+v", err, back)
	}
}

// readArchive is every file of the archive by name.
func readArchive(t *testing.T, a *Archive) map[string][]byte {
	t.Helper()
	data, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return readTarGz(t, data)
}

func readTarGz(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// A source that overruns its deadline is missing, the others arrive, and
// the whole takes about the deadline, not the slow source's time.
func TestCollectListsWhatOverrunsItsDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	sources := []Source{
		{Name: "slow", Deadline: 200 * time.Millisecond, Collect: func(ctx context.Context) ([]Item, []Missing, error) {
			<-release // ignores its context, as a stuck read might
			return nil, nil, nil
		}},
		{Name: "fails", Deadline: time.Second, Collect: func(context.Context) ([]Item, []Missing, error) {
			return nil, nil, errors.New("forbidden")
		}},
		{Name: "fine", Deadline: time.Second, Collect: func(context.Context) ([]Item, []Missing, error) {
			return []Item{{Name: "fine.txt", Data: []byte("ok")}}, nil, nil
		}},
	}
	start := time.Now()
	items, missing := Collect(context.Background(), sources)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s: the slow source held the bundle", took)
	}
	if len(items) != 1 || items[0].Name != "fine.txt" {
		t.Errorf("items: %+v", items)
	}
	want := map[string]string{"slow": "did not finish within its deadline of 200ms", "fails": "forbidden"}
	if len(missing) != 2 {
		t.Fatalf("missing: %+v", missing)
	}
	for _, m := range missing {
		if want[m.Item] != m.Why {
			t.Errorf("missing %q: %q, want %q", m.Item, m.Why, want[m.Item])
		}
	}
}

// An agent that accepts the connection and never answers is missing
// after the node's deadline; one that answers arrives.
func TestAgentSourcesWithADeadlinePerNode(t *testing.T) {
	hang := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer stuck.Close()
	defer close(hang)
	fine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" || r.Method != http.MethodGet {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, "cluster:abc")
	}))
	defer fine.Close()
	// Every node is dialled on the status port; the test's dialer sends
	// each to its server.
	servers := map[string]string{"127.0.0.2": stuck.Listener.Addr().String(), "127.0.0.3": fine.Listener.Addr().String()}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		return (&net.Dialer{}).DialContext(ctx, network, servers[host])
	}
	sources := agentSources([]NodeAddress{{"node-b", "127.0.0.2"}, {"node-c", "127.0.0.3"}}, 300*time.Millisecond, dial)
	start := time.Now()
	items, missing := Collect(context.Background(), sources)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s", took)
	}
	if len(missing) != 1 || !strings.Contains(missing[0].Item, "node-b") {
		t.Errorf("missing: %+v", missing)
	}
	if len(items) != 1 || items[0].Name != "agents/node-c.json" || !bytes.Contains(items[0].Data, []byte(`"status": "cluster:abc"`)) {
		t.Errorf("items: %+v", items)
	}
}

// On a node, a log or directory that does not exist is missing, not an
// error; the rest arrive.
func TestLocalSourcesListWhatDoesNotExist(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	must(t, os.MkdirAll(filepath.Join(state, "sub"), 0o700))
	must(t, os.WriteFile(filepath.Join(state, "node.json"), []byte(`{"phase":"Running"}`), 0o600))
	must(t, os.WriteFile(filepath.Join(state, "sub", "pos.json"), []byte(`{}`), 0o600))
	must(t, os.Symlink("/etc/passwd", filepath.Join(state, "link")))
	agentLog := filepath.Join(dir, "agent.log")
	must(t, os.WriteFile(agentLog, []byte(strings.Repeat("old line\n", 100)+"newest line\n"), 0o600))
	l := Local{StateDir: state, AgentLog: agentLog, K3sLog: filepath.Join(dir, "none", "k3s.log"), AuditLog: filepath.Join(dir, "audit.jsonl"), TailBytes: 30}
	items, missing := Collect(context.Background(), localSources(l, time.Second))
	names := map[string]string{}
	for _, it := range items {
		names[it.Name] = string(it.Data)
	}
	if _, ok := names["local/state/node.json"]; !ok {
		t.Errorf("state file missing: %v", names)
	}
	if _, ok := names["local/state/sub/pos.json"]; !ok {
		t.Errorf("nested state file missing: %v", names)
	}
	if _, ok := names["local/state/link"]; ok {
		t.Errorf("a symbolic link was followed")
	}
	if got := names["local/logs/agent.log"]; !strings.HasSuffix(got, "newest line\n") || len(got) > 30 || strings.HasPrefix(got, "ld") {
		t.Errorf("agent log tail: %q", got)
	}
	var why []string
	for _, m := range missing {
		why = append(why, m.Why)
	}
	if len(missing) != 2 || !strings.Contains(strings.Join(why, "|"), "k3s.log does not exist") || !strings.Contains(strings.Join(why, "|"), "audit.jsonl does not exist") {
		t.Errorf("missing: %+v", missing)
	}
	// Not a node: only the audit log is asked for.
	if got := localSources(Local{StateDir: filepath.Join(dir, "nostate"), AuditLog: "x"}, time.Second); len(got) != 1 {
		t.Errorf("a machine that is no node: %d sources", len(got))
	}
}

func TestWriteFileIsAtomicAndPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.tar.gz")
	a := Build("d", []Item{{Name: "x.txt", Data: []byte("x")}}, nil, NewRedactor(), Manifest{})
	must(t, a.WriteFile(path))
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", st, err)
	}
	data, _ := os.ReadFile(path)
	got := readTarGz(t, data)
	if string(got["d/x.txt"]) != "x" || len(got) != 2 || !a.Manifest.Complete {
		t.Errorf("archive: %v complete %v", got, a.Manifest.Complete)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Issue 37: the state directory's token record holds a SHA-256 of the
// cluster token, which a bundle that leaves the site must not carry (a
// fast hash lets the token be tried offline). Its dates stay: they say
// since when the node applies its token.
func TestBundleLeavesTheTokenFingerprintOut(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	must(t, os.MkdirAll(state, 0o700))
	const fp = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	must(t, os.WriteFile(filepath.Join(state, config.TokenSeenFile),
		[]byte(`{"fingerprint":"`+fp+`","since":"2026-11-01T00:00:00Z","source":"first applied by this node's agent"}`), 0o600))
	items, _ := Collect(context.Background(), localSources(Local{StateDir: state, AuditLog: filepath.Join(dir, "audit.jsonl")}, time.Second))
	found := false
	for _, it := range items {
		if strings.Contains(string(it.Data), fp) {
			t.Errorf("%s carries the token's fingerprint: %s", it.Name, it.Data)
		}
		if it.Name == "local/state/"+config.TokenSeenFile {
			found = true
			if !strings.Contains(string(it.Data), "2026-11-01T00:00:00Z") {
				t.Errorf("the record's date is gone: %s", it.Data)
			}
		}
	}
	if !found {
		t.Error("the token record is not in the bundle at all: its dates are a support engineer's evidence")
	}
}
