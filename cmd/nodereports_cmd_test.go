package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// The reports are asked with this node's cluster config: its key, its own
// address (by its name), the nodes last seen (by theirs), the seed, and
// the prefix's other hosts as a scan; the config's interface need not
// exist on the machine reading. Without a config the round says plainly
// what it needs and asks nothing.
func TestNodeReportTargetsFromTheConfig(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("Zr7Qp2Xw9Lm4Tn8Vb3Kc6Hd1Fs5Gj0Ay2Ue7Io4Pw9Rq3Ts8Yx1Nb6Mv5Lk2Jh0Gf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{ClusterName: "site1", ClusterID: "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", ClusterInterface: "no-such-if0",
		ClusterIPPrefix: "10.244.244.2/29", JoinServerIP: "10.244.244.1", TokenFile: token, NodeName: "node-b",
		NodeUUID: "00000000-0000-4000-8000-000000000002"}
	data, _ := json.Marshal(cfg)
	path := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := nodeReports{configPath: path}.config()
	if err != nil {
		t.Fatal(err)
	}
	targets := reportTargets(v, []kube.NodeStatus{{Name: "node-c", InternalIP: "10.244.244.3"}, {Name: "node-x"}})
	var got []string
	for _, tg := range targets {
		s := tg.Address.String() + "=" + tg.Node
		if tg.Scan {
			s += "?"
		}
		got = append(got, s)
	}
	want := "10.244.244.2:12346=node-b 10.244.244.3:12346=node-c 10.244.244.1:12346= 10.244.244.1:12346=? 10.244.244.3:12346=? 10.244.244.4:12346=? 10.244.244.5:12346=? 10.244.244.6:12346=?"
	if strings.Join(got, " ") != want {
		t.Errorf("targets\n %s\nwant\n %s", strings.Join(got, " "), want)
	}

	none := nodeReports{configPath: filepath.Join(dir, "absent.json")}.gather(context.Background(), nil)
	if len(none.Answers) != 0 || !strings.Contains(none.Problem, "--config") {
		t.Errorf("without a config: %+v", none)
	}
}
