package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// sitecon doctor with a node's cluster config compares every node's clock
// with this machine's, through each agent's own report, asked on its
// cluster address with the cluster's key; it runs with the cluster API
// unreadable too. Here the node's agent (its real report server, on a
// loopback address of its own) runs 45 s ahead: an error, naming it.
func TestDoctorFindsASkewedClockThroughTheNodesReport(t *testing.T) {
	dir := t.TempDir()
	const token = "Zr7Qp2Xw9Lm4Tn8Vb3Kc6Hd1Fs5Gj0Ay2Ue7Io4Pw9Rq3Ts8Yx1Nb6Mv5Lk2Jh0Gf"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An address of loopback's /8 of its own: the report's port is fixed.
	ip := fmt.Sprintf("127.77.%d.1", rand.IntN(250)+1)
	cfg := config.Config{ClusterName: "site1", ClusterID: "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", ClusterInterface: "lo",
		ClusterIPPrefix: ip + "/29", JoinServerIP: ip, TokenFile: tokenFile, NodeName: "node-b",
		NodeUUID: "00000000-0000-4000-8000-000000000002"}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(configPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(cfg.ClusterID, config.Secret(token))
	if err != nil {
		t.Fatal(err)
	}
	srv := statusserver.NodeReportHandler(key, "node-b", func() nodestate.NodeReport { return nodestate.NodeReport{Node: "node-b"} })
	srv.Now = func() time.Time { return time.Now().Add(45 * time.Second) }
	l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(config.StatusPort)))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: statusserver.WithNodeReport(http.NotFoundHandler(), srv), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(l) }()
	defer hs.Close()

	g := &globalFlags{kubeconfig: filepath.Join(dir, "no-kubeconfig")}
	opts := doctorOptions(g, slog.New(slog.DiscardHandler), dir, filepath.Join(dir, "no-socket"), configPath, time.Second)
	report := doctor.Diagnose(context.Background(), opts)
	var found *doctor.Finding
	for i, f := range report.Findings {
		if f.ID == doctor.IDClockSkew {
			if f.Subject == "node-b" {
				found = &report.Findings[i]
			} else if f.Severity != doctor.OK {
				t.Errorf("another clock finding: %+v", f)
			}
		}
	}
	if found == nil || found.Severity != doctor.Error {
		t.Fatalf("no clock error for node-b 45 s ahead: %+v\nfindings: %+v", found, report.Findings)
	}
	t.Logf("%s: %s %v", found.ID, found.Summary, found.Evidence)
}
