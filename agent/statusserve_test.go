package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/test/testcert"
)

// The agent's /status server answers the failover guard's challenge for its
// own node, signed with its node's own credential, and GET /status as
// before. A node joined with the secure token form and one configured
// with the password alone prove to each other.
func TestStatusServerProvesLife(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	// Each node's own credential, as k3s issues it, and the client CA.
	dir := t.TempDir()
	ca := testcert.NewClientCA(t, dir)
	agentOf := func(node string) *Agent {
		return New(Options{NodeKubeconfig: ca.NodeKubeconfig(t, node), NodeClientCA: ca.Path})
	}
	a, b := agentOf("node-a"), agentOf("node-b")
	nodeB := b.lifeKey(cluster, config.Secret(config.SecureToken("pw", []byte("ca"))))
	srv := httptest.NewUnstartedServer(statusserver.WithLifeProof(statusserver.Handler(cluster, func() bool { return true }), nodeB, "node-b", nil))
	srv.Config = localapi.NewServer(srv.Config.Handler)
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	resp, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "cluster:"+cluster {
		t.Fatalf("GET /status: %s %q, want the plain answer joiners read", resp.Status, body)
	}
	guardA := apps.LifeProbe{Key: a.lifeKey(cluster, "pw")}
	if life := guardA.Probe(context.Background(), addr, "node-b"); !life.Alive || life.Evidence != apps.LifeProven {
		t.Fatalf("node-b's agent, probed by node-a's guard: %+v", life)
	}
	// The same server probed as another node's address is not that node's
	// proof: a host answers there, which holds node-c's failover.
	if life := guardA.Probe(context.Background(), addr, "node-c"); !life.Alive || life.Evidence != apps.LifeStranger {
		t.Fatalf("node-b's agent taken for node-c's proof, or its answer for no sign of a host: %+v", life)
	}
}
