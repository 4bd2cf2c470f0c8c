package cmd

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/ui"
)

func typeInto(w tea.Model, s string) {
	for _, r := range s {
		w.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
}

// The formation wizard checks as you type with the same rules as
// sitecon form, refuses to form while a field is wrong, then writes this
// node's config and shows the other nodes' join lines.
func TestFormWizard(t *testing.T) {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	ctx := ui.NewContext(r, nil, nil)
	ctx.Width, ctx.Height = 120, 40
	dir := t.TempDir()
	var result *formation.Formed
	w := newFormWizard(ctx, []string{"lo"}, dir, false, &result)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	var err error
	if w.Audit, err = audit.Open(auditLog); err != nil {
		t.Fatal(err)
	}
	w.Init()
	next := func() { w.Update(tea.KeyMsg{Type: tea.KeyTab}) }

	typeInto(w, "site 1") // a space is not allowed in a name
	if v := w.View(); !strings.Contains(v, `"site 1" is not a valid name`) {
		t.Fatalf("the name is not checked as typed:\n%s", v)
	}
	w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	typeInto(w, "1")
	next()
	typeInto(w, "l")
	w.Update(tea.KeyMsg{Type: tea.KeyRight}) // completes to lo
	next()
	// The prefix overlaps lo's 127.0.0.0/8.
	for range len(formation.DefaultClusterPrefix) {
		w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	typeInto(w, "127.1.0.0/28")
	if v := w.View(); !strings.Contains(v, "overlaps 127.0.0.0/8 already on lo") {
		t.Fatalf("the overlap is not shown:\n%s", v)
	}
	for range len("127.1.0.0/28") {
		w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	typeInto(w, "10.250.0.0/28")
	next()
	typeInto(w, "node-a, node-b, node-c")
	next()
	next()
	typeInto(w, "node-x")
	if v := w.View(); !strings.Contains(v, "node-x is not one of the nodes") {
		t.Fatalf("a wrong seed is not shown:\n%s", v)
	}
	w.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if result != nil || !strings.Contains(w.View(), "fix the fields marked") {
		t.Fatal("the wizard formed a cluster with a wrong field")
	}
	for range len("node-x") {
		w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	typeInto(w, "node-b")
	w.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if result == nil {
		t.Fatalf("not formed:\n%s", w.View())
	}
	cfg, err := config.Load(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "node-b" || cfg.ClusterName != "site1" || cfg.ClusterInterface != "lo" || cfg.JoinServerIP != "10.250.0.1" {
		t.Fatalf("this node's config: %+v", cfg)
	}
	v := w.View()
	for _, want := range []string{"# node-a", "# node-c", "sitecon form --join -", "sitecon-join.v1."} {
		if !strings.Contains(v, want) {
			t.Errorf("the result lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "# node-b") {
		t.Error("this node needs no join line")
	}

	// At 80 columns the bundles wrap instead of being cut, and what is on
	// screen still decodes; they are kept in a root-only file as well.
	ctx.Width = 80
	v = w.View()
	var nodeA []string
	inNodeA := false
	for _, line := range strings.Split(v, "\n") {
		if strings.Contains(line, "sitecon-join") && len([]rune(line)) > 80 {
			t.Errorf("bundle line wider than the screen: %q", line)
		}
		switch {
		case strings.HasPrefix(line, "# node-a:"):
			inNodeA = true
		case strings.HasPrefix(line, "# node-"):
			inNodeA = false
		}
		if inNodeA {
			nodeA = append(nodeA, line)
		}
	}
	copied, err := formation.BundleFromText(strings.Join(nodeA, "\n"))
	if err != nil {
		t.Fatalf("node-a's block as shown at 80 columns: %v\n%s", err, strings.Join(nodeA, "\n"))
	}
	if b, err := formation.DecodeBundle(copied); err != nil || b.NodeName != "node-a" {
		t.Fatalf("the bundle as shown at 80 columns does not decode: %v\n%s", err, copied)
	}
	// Saved one file per node, root-only, named on screen; each file is
	// what 'sitecon form --join FILE' reads.
	bundles := filepath.Join(dir, "join-bundles")
	if st, err := os.Stat(bundles); err != nil || st.Mode().Perm() != 0o700 || !strings.Contains(strings.ReplaceAll(v, "\n", ""), bundles) {
		t.Fatalf("bundles directory %s: %v (want mode 0700, named on screen)", bundles, err)
	}
	for _, node := range []string{"node-a", "node-c"} {
		file := filepath.Join(bundles, node+".bundle")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%s's bundle not saved: %v", node, err)
		}
		if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600: it carries the token", file, st.Mode())
		}
		text, err := formation.BundleFromText(string(data))
		if b, derr := formation.DecodeBundle(text); err != nil || derr != nil || b.NodeName != node {
			t.Errorf("%s does not hold %s's bundle: %v %v\n%s", file, node, err, derr, data)
		}
	}
	if _, err := os.Stat(filepath.Join(bundles, "node-b.bundle")); err == nil {
		t.Error("this node (node-b) needs no saved bundle")
	}
}

// sitecon form is an action like the others: refused in read-only mode
// with nothing written, and recorded in the audit log when it runs.
func TestFormCLIReadOnlyAndAudit(t *testing.T) {
	dir, auditLog := t.TempDir(), filepath.Join(t.TempDir(), "audit.jsonl")
	run := func(extra ...string) (string, error) {
		root := newRoot()
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"form", "--dir", dir, "--audit-log", auditLog, "--cluster-name", "site1",
			"--interface", "lo", "--no-host-checks", "--node", "node-a", "--node", "node-b", "--node", "node-c"}, extra...))
		err := root.Execute()
		return out.String(), err
	}
	if _, err := run("--readonly"); err == nil || !strings.Contains(err.Error(), "read-only mode") {
		t.Fatalf("read-only form: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused form wrote the config: %v", err)
	}
	if out, err := run(); err != nil {
		t.Fatalf("form: %v\n%s", err, out)
	}
	recs, err := audit.Read(auditLog)
	// The intent before the config is written, the outcome after.
	if err != nil || len(recs) != 2 || recs[0].Outcome != audit.OutcomeIntent || recs[0].ID != recs[1].ID {
		t.Fatalf("audit records %+v, %v", recs, err)
	}
	if r := recs[1]; r.Action != "form" || r.Target != "site1" || r.Outcome != audit.OutcomeDone || !strings.Contains(r.Detail, filepath.Join(dir, "cluster.json")) {
		t.Fatalf("audit record %+v", r)
	}
}

// siteOfThree forms node-a (seed, 10.250.0.1), node-b and node-c and writes
// node-c's files, as node-c's device holds them; it returns node-c's config
// path and the plan.
func siteOfThree(t *testing.T) (string, *formation.FormPlan) {
	t.Helper()
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "site1", Interface: "lo", Prefix: "10.250.0.0/28",
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := plan.Nodes[2].Files(t.TempDir(), "")
	if err == nil {
		err = files.Write()
	}
	if err != nil {
		t.Fatal(err)
	}
	return files.ConfigPath, plan
}

// stateOf is the agent's state directory of the device whose config is
// at config, in the tests: never the machine's own.
func stateOf(config string) string { return filepath.Join(filepath.Dir(config), "state") }

// sitecon runs the CLI in-process; the cluster is out of reach (no
// kubeconfig), as on a device whose seed just died.
func sitecon(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return siteconWithInput(t, "", args...)
}

// siteconWithInput runs sitecon with stdin holding input.
func siteconWithInput(t *testing.T, input string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(input))
	root.SetArgs(append(args, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl")))
	err := root.Execute()
	return out.String(), err
}

// joinAndRender plays the new device: sitecon form --join - with what
// join-info printed pasted on stdin, then sitecon agent render of the
// config it wrote.
func joinAndRender(t *testing.T, text string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	state := stateOf(filepath.Join(dir, "cluster.json"))
	if out, err := siteconWithInput(t, text, "form", "--join", "-", "--dir", dir, "--state-dir", state); err != nil {
		return out, err
	}
	k3sDir := t.TempDir()
	return sitecon(t, "agent", "render", "--config", filepath.Join(dir, "cluster.json"), "--state-dir", state, "--no-host-checks",
		"--k3s-config", filepath.Join(k3sDir, "config.yaml"), "--k3s-data-dir", filepath.Join(k3sDir, "data"))
}

// The seed was moved to node-b (node-c's follower recorded it), then node-a
// replaced by node-x at node-a's address, with a bundle made on node-c: the
// bundle carries the seed in effect, and node-x joins node-b instead of
// initialising a second cluster at its own address.
func TestReplaceBundleAfterSeedMoveJoinsTheSeedInEffect(t *testing.T) {
	configC, plan := siteOfThree(t)
	if err := formation.WriteSeedRecord(formation.Records{Dir: stateOf(configC)}.SeedRecordFile(), formation.SeedRecord{ClusterID: plan.ClusterID,
		ConfigJoinIP: "10.250.0.1", JoinServerIP: "10.250.0.2"}); err != nil {
		t.Fatal(err)
	}
	text, err := sitecon(t, "join-info", "--config", configC, "--state-dir", stateOf(configC), "--role", "server", "--node-name", "node-x",
		"--node-uuid", "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "--node-ip", "10.250.0.1")
	if err != nil {
		t.Fatalf("join-info: %v\n%s", err, text)
	}
	plan2, err := joinAndRender(t, text)
	if err != nil {
		t.Fatalf("join and render: %v\n%s", err, plan2)
	}
	if strings.Contains(plan2, "cluster-init") || !strings.Contains(plan2, `server: "https://10.250.0.2:6443"`) {
		t.Fatalf("node-x must join the seed in effect (node-b, 10.250.0.2), never initialise:\n%s", plan2)
	}
}

// node-a is the seed in effect: a bundle that hands node-a's address to a
// new device would make it the join address of a cluster it never was part
// of. Making such a bundle is refused with the command to run; a bundle for
// an existing cluster whose join address is the new node's own is refused
// by form --join; neither ever renders cluster-init.
func TestReplaceBundleForTheSeedNeverInitialises(t *testing.T) {
	configC, plan := siteOfThree(t)
	const uuid = "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	text, err := sitecon(t, "join-info", "--config", configC, "--state-dir", stateOf(configC), "--role", "server", "--node-name", "node-x",
		"--node-uuid", uuid, "--node-ip", "10.250.0.1")
	if err == nil {
		rendered, rerr := joinAndRender(t, text)
		t.Fatalf("a bundle at the seed's own address was made (render: %v):\n%s", rerr, rendered)
	}
	if !strings.Contains(err.Error(), "sitecon seed") {
		t.Fatalf("the refusal does not say how to move the seed: %v", err)
	}
	// A bundle made on a cluster that exists, naming its own address as the
	// join address (an older sitecon, or an edited bundle).
	b := plan.Nodes[0]
	b.NodeName, b.NodeUUID, b.ExistingCluster = "node-x", uuid, true
	line, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := joinAndRender(t, "sitecon form --join "+line)
	if err == nil || strings.Contains(out, "cluster-init") {
		t.Fatalf("form --join accepted an existing cluster's bundle that makes the node its own seed: %v\n%s", err, out)
	}
	if !strings.Contains(err.Error(), "existing cluster") {
		t.Fatalf("refusal without its reason: %v", err)
	}
}

// sitecon form on the seed prints each other node's bundle alone on its
// line (never inside a command) and saves it root-only; on the other node
// 'sitecon form --join FILE' and 'sitecon form --join -' (pasted) both
// write that node's config. A bundle given on the command line still
// works, with a warning; text holding two bundles is refused, nothing
// written.
func TestJoinBundleFromFileAndStdin(t *testing.T) {
	seedDir := t.TempDir()
	out, err := sitecon(t, "form", "--cluster-name", "site1", "--interface", "lo", "--prefix", "10.250.0.0/28", "--no-host-checks",
		"--node", "node-a", "--node", "node-b", "--node", "node-c", "--dir", seedDir)
	if err != nil {
		t.Fatalf("form: %v\n%s", err, out)
	}
	if strings.Contains(out, "--join sitecon-join") {
		t.Errorf("a bundle is printed inside a command line:\n%s", out)
	}
	fileB := filepath.Join(seedDir, "join-bundles", "node-b.bundle")
	if !strings.Contains(out, fileB) {
		t.Errorf("the output does not name node-b's saved bundle %s:\n%s", fileB, out)
	}

	joined := func(how string, dir string) {
		t.Helper()
		cfg, err := config.Load(filepath.Join(dir, "cluster.json"))
		if err != nil || cfg.ClusterName != "site1" {
			t.Fatalf("%s: no config written: %+v %v", how, cfg, err)
		}
	}
	dirB := t.TempDir()
	if out, err := sitecon(t, "form", "--join", fileB, "--dir", dirB, "--state-dir", stateOf(filepath.Join(dirB, "cluster.json"))); err != nil {
		t.Fatalf("--join FILE: %v\n%s", err, out)
	}
	joined("--join FILE", dirB)

	// What the seed printed for node-c, pasted.
	_, block, _ := strings.Cut(out, "# node-c:")
	dirC := t.TempDir()
	if out, err := siteconWithInput(t, "# node-c:"+block, "form", "--join", "-", "--dir", dirC, "--state-dir", stateOf(filepath.Join(dirC, "cluster.json"))); err != nil {
		t.Fatalf("--join -: %v\n%s", err, out)
	}
	joined("--join -", dirC)

	// Both nodes' blocks pasted at once: refused, nothing written.
	dirX := t.TempDir()
	_, both, _ := strings.Cut(out, "# node-b:")
	if out, err := siteconWithInput(t, "# node-b:"+both, "form", "--join", "-", "--dir", dirX, "--state-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "2 join bundles") {
		t.Fatalf("two bundles on stdin should be refused: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(dirX); len(entries) != 0 {
		t.Errorf("a refused join wrote %d files", len(entries))
	}
	if _, err := siteconWithInput(t, "", "form", "--join", "-", "--dir", dirX, "--state-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no sitecon join bundle") {
		t.Errorf("empty stdin: %v", err)
	}

	data, err := os.ReadFile(fileB)
	if err != nil {
		t.Fatal(err)
	}
	literal, err := formation.BundleFromText(string(data))
	if err != nil {
		t.Fatal(err)
	}
	dirL := t.TempDir()
	out, err = sitecon(t, "form", "--join", literal, "--dir", dirL, "--state-dir", stateOf(filepath.Join(dirL, "cluster.json")), "--force")
	if err != nil || !strings.Contains(out, "shell history") {
		t.Fatalf("a bundle on the command line should work, with a warning: %v\n%s", err, out)
	}
	joined("--join BUNDLE", dirL)
}

// sitecon form --join on a device that was removed, under an older agent
// that kept its records beside the config: the records are copied to the
// agent's state directory, the removed marker is cleared there and beside
// the config (the device comes back, under either release), the formed marker of the running cluster written there; nothing
// is left beside the config to be read as a record.
func TestJoinKeepsTheRecordsInTheStateDirectory(t *testing.T) {
	configC, plan := siteOfThree(t)
	text, err := sitecon(t, "join-info", "--config", configC, "--state-dir", stateOf(configC), "--role", "server", "--node-name", "node-x",
		"--node-uuid", "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "--node-ip", "10.250.0.5")
	if err != nil {
		t.Fatalf("join-info: %v\n%s", err, text)
	}
	dir := t.TempDir()
	old := filepath.Join(dir, "removed.json")
	if err := formation.MarkRemoved(old, formation.RemovedMarker{ClusterID: plan.ClusterID, NodeName: "node-x", Evidence: "its Node was deleted"}); err != nil {
		t.Fatal(err)
	}
	records := formation.Records{Dir: filepath.Join(t.TempDir(), "state")}
	out, err := siteconWithInput(t, text, "form", "--join", "-", "--dir", dir, "--state-dir", records.Dir)
	if err != nil {
		t.Fatalf("form --join: %v\n%s", err, out)
	}
	if !strings.Contains(out, "removed marker copied from "+old) {
		t.Errorf("the output does not say the old record was copied:\n%s", out)
	}
	for _, path := range []string{old, records.RemovedMarkerFile()} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s after the join: %v, want none", path, err)
		}
	}
	m, ok, err := formation.ReadFormedMarker(records.FormedMarkerFile())
	if !ok || err != nil || m.NodeName != "node-x" || m.ClusterID != plan.ClusterID {
		t.Errorf("formed marker in the state directory: %+v ok=%v err=%v", m, ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "formed.json")); !os.IsNotExist(err) {
		t.Errorf("a formed marker beside the config: %v", err)
	}
	if st, err := os.Stat(records.Dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("state directory %v %v, want mode 0700", st, err)
	}
}
