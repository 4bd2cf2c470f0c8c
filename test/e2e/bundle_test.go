package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/bundle"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// takeBundle runs sitecon bundle with args and returns the archive's
// files by their path below its directory, its manifest, what it
// printed and how long it took. A bundle must be written whatever is
// missing: a non-zero exit fails the test.
func takeBundle(t *testing.T, args ...string) (map[string][]byte, bundle.Manifest, string, time.Duration) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sitecon, append([]string{"bundle", "-o", out}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("sitecon bundle: %v after %s\n%s", err, took, output.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o600 {
		t.Errorf("the archive's mode is %v, want 0600", st.Mode().Perm())
	}
	files := map[string][]byte{}
	for name, b := range readTarGz(t, data) {
		_, rest, ok := strings.Cut(name, "/")
		if !ok || !strings.HasPrefix(name, "sitecon-bundle-") {
			t.Errorf("%s is not under the bundle's directory", name)
		}
		files[rest] = b
	}
	var m bundle.Manifest
	if err := json.Unmarshal(files[bundle.ManifestName], &m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, files[bundle.ManifestName])
	}
	return files, m, output.String(), took
}

// missingItem is the manifest's entry whose item mentions what, if any.
func missingItem(m bundle.Manifest, what string) (bundle.Missing, bool) {
	for _, x := range m.Missing {
		if strings.Contains(x.Item, what) {
			return x, true
		}
	}
	return bundle.Missing{}, false
}

// waitAgentStatus waits until node's agent answers GET /status with its
// cluster's id (a server whose agent has read its Node).
func waitAgentStatus(t *testing.T, site *sitebox.TestSite, node string) {
	t.Helper()
	addr, err := site.StatusAddr(node)
	if err != nil {
		t.Fatal(err)
	}
	until(t, 90*time.Second, node+"'s agent answering /status with its cluster", func() (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error(), false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), string(b) == "cluster:"+site.ClusterID
	}, func(s string) string { return "last: " + s })
}

// A bundle taken while node-c is down arrives within its deadline: node-c's
// agent is listed as missing, node-a's and node-b's answers and every
// cluster part are there; neither the cluster token nor any Secret's value
// is in any file, although the cluster holds them in an event and the
// agent's log; and the collection only reads.
func TestBundleWithANodeFailed(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 3*time.Minute)
	cs := clientset(t, site)
	ctx := context.Background()
	logDir, appsDir := t.TempDir(), t.TempDir()
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
		t.Cleanup(agents[n].stop)
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		waitAgentStatus(t, site, n)
	}

	// Secrets where a careless app or log would put them: a Secret's
	// value in an event's message, the token in the agent's log.
	token, err := site.ClusterToken()
	if err != nil {
		t.Fatal(err)
	}
	secretValue := fmt.Sprintf("bundle-secret-%d", time.Now().UnixNano())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bundle-test", Namespace: kube.AppNamespace},
		Data: map[string][]byte{"password": []byte(secretValue), "note": []byte("a multi-line\nsecret value\n")}}
	if _, err := cs.CoreV1().Secrets(kube.AppNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Secrets(kube.AppNamespace).Delete(context.Background(), "bundle-test", metav1.DeleteOptions{})
	})
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "bundle-test-", Namespace: kube.AppNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: kube.AppNamespace, Name: "leaky"},
		Reason:         "Leaked", Message: "connecting with " + secretValue + " and " + base64.StdEncoding.EncodeToString([]byte(secretValue)),
		Type: corev1.EventTypeWarning, LastTimestamp: metav1.Now(), FirstTimestamp: metav1.Now()}
	created, err := cs.CoreV1().Events(kube.AppNamespace).Create(ctx, event, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Events(kube.AppNamespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	appendFile(t, filepath.Join(logDir, "node-a.log"), "level=DEBUG msg=\"joining\" with="+token.Reveal()+"\n")
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	appendFile(t, auditLog, `{"time":"2026-11-26T03:00:00Z","user":"root","uid":0,"action":"cordon","target":"node-b","outcome":"done"}`+"\n")

	// node-c is lost with its agent; its address goes silent.
	site.RecoverOnCleanup(t, "node-c")
	agents["node-c"].lose()
	if err := site.Fail("node-c"); err != nil {
		t.Fatal(err)
	}

	const timeout = 150 * time.Second
	files, m, output, took := takeBundle(t, "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog,
		"--timeout", timeout.String(), "--api-timeout", "30s", "--node-timeout", "3s",
		"--state-dir", filepath.Join(logDir, "node-a-state"), "--agent-socket", filepath.Join(logDir, "node-a.sock"),
		"--agent-log", filepath.Join(logDir, "node-a.log"), "--k3s-log", filepath.Join(logDir, "no-k3s.log"),
		"--k3s-data-dir", t.TempDir(), "--config", filepath.Join(t.TempDir(), "none.json"),
		"--cluster-token-file", site.ClusterTokenFile())
	t.Logf("took %s\n%s", took, output)
	if took >= timeout {
		t.Errorf("the bundle took %s, past its --timeout %s", took, timeout)
	}

	// node-c's agent is missing, for its deadline; the others answered.
	if x, ok := missingItem(m, "agent of node-c"); !ok || !strings.Contains(x.Why, "deadline of 3s") && !strings.Contains(x.Why, "did not answer") {
		t.Errorf("node-c's agent is not listed as missing for its deadline: %+v (%+v)", x, m.Missing)
	}
	for _, n := range []string{"node-a", "node-b"} {
		var a bundle.AgentAnswer
		if err := json.Unmarshal(files["agents/"+n+".json"], &a); err != nil || a.Status != "cluster:"+site.ClusterID {
			t.Errorf("%s's agent's answer: %v %+v", n, err, a)
		}
		if _, ok := missingItem(m, "agent of "+n); ok {
			t.Errorf("%s's agent listed as missing: %+v", n, m.Missing)
		}
	}
	for _, f := range []string{"cluster/status.json", "cluster/doctor.json", "cluster/nodes.json", "cluster/events.json", "cluster/events.txt",
		"cluster/longhorn-volumes.json", "cluster/longhorn-replicas.json", "cluster/longhorn-engines.json", "cluster/vmis.json",
		"cluster/configmaps.json", "local/audit.jsonl", "local/logs/agent.log"} {
		if len(files[f]) == 0 {
			t.Errorf("%s is not in the bundle (missing: %+v)", f, m.Missing)
		}
	}
	if _, ok := files["cluster/etcd-members.json"]; !ok {
		if _, listed := missingItem(m, "etcd members"); !listed {
			t.Errorf("the etcd member list is neither in the bundle nor listed as missing")
		}
	}
	if x, ok := missingItem(m, "k3s's log"); !ok || !strings.Contains(x.Why, "does not exist") {
		t.Errorf("a k3s log that does not exist is not listed as missing: %+v", m.Missing)
	}
	if !hasPrefix(files, "local/state/") {
		t.Errorf("the agent's state directory is not in the bundle")
	}
	if m.Complete {
		t.Errorf("the manifest says complete with node-c down")
	}
	// The status report is sitecon status -o json's, and sees node-c.
	var status struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(files["cluster/status.json"], &status); err != nil || !strings.Contains(string(files["cluster/status.json"]), "node-c") {
		t.Errorf("status.json: %v\n%s", err, tail(string(files["cluster/status.json"]), 20))
	}
	// Events oldest first.
	var events []corev1.Event
	if err := json.Unmarshal(files["cluster/events.json"], &events); err != nil || len(events) == 0 {
		t.Fatalf("events.json: %v", err)
	}
	for i := 1; i < len(events); i++ {
		if bundle.EventTime(&events[i]).Before(bundle.EventTime(&events[i-1])) {
			t.Errorf("events out of order at %d: %s before %s", i, bundle.EventTime(&events[i-1]), bundle.EventTime(&events[i]))
			break
		}
	}

	// No secret anywhere; and where they were, the redaction shows.
	secrets, err := cs.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	needles := secretNeedles("the cluster token", token.Reveal())
	_, password := config.ParseToken(token.Reveal())
	needles = append(needles, secretNeedles("the cluster token's password", password)...)
	checked := 0
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if s.Type == corev1.SecretTypeServiceAccountToken && (k == corev1.ServiceAccountNamespaceKey || k == corev1.ServiceAccountRootCAKey) {
				continue // a namespace's name and the cluster's CA: public, in the bundle by right
			}
			checked++
			needles = append(needles, secretNeedles(fmt.Sprintf("Secret %s/%s's %s", s.Namespace, s.Name, k), string(v))...)
		}
	}
	if checked == 0 {
		t.Fatal("no Secret value to look for: the test checks nothing")
	}
	for name, data := range files {
		for _, n := range needles {
			if bytes.Contains(data, []byte(n.value)) {
				t.Errorf("%s holds %s", name, n.what)
			}
		}
	}
	if !bytes.Contains(files["local/logs/agent.log"], []byte("with="+bundle.Redacted)) {
		t.Errorf("the token in the agent's log was not redacted where it stood:\n%s", tail(string(files["local/logs/agent.log"]), 5))
	}
	if !bytes.Contains(files["cluster/events.txt"], []byte("connecting with "+bundle.Redacted+" and "+bundle.Redacted)) {
		t.Errorf("the Secret's value in an event was not redacted where it stood")
	}
	if m.Redacted["local/logs/agent.log"] == 0 || m.Redacted["cluster/events.json"] == 0 {
		t.Errorf("the manifest does not count the redactions: %v", m.Redacted)
	}

	// The collection only reads: run in process with every request counted.
	var verbs verbCounter
	cfg := rest.CopyConfig(site.Config)
	cfg.Wrap(verbs.wrap)
	clients, err := kube.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a := bundle.Take(tctx, bundle.Options{Clients: clients, APIWait: 30 * time.Second, NodeTimeout: 3 * time.Second,
		Local: bundle.Local{AuditLog: auditLog}})
	verbs.assertReadOnly(t)
	if _, ok := missingItem(a.Manifest, "agent of node-c"); !ok {
		t.Errorf("in process: node-c's agent not missing: %+v", a.Manifest.Missing)
	}
}

// With the cluster API unreachable, the bundle is still written: it says
// the cluster's objects and the status report are missing and why, and
// holds the doctor's report (which says the API is unreachable), the
// agents given by --node and this machine's files.
func TestBundleWithTheAPIDown(t *testing.T) {
	site := sitebox.Shared(t)
	logDir, appsDir := t.TempDir(), t.TempDir()
	a := startSiteAgent(t, site, "node-a", appsDir, logDir)
	t.Cleanup(a.stop)
	waitAgentStatus(t, site, "node-a")
	addr, err := site.StatusAddr("node-a")
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(addr)

	// A kubeconfig whose API server is gone: its port refuses.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	kc, err := clientcmd.LoadFromFile(site.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + dead
	}
	kubeconfig := filepath.Join(t.TempDir(), "dead.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	const timeout = 120 * time.Second
	files, m, output, took := takeBundle(t, "--kubeconfig", kubeconfig, "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl"),
		"--timeout", timeout.String(), "--api-timeout", "10s", "--node-timeout", "3s", "--node", "node-a="+host,
		"--state-dir", filepath.Join(logDir, "node-a-state"), "--agent-socket", filepath.Join(logDir, "node-a.sock"),
		"--agent-log", filepath.Join(logDir, "node-a.log"), "--k3s-log", filepath.Join(logDir, "no-k3s.log"),
		"--k3s-data-dir", t.TempDir(), "--config", filepath.Join(t.TempDir(), "none.json"))
	t.Logf("took %s\n%s", took, output)
	if took >= timeout {
		t.Errorf("the bundle took %s, past its --timeout %s", took, timeout)
	}
	x, ok := missingItem(m, "the cluster's objects")
	if !ok || !strings.Contains(x.Why, dead) {
		t.Errorf("the cluster's objects are not listed as missing with the API's address: %+v", m.Missing)
	}
	if x, ok := missingItem(m, "status report"); !ok || !strings.Contains(x.Why, "did not answer") {
		t.Errorf("the status report is not listed as missing with why: %+v", m.Missing)
	}
	if !strings.Contains(output, "missing: the cluster's objects") {
		t.Errorf("the command does not say what is missing:\n%s", output)
	}
	if !bytes.Contains(files["cluster/doctor.json"], []byte("SC-API-UNREACHABLE")) {
		t.Errorf("the doctor's report is not there, or does not say the API is unreachable:\n%s", tail(string(files["cluster/doctor.json"]), 10))
	}
	var ans bundle.AgentAnswer
	if err := json.Unmarshal(files["agents/node-a.json"], &ans); err != nil || ans.Node != "node-a" {
		t.Errorf("node-a's agent, given by --node, was not asked: %v %+v", err, m.Missing)
	}
	if len(files["local/logs/agent.log"]) == 0 || !hasPrefix(files, "local/state/") {
		t.Errorf("this node's files are not in a bundle taken with the API down")
	}
	if _, ok := files["cluster/nodes.json"]; ok {
		t.Errorf("nodes.json from an API that does not answer")
	}
}

// With etcd without quorum (two of three members stopped, the API server
// up but unable to serve a read), the bundle still arrives within its
// deadline: the cluster's objects are missing with why (or, if the API
// server served them from its cache, the manifest says it is not ready and
// what it served may be old), the doctor's report says the API is
// unreachable, and the agent named with --node answers.
func TestBundleWhenEtcdLosesQuorum(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 3*time.Minute)
	logDir, appsDir := t.TempDir(), t.TempDir()
	a := startSiteAgent(t, site, "node-a", appsDir, logDir)
	t.Cleanup(a.stop)
	waitAgentStatus(t, site, "node-a")
	addr, err := site.StatusAddr("node-a")
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(addr)
	t.Cleanup(func() {
		for _, node := range []string{"node-b", "node-c"} {
			if err := site.StartEtcdMember(node); err != nil {
				t.Errorf("etcd of %s: %v", node, err)
			}
		}
		site.WaitSettled(t, 3*time.Minute)
	})
	for _, node := range []string{"node-b", "node-c"} {
		if err := site.StopEtcdMember(node); err != nil {
			t.Fatal(err)
		}
	}

	const timeout = 150 * time.Second
	files, m, output, took := takeBundle(t, "--kubeconfig", site.Kubeconfig(), "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl"),
		"--timeout", timeout.String(), "--api-timeout", "10s", "--node-timeout", "3s", "--node", "node-a="+host,
		"--state-dir", filepath.Join(logDir, "node-a-state"), "--agent-socket", filepath.Join(logDir, "node-a.sock"),
		"--agent-log", filepath.Join(logDir, "node-a.log"), "--k3s-log", filepath.Join(logDir, "no-k3s.log"),
		"--k3s-data-dir", t.TempDir(), "--config", filepath.Join(t.TempDir(), "none.json"))
	t.Logf("took %s\n%s\nnotes: %q", took, output, m.Notes)
	if took >= timeout {
		t.Errorf("the bundle took %s, past its --timeout %s", took, timeout)
	}
	_, objectsMissing := missingItem(m, "the cluster's objects")
	notReady := strings.Contains(strings.Join(m.Notes, "\n"), "does not say it is ready")
	if !objectsMissing && !notReady {
		t.Errorf("without etcd quorum the bundle neither lists the cluster's objects as missing nor notes the API server is not ready: missing %+v, notes %q", m.Missing, m.Notes)
	}
	if !bytes.Contains(files["cluster/doctor.json"], []byte("SC-API-UNREACHABLE")) {
		t.Errorf("the doctor's report is not there, or does not say the API cannot be read:\n%s", tail(string(files["cluster/doctor.json"]), 10))
	}
	if _, ok := files["agents/node-a.json"]; !ok {
		t.Errorf("node-a's agent, given by --node, is not in the bundle: %+v", m.Missing)
	}
	if m.Complete {
		t.Errorf("the manifest says complete without etcd quorum")
	}
}

// needle is a secret the archive is searched for, and what it is.
type needle struct{ what, value string }

// secretNeedles are the forms of a secret value the archive is searched
// for: as written, trimmed, and in base64. Values shorter than the
// bundle scrubs by value are not looked for (bundle.MinSecretBytes says why).
func secretNeedles(what, v string) []needle {
	var out []needle
	for _, s := range []string{v, strings.TrimSpace(v)} {
		if len(s) < bundle.MinSecretBytes {
			continue
		}
		out = append(out, needle{what, s}, needle{what + " in base64", base64.StdEncoding.EncodeToString([]byte(s))})
	}
	return out
}

func hasPrefix(files map[string][]byte, prefix string) bool {
	for name := range files {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// readTarGz is every file of a tar.gz by name.
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
