package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/views"
)

// Ethernet passthrough (issue 21, section 3): an app pinned to a node with
// a host Ethernet port in its config gets the attachment host-<port> and
// its pod (a VM's VMI) asks for it; a second app asking for a port in use
// on that node is refused, with the reason in its state and on the
// timeline, even when its name sorts first (the app holding a port keeps
// it); the attachment stays while any app uses it (one port name on two
// devices is one attachment) and goes with the last.
func TestEthernetPassthrough(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs, dyn := clientset(t, site), dynClient(t, site)
	ctx := context.Background()
	appsDir, logDir := t.TempDir(), t.TempDir()
	b, c := sitebox.NodeUUID("node-b"), sitebox.NodeUUID("node-c")
	eth := func(port string) []apps.IoAdapter { return []apps.IoAdapter{{Type: apps.IoNetEth, Name: port}} }
	pinned := func(uuid, name, node, port string) apps.AppConfig {
		return apps.AppConfig{UUID: uuid, DisplayName: name, Activate: true, Kind: apps.KindContainer, Image: "registry.local/plc-gw:1",
			DesignatedNodeID: node, Affinity: apps.AffinityRequired, Adapters: eth(port)}
	}
	gateway := pinned("e6000000-0000-4000-8000-000000000001", "pt-gateway", b, "eth1")
	lineC := pinned("e6000000-0000-4000-8000-000000000002", "pt-line-c", c, "eth1")
	// Sorts before pt-gateway by name: it is refused because pt-gateway
	// holds the port, not because of its name.
	another := pinned("e6000000-0000-4000-8000-000000000003", "pt-another", b, "eth1")
	hmi := apps.AppConfig{UUID: "e6000000-0000-4000-8000-000000000004", DisplayName: "pt-hmi", Activate: true, Kind: apps.KindVM,
		Image: "registry.local/hmi:1", DesignatedNodeID: b, Affinity: apps.AffinityRequired, Adapters: eth("eth2"),
		Resources: apps.AppResources{Memory: "512Mi"}}
	all := map[string]apps.AppConfig{}
	for _, a := range []apps.AppConfig{gateway, lineC, another, hmi} {
		all[a.DisplayName] = a
	}
	write := func(a apps.AppConfig) { writeJSON(t, filepath.Join(appsDir, "apps", a.DisplayName+".json"), a) }
	remove := func(a apps.AppConfig) {
		if err := os.Remove(filepath.Join(appsDir, "apps", a.DisplayName+".json")); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []apps.AppConfig{gateway, lineC, hmi} {
		write(a)
	}
	// The volumes directory exists, empty: one missing is unknown, and
	// would hold every removal.
	if err := os.MkdirAll(filepath.Join(appsDir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	agents := map[string]*siteAgent{
		"node-b": startSiteAgent(t, site, "node-b", appsDir, logDir),
		"node-c": startSiteAgent(t, site, "node-c", appsDir, logDir),
	}
	t.Cleanup(func() {
		cleanupApps(t, cs, dyn, agents, appsDir, all)
		_ = dyn.Resource(apps.GVRNAD).Namespace(kube.AppNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: apps.LabelManagedBy + "=" + apps.FieldManager})
	})
	logAgentsOnFailure(t, logDir, "node-b", "node-c")
	agentB := agents["node-b"]

	waitApp(t, agentB, gateway.DisplayName, 60*time.Second, "running on node-b", func(st apps.PublishedApp) bool {
		return st.KubeStatus == apps.KubeRunning && st.Node == "node-b"
	})
	waitApp(t, agents["node-c"], lineC.DisplayName, 60*time.Second, "running on node-c", func(st apps.PublishedApp) bool {
		return st.KubeStatus == apps.KubeRunning && st.Node == "node-c"
	})
	waitApp(t, agentB, hmi.DisplayName, 60*time.Second, "running on node-b", func(st apps.PublishedApp) bool {
		return st.KubeStatus == apps.KubeRunning && st.Node == "node-b"
	})

	// An auto (failover) app asking for a port is a config error: the port
	// is on one device.
	auto := pinned("e6000000-0000-4000-8000-000000000005", "pt-auto", b, "eth3")
	auto.Affinity = apps.AffinityPreferred
	write(auto)
	autoPath := filepath.Join(appsDir, "apps", auto.DisplayName+".json")
	until(t, 30*time.Second, "node-b reports pt-auto's config error", func() (string, bool) {
		var node apps.PublishedNode
		if err := getSocketErr(agentB.socket, localapi.PathNode, &node); err != nil {
			return err.Error(), false
		}
		msg := node.ConfigErrors[autoPath]
		return msg, strings.Contains(msg, "adapters: a passed-through port is on the designated node: the app must be pinned")
	}, func(s string) string { return "config error: " + s })
	if _, ok := agentB.app(auto.DisplayName); ok {
		t.Fatal("pt-auto, refused for its config, is an app of node-b's agent")
	}
	remove(auto)

	// The attachments, as EVE writes them, and the pods that ask for them.
	eth1 := waitNAD(t, dyn, "eth1")
	waitNAD(t, dyn, "eth2")
	for _, a := range []apps.AppConfig{gateway, lineC} {
		waitPodNetworks(t, cs, a, "host-eth1")
	}
	until(t, 30*time.Second, "pt-hmi's VMI asks for host-eth2", func() (string, bool) {
		list, err := dyn.Resource(apps.GVRVMI).Namespace(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + hmi.UUID})
		if err != nil || len(list.Items) == 0 {
			return fmt.Sprintf("no VMI (%v)", err), false
		}
		got := list.Items[0].GetAnnotations()[apps.AnnotationNetworks]
		return got, got == "host-eth2"
	}, func(s string) string { return "networks annotation " + s })

	// A second app on node-b asking for eth1: refused, said, not laid out.
	write(another)
	waitApp(t, agentB, another.DisplayName, 30*time.Second, "refused eth1, in use by pt-gateway", func(st apps.PublishedApp) bool {
		return strings.Contains(st.Error, "eth1") && strings.Contains(st.Error, "pt-gateway") && strings.Contains(st.Error, "one port, one app")
	})
	waitTimeline(t, agentB, 10*time.Second, "the refusal on the timeline", func(e apps.TimelineEvent) bool {
		return e.App == another.DisplayName && e.Kind == apps.EventRefusal && strings.Contains(e.Message, "eth1")
	})
	// The console's source says it too: the apps screen's row for the app
	// (TestAppsScreenShowsAgentProblems draws it) comes from here.
	out, errOut, err := runSitecon(t, "status", "-o", "json", "--kubeconfig", site.Kubeconfig(), "--agent-socket", agentB.socket)
	if err != nil {
		t.Fatalf("sitecon status: %v\n%s", err, errOut)
	}
	var report views.StatusReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if report.Agent == nil || !slices.ContainsFunc(report.Agent.AppProblems, func(p views.AgentAppProblem) bool {
		return p.App == another.DisplayName && p.UUID == another.UUID && strings.Contains(p.Problem, "eth1")
	}) {
		t.Fatalf("sitecon status does not carry pt-another's refusal: %+v", report.Agent)
	}
	if deps := deploymentsOf(t, cs, another); deps != 0 {
		t.Fatalf("pt-another was refused its port, yet %d Deployments of it exist", deps)
	}
	if st, _ := agentB.app(gateway.DisplayName); st.Error != "" || st.KubeStatus != apps.KubeRunning {
		t.Fatalf("pt-gateway, which holds eth1, after pt-another asked for it: %+v", st)
	}

	// The choice survives an agent restart: node-b's new agent, with no
	// memory, reads who holds eth1 from what is laid out, although
	// pt-another's name sorts first.
	gwDep := until(t, 10*time.Second, "pt-gateway's Deployment", func() (string, bool) {
		deps, err := cs.AppsV1().Deployments(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + gateway.UUID})
		if err != nil || len(deps.Items) != 1 {
			return fmt.Sprint(err), false
		}
		return string(deps.Items[0].UID) + "/" + deps.Items[0].Annotations[apps.AnnotationSpecHash], true
	}, nil)
	agentB.stop()
	agentB = startSiteAgent(t, site, "node-b", appsDir, logDir)
	agents["node-b"] = agentB
	waitApp(t, agentB, another.DisplayName, 30*time.Second, "still refused after node-b's agent restarted", func(st apps.PublishedApp) bool {
		return strings.Contains(st.Error, "passed through to pt-gateway")
	})
	waitApp(t, agentB, gateway.DisplayName, 30*time.Second, "still running, without error", func(st apps.PublishedApp) bool {
		return st.Error == "" && st.KubeStatus == apps.KubeRunning && st.Node == "node-b"
	})
	if deps := deploymentsOf(t, cs, another); deps != 0 {
		t.Fatalf("after node-b's agent restarted, %d Deployments of pt-another exist", deps)
	}
	deps, err := cs.AppsV1().Deployments(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + gateway.UUID})
	if err != nil || len(deps.Items) != 1 || string(deps.Items[0].UID)+"/"+deps.Items[0].Annotations[apps.AnnotationSpecHash] != gwDep {
		t.Fatalf("pt-gateway's Deployment changed across node-b's agent restart (was %s): %v %v", gwDep, deps, err)
	}

	// pt-gateway goes: the port is free and goes to pt-another; the
	// attachment, used all along (by pt-line-c on node-c), is the same one.
	remove(gateway)
	waitApp(t, agentB, another.DisplayName, 60*time.Second, "running on node-b with eth1", func(st apps.PublishedApp) bool {
		return st.Error == "" && st.KubeStatus == apps.KubeRunning && st.Node == "node-b"
	})
	waitPodNetworks(t, cs, another, "host-eth1")
	if now := waitNAD(t, dyn, "eth1"); now.GetUID() != eth1.GetUID() {
		t.Fatalf("host-eth1 was removed and made again (uid %s, was %s) while apps used it", now.GetUID(), eth1.GetUID())
	}

	// pt-another goes: pt-line-c still uses host-eth1, which stays.
	remove(another)
	until(t, 30*time.Second, "pt-another's Deployment removed", func() (int, bool) {
		n := deploymentsOf(t, cs, another)
		return n, n == 0
	}, func(n int) string { return fmt.Sprintf("%d left", n) })
	holds(t, 3*time.Second, "host-eth1 kept while pt-line-c uses it", func() error {
		n, err := dyn.Resource(apps.GVRNAD).Namespace(kube.AppNamespace).Get(ctx, "host-eth1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("removed")
		}
		if err == nil && n.GetUID() != eth1.GetUID() {
			return fmt.Errorf("made again")
		}
		return nil
	})

	// The last users go: the attachments go with them.
	remove(lineC)
	remove(hmi)
	for _, port := range []string{"eth1", "eth2"} {
		until(t, 60*time.Second, "host-"+port+" removed", func() (string, bool) {
			_, err := dyn.Resource(apps.GVRNAD).Namespace(kube.AppNamespace).Get(ctx, "host-"+port, metav1.GetOptions{})
			return fmt.Sprint(err), apierrors.IsNotFound(err)
		}, func(s string) string { return "get: " + s })
	}
	waitAnyTimeline(t, []*siteAgent{agentB, agents["node-c"]}, 10*time.Second, "the removal on a timeline", func(e apps.TimelineEvent) bool {
		return strings.Contains(e.Message, "removed network attachment host-eth1")
	})
}

// waitNAD waits for port's attachment and checks it is the one EVE writes.
func waitNAD(t *testing.T, dyn dynamic.Interface, port string) *unstructured.Unstructured {
	t.Helper()
	want := `{"cniVersion":"0.3.1","plugins":[{"device":"` + port + `","type":"host-device"}]}`
	return until(t, 30*time.Second, "attachment host-"+port, func() (*unstructured.Unstructured, bool) {
		n, err := dyn.Resource(apps.GVRNAD).Namespace(kube.AppNamespace).Get(context.Background(), "host-"+port, metav1.GetOptions{})
		if err != nil {
			return &unstructured.Unstructured{Object: map[string]any{"error": err.Error()}}, false
		}
		config, _, _ := unstructured.NestedString(n.Object, "spec", "config")
		return n, config == want && n.GetLabels()[apps.LabelManagedBy] == apps.FieldManager
	}, func(n *unstructured.Unstructured) string {
		return fmt.Sprintf("last seen %v; want spec.config %s", n.Object, want)
	})
}

// waitPodNetworks waits until a's running pod asks Multus for networks.
func waitPodNetworks(t *testing.T, cs kubernetes.Interface, a apps.AppConfig, networks string) {
	t.Helper()
	until(t, 30*time.Second, a.DisplayName+"'s pod asks for "+networks, func() (string, bool) {
		pods, err := cs.CoreV1().Pods(kube.AppNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + a.UUID})
		if err != nil {
			return err.Error(), false
		}
		var seen []string
		for _, p := range pods.Items {
			got := p.Annotations[apps.AnnotationNetworks]
			seen = append(seen, p.Name+": "+got)
			if p.DeletionTimestamp == nil && got == networks {
				return "", true
			}
		}
		return strings.Join(seen, "; "), false
	}, func(s string) string { return "pods: " + s })
}

func deploymentsOf(t *testing.T, cs kubernetes.Interface, a apps.AppConfig) int {
	t.Helper()
	deps, err := cs.AppsV1().Deployments(kube.AppNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + a.UUID})
	if err != nil {
		t.Fatal(err)
	}
	return len(deps.Items)
}
