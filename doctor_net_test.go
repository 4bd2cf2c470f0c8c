package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/test/netns"
)

const (
	netTestCluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	netTestOther   = "0badc0de-1111-4222-8333-444455556666"
	netTestToken   = "Zr7Qp2Xw9Lm4Tn8Vb3Kc6Hd1Fs5Gj0Ay2Ue7Io4Pw9Rq3Ts8Yx1Nb6Mv5Lk2Jh0Gf"
)

// writeNetTestConfig writes node-a's cluster config for a LAN of
// test/netns: node-a at 192.168.77.1, prefix 192.168.77.0/29 on eth1, the
// seed at seed. It returns the config's path.
func writeNetTestConfig(t *testing.T, seed string) string {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(netTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{ClusterName: "site1", ClusterID: netTestCluster, ClusterInterface: netns.Interface,
		ClusterIPPrefix: "192.168.77.1/29", JoinServerIP: seed, TokenFile: tokenFile, NodeName: "node-a",
		NodeUUID: "00000000-0000-4000-8000-000000000001"}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveStatusIn serves /status answering cluster:<clusterID> on host's
// LAN address, inside its namespace, until the test ends or stop.
func serveStatusIn(t *testing.T, h *netns.Host, clusterID string) (stop func()) {
	t.Helper()
	var l net.Listener
	if err := h.Do(func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(h.LANAddr, "12346"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: statusserver.Handler(clusterID, func() bool { return true }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return func() { _ = srv.Close() }
}

// diagnoseFrom runs the doctor as node-a's machine would, with its
// cluster config, dialling from inside self's namespace, and returns the
// findings of id by subject.
func diagnoseFrom(t *testing.T, self *netns.Host, configPath, id string) map[string]doctor.Finding {
	t.Helper()
	dir := t.TempDir()
	g := &globalFlags{kubeconfig: filepath.Join(dir, "no-kubeconfig")}
	opts := doctorOptions(g, slog.New(slog.DiscardHandler), dir, filepath.Join(dir, "no-socket"), configPath, time.Second)
	opts.Dial = self.DialContext
	r := doctor.Diagnose(context.Background(), opts)
	out := map[string]doctor.Finding{}
	for _, f := range r.Findings {
		if f.ID == id {
			out[f.Subject] = f
		}
	}
	return out
}

// Another cluster answering /status on this node's cluster prefix (two
// sites' devices on one LAN, lf-edge/eve #5306): the doctor, on node-a
// with its cluster config, asks every host of the prefix and names the
// address and the other cluster's id. Our own cluster's member and a host
// with nothing listening are not findings.
func TestDoctorFindsASecondClusterOnThePrefix(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "other", "seed", "silent")
	self, other, seed := hosts[0], hosts[1], hosts[2]
	stopOther := serveStatusIn(t, other, netTestOther)
	serveStatusIn(t, seed, netTestCluster)
	configPath := writeNetTestConfig(t, seed.LANAddr)

	start := time.Now()
	got := diagnoseFrom(t, self, configPath, doctor.IDSecondCluster)
	t.Logf("took %s", time.Since(start))
	f, ok := got[other.LANAddr]
	if !ok || f.Severity != doctor.Error || !strings.Contains(f.Summary, netTestOther) || !strings.Contains(f.Summary, other.LANAddr) || f.Next == "" {
		t.Fatalf("no error naming %s and cluster %s: %+v", other.LANAddr, netTestOther, got)
	}
	if len(got) != 1 {
		t.Errorf("findings %+v: want only %s's", got, other.LANAddr)
	}
	t.Logf("%s: %s %v", f.ID, f.Summary, f.Evidence)

	// The other cluster gone: quiet, and it says how many it asked.
	stopOther()
	got = diagnoseFrom(t, self, configPath, doctor.IDSecondCluster)
	if f := got[""]; len(got) != 1 || f.Severity != doctor.OK || !strings.Contains(strings.Join(f.Evidence, " "), "1 answered for this cluster") {
		t.Errorf("only our own cluster on the prefix: %+v", got)
	}
}
