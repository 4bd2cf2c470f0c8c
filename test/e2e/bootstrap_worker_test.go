package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// A worker node (k3s agent) has no admin kubeconfig: k3s writes only its
// controller identity's. Its sitecon agent reaches the cluster with that one,
// once the seed's agent has granted the identity the agent's rules, and gets
// to joined, with the stats-leader election running, without --kubeconfig.
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
	rbac := cs.RbacV1()
	_ = rbac.ClusterRoleBindings().Delete(ctx, kube.AgentRoleName, metav1.DeleteOptions{})
	_ = rbac.ClusterRoles().Delete(ctx, kube.AgentRoleName, metav1.DeleteOptions{})
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), kube.AgentRoleName, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), kube.AgentRoleName, metav1.DeleteOptions{})
	})
	controllerCfg, err := clientcmd.BuildConfigFromFlags("", site.K3sControllerKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	controller, err := kubernetes.NewForConfig(controllerCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the k3s controller identity can list nodes before any grant (err %v): the test would prove nothing", err)
	}
	// The agents write their own cluster record.
	putClusterRecordAside(t, cs)

	standin := buildStandin(t)
	// What k3s hands every node it admits: the controller identity.
	t.Setenv("K3SSTANDIN_CONTROLLER_KUBECONFIG", site.K3sControllerKubeconfig())
	hosts := netns.NewLAN(t, "a", "c")
	plan, err := agent.Plan(agent.FormRequest{
		ClusterName: "site1", Interface: netns.Interface,
		Nodes: []agent.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c", Worker: true}},
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
	if st.Role != agent.RoleAgent {
		t.Fatalf("node-c runs as %s, want a worker (agent)", st.Role)
	}
	if _, err := os.Stat(filepath.Join(worker.dataDir, "agent", "k3scontroller.kubeconfig")); err != nil {
		t.Fatalf("the worker joined without the controller kubeconfig k3s writes: %v", err)
	}
	// The cluster work runs on the worker: it takes part in the election.
	until(t, 20*time.Second, "the worker's stats-leader election sees a leader", func() (apps.LeaderState, bool) {
		st := worker.agent.LeaderState()
		return st, st.Leader != ""
	}, func(st apps.LeaderState) string { return fmt.Sprintf("its leader state: %+v", st) })
	binding, err := rbac.ClusterRoleBindings().Get(ctx, kube.AgentRoleName, metav1.GetOptions{})
	if err != nil || len(binding.Subjects) != 1 || binding.Subjects[0].Name != kube.K3sControllerUser {
		t.Fatalf("the agent's grant to the k3s controller identity: %+v %v", binding, err)
	}
}
