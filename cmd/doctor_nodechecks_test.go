package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodecheck"
	"github.com/sitecon/sitecon/test/testcert"
	"github.com/sitecon/sitecon/test/threadholder"
)

// nodeChecksSite is a cluster config for node-b at base.1 and the key its
// agents sign with; each agent is a real report server on its own
// loopback address.
type nodeChecksSite struct {
	dir, configPath, base string
	key                   config.LifeKey
}

func newNodeChecksSite(t *testing.T) *nodeChecksSite {
	t.Helper()
	dir := t.TempDir()
	const token = "Qw8Er4Ty6Ui2Op0As5Df7Gh9Jk1Lz3Xc8Vb6Nm4Qa2Ws7Ed5Rf9Tg1Yh3Uj0Ik8Ol6"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("127.78.%d", mrand.IntN(250)+1)
	cfg := config.Config{ClusterName: "site1", ClusterID: "5a1e2b3c-8c4b-4f8e-9a55-2b1c3d4e5f60", ClusterInterface: "lo",
		ClusterIPPrefix: base + ".1/29", JoinServerIP: base + ".1", TokenFile: tokenFile, NodeName: "node-b",
		NodeUUID: "00000000-0000-4000-8000-000000000002"}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &nodeChecksSite{dir: dir, configPath: filepath.Join(dir, "cluster.json"), base: base}
	if err := os.WriteFile(s.configPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if s.key, err = config.NewLifeKey(cfg.ClusterID, config.Secret(token)); err != nil {
		t.Fatal(err)
	}
	return s
}

// serve runs node's real report server at base.host until the test ends.
func (s *nodeChecksSite) serve(t *testing.T, host int, node string, report func() nodestate.NodeReport) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("%s.%d", s.base, host), fmt.Sprint(config.StatusPort)))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: statusserver.WithNodeReport(http.NotFoundHandler(), statusserver.NodeReportHandler(s.key, node, report)),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
}

// diagnose runs sitecon doctor's own options with this site's config
// (no kubeconfig: the cluster API cannot be read) and returns the
// findings of id.
func (s *nodeChecksSite) diagnose(t *testing.T) doctor.Report {
	t.Helper()
	g := &globalFlags{kubeconfig: filepath.Join(s.dir, "no-kubeconfig")}
	opts := doctorOptions(g, slog.New(slog.DiscardHandler), filepath.Join(s.dir, "no-k3s"), filepath.Join(s.dir, "no-socket"), s.configPath, time.Second)
	return doctor.Diagnose(context.Background(), opts)
}

func findingsOf(r doctor.Report, id string) []doctor.Finding {
	var out []doctor.Finding
	for _, f := range r.Findings {
		if f.ID == id {
			out = append(out, f)
		}
	}
	return out
}

// startProcessNamed starts a copy of sleep named name: a real process
// whose comm is name, as /proc shows it.
func startProcessNamed(t *testing.T, name string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	threadholder.CopySleep(t, bin)
	cmd := exec.Command(bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// nodeHost is a host tree under dir for the checks that read /sys, /etc
// and the mount helpers; /proc is the real one (processes are real).
func nodeHost(t *testing.T, dir string) nodecheck.Host {
	h := nodecheck.Host{Proc: "/proc", Sys: filepath.Join(dir, "sys"), Etc: filepath.Join(dir, "etc"), BinDirs: []string{filepath.Join(dir, "sbin")}}
	for _, d := range []string{h.Sys, h.Etc, h.BinDirs[0]} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func adjtimexSaying(synced bool) func(*unix.Timex) (int, error) {
	return func(tx *unix.Timex) (int, error) {
		if synced {
			tx.Status, tx.Maxerror, tx.Esterror = unix.STA_PLL, 15000, 400
			return unix.TIME_OK, nil
		}
		tx.Status, tx.Maxerror, tx.Esterror = unix.STA_UNSYNC, 16000000, 16000000
		return unix.TIME_ERROR, nil
	}
}

// sitecon doctor gathers the node-side checks from every node's own
// report, through each agent's real report server and the real reader,
// with the cluster API down. node-b's agent runs its checks on this
// machine (the real /proc; /sys, /etc and the mount helpers in a tree of
// the test's): no iscsid, no iscsi_tcp, a multipathd without a
// blacklist, no NFS client, a certificate that expires in 20 days, a
// clock the kernel calls unsynchronised: each fires, naming node-b.
// node-c's agent is older (its report has none of the sections), nothing
// listens at node-d's address and node-e's agent never answers: each check
// says it could not run there, and why.
func TestDoctorNodeChecksFireThroughTheNodesReports(t *testing.T) {
	if ok := nodecheck.Longhorn(nodecheck.DefaultHost).Iscsid.OK; ok {
		t.Fatal("an iscsid runs on this machine: the test's missing iscsid cannot be missing")
	}
	s := newNodeChecksSite(t)
	k3sDir := filepath.Join(s.dir, "k3s")
	testcert.Write(t, filepath.Join(k3sDir, "agent", "client-kubelet.crt"), time.Now().Add(20*24*time.Hour+time.Hour))
	testcert.Write(t, filepath.Join(k3sDir, "server", "tls", "serving-kube-apiserver.crt"), time.Now().Add(365*24*time.Hour))
	startProcessNamed(t, "multipathd")
	checker := nodecheck.Checker{Host: nodeHost(t, s.dir), K3sDataDir: k3sDir, Adjtimex: adjtimexSaying(false)}
	// node-b's agent first applied its token 400 days ago.
	stateDir := t.TempDir()
	agent.NoteToken(stateDir, "the-cluster-token", time.Now().Add(-400*24*time.Hour))
	peers := []nodestate.NodePeer{{Name: "node-b", Address: s.base + ".1"}, {Name: "node-c", Address: s.base + ".2"}, {Name: "node-d", Address: s.base + ".3"}, {Name: "node-e", Address: s.base + ".4"}}
	s.serve(t, 1, "node-b", func() nodestate.NodeReport {
		r := nodestate.NodeReport{Node: "node-b", Version: "test", Peers: peers}
		checker.Fill(&r)
		token := agent.NoteToken(stateDir, "the-cluster-token", time.Now())
		r.Token = &token
		return r
	})
	s.serve(t, 2, "node-c", func() nodestate.NodeReport {
		return nodestate.NodeReport{Node: "node-c", Version: "v0.9.0", Peers: peers}
	})
	// node-e's agent takes the connection and never answers.
	hung, err := net.Listen("tcp", net.JoinHostPort(s.base+".4", fmt.Sprint(config.StatusPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	report := s.diagnose(t)
	type want struct {
		sev            doctor.Severity
		subject, words string
	}
	for id, ws := range map[string][]want{
		doctor.IDLonghornPrereq: {
			{doctor.Error, "node-b", "iscsid is not running"},
			{doctor.Warn, "node-b", "iscsi_tcp module is not loaded"},
			{doctor.Warn, "node-b", "multipathd may claim Longhorn's devices"},
			{doctor.Warn, "node-b", "no NFS client"},
			{doctor.Warn, "node-c", "predates this check"},
			{doctor.Warn, "node-d", "its agent gave no report"},
			{doctor.Warn, "node-e", "its agent gave no report"},
		},
		doctor.IDNodeCertExpiry: {
			{doctor.Error, "node-b:" + filepath.Join(k3sDir, "agent", "client-kubelet.crt"), "expires in 20 days"},
			{doctor.Warn, "node-c", "predates this check"},
			{doctor.Warn, "node-d", "its agent gave no report"},
			{doctor.Warn, "node-e", "its agent gave no report"},
		},
		doctor.IDTimeUnsynced: {
			{doctor.Warn, "node-b", "node-b's clock is not synchronised"},
			{doctor.Warn, "node-c", "predates this check"},
			{doctor.Warn, "node-d", "its agent gave no report"},
			{doctor.Warn, "node-e", "its agent gave no report"},
		},
		doctor.IDTokenAge: {
			{doctor.Warn, "node-b", "the cluster token is 400 days old"},
			{doctor.Warn, "node-c", "predates this check"},
			{doctor.Warn, "node-d", "its agent gave no report"},
			{doctor.Warn, "node-e", "its agent gave no report"},
		},
	} {
		got := findingsOf(report, id)
		if len(got) != len(ws) {
			t.Errorf("%s: %d findings, want %d: %+v", id, len(got), len(ws), got)
		}
		for _, w := range ws {
			found := false
			for _, f := range got {
				found = found || (f.Severity == w.sev && f.Subject == w.subject && strings.Contains(f.Summary, w.words))
			}
			if !found {
				t.Errorf("%s: no %s on %s saying %q in %+v", id, w.sev, w.subject, w.words, got)
			}
		}
	}
	for _, f := range findingsOf(report, doctor.IDTimeUnsynced) {
		if f.Subject == "node-e" && !strings.Contains(strings.Join(f.Evidence, " "), "did not answer within") {
			t.Errorf("node-e's finding does not say it did not answer in time: %+v", f)
		}
	}
	if t.Failed() {
		return
	}
	for _, id := range []string{doctor.IDLonghornPrereq, doctor.IDNodeCertExpiry, doctor.IDTimeUnsynced, doctor.IDTokenAge} {
		for _, f := range findingsOf(report, id) {
			if f.Subject == "node-b" || strings.HasPrefix(f.Subject, "node-b:") {
				t.Logf("%s %s: %s %v; next: %s", f.ID, f.Severity, f.Summary, f.Evidence, f.Next)
			}
		}
	}
}

// On a healthy node (iscsid running for real, the module, an NFS client,
// no multipathd, fresh certificates, a synchronised clock) the three
// checks stay quiet.
func TestDoctorNodeChecksQuietOnAHealthyNode(t *testing.T) {
	s := newNodeChecksSite(t)
	k3sDir := filepath.Join(s.dir, "k3s")
	testcert.Write(t, filepath.Join(k3sDir, "agent", "client-kubelet.crt"), time.Now().Add(365*24*time.Hour))
	h := nodeHost(t, s.dir)
	if err := os.MkdirAll(filepath.Join(h.Sys, "module", "iscsi_tcp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.BinDirs[0], "mount.nfs"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	startProcessNamed(t, "iscsid")
	checker := nodecheck.Checker{Host: h, K3sDataDir: k3sDir, Adjtimex: adjtimexSaying(true)}
	stateDir := t.TempDir()
	s.serve(t, 1, "node-b", func() nodestate.NodeReport {
		r := nodestate.NodeReport{Node: "node-b", Version: "test"}
		checker.Fill(&r)
		token := agent.NoteToken(stateDir, "the-cluster-token", time.Now())
		r.Token = &token
		return r
	})
	report := s.diagnose(t)
	for _, id := range []string{doctor.IDLonghornPrereq, doctor.IDNodeCertExpiry, doctor.IDTimeUnsynced, doctor.IDTokenAge} {
		got := findingsOf(report, id)
		if len(got) != 1 || got[0].Severity != doctor.OK {
			t.Errorf("%s on a healthy node: %+v", id, got)
		}
	}
}
