package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// A worker node (k3s agent) has no admin kubeconfig: its sitecon agent
// reaches the cluster with its node's own identity, the kubelet client
// certificate k3s issues each node, once the seed's agent has granted the
// nodes' identities the agent's rules, and gets to joined, following the
// servers' stats-leader election, without --kubeconfig. The identity is
// its node's, not one every node shares: it writes no cluster-wide state.
func TestBootstrapWorkerJoins(t *testing.T) {
	netns.Skip(t)
	site := sitebox.Shared(t)
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// No grant from an earlier run: the identity starts with no rights.
	removeAgentAccess(cs)
	t.Cleanup(func() { removeAgentAccess(cs) })
	nodeCfg, err := clientcmd.BuildConfigFromFlags("", site.NodeKubeconfig("node-c"))
	if err != nil {
		t.Fatal(err)
	}
	nodeIdentity, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeIdentity.CoreV1().ConfigMaps(kube.AppNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("node-c's identity can list ConfigMaps before any grant (err %v): the test would prove nothing", err)
	}
	// The agents write their own cluster record.
	putClusterRecordAside(t, cs)

	standin := buildStandin(t)
	// What k3s hands every node it admits: the controller identity every
	// node shares, and the node's own.
	t.Setenv("K3SSTANDIN_CONTROLLER_KUBECONFIG", site.K3sControllerKubeconfig())
	t.Setenv("K3SSTANDIN_NODE_IDENTITIES", site.NodeDataDirs())
	hosts := netns.NewLAN(t, "a", "c")
	plan, err := formation.Plan(formation.FormRequest{
		ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c", Worker: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// The seed has k3s's admin kubeconfig, as a server has.
	seed := startNodeAgent(t, ctx, &wg, site.Kubeconfig(), standin, hosts[0], plan.Nodes[0], nil, nil)
	worker := startNodeAgent(t, ctx, &wg, "", standin, hosts[1], plan.Nodes[2], nil, nil)

	waitState(t, seed, 30*time.Second, "seed joined", func(st agent.State) bool { return st.Phase == agent.PhaseJoined })
	st := waitState(t, worker, 40*time.Second, "worker joined", func(st agent.State) bool { return st.Phase == agent.PhaseJoined })
	if st.Role != k3s.RoleAgent {
		t.Fatalf("node-c runs as %s, want a worker (agent)", st.Role)
	}
	if _, err := os.Stat(k3s.NodeKubeconfig(k3s.Paths{DataDir: worker.dataDir})); err != nil {
		t.Fatalf("the worker joined without the node kubeconfig k3s writes: %v", err)
	}
	// The cluster work runs on the worker: it follows the election, which
	// only servers stand in.
	until(t, 20*time.Second, "the worker's view of the election names node-a (the only server) leading", func() (apps.LeaderState, bool) {
		ls := worker.agent.LeaderState()
		return ls, ls.Leader == "node-a" && !ls.IsLeader
	}, func(ls apps.LeaderState) string { return fmt.Sprintf("its leader state: %+v", ls) })
	binding, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, kube.AgentRoleName, metav1.GetOptions{})
	if err != nil || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "Group" || binding.Subjects[0].Name != access.NodesGroup {
		t.Fatalf("the agent's grant to the nodes' identities: %+v %v", binding, err)
	}
	// The worker's agent kept out of the cluster-wide state: the record
	// lists the servers it was written by, not the worker.
	record, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
	if err != nil || strings.Contains(record.Data[kube.ClusterKeyNodes], "node-c") {
		t.Errorf("cluster record after the worker joined: %v %v", record.Data, err)
	}
}
