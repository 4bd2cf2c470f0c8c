package change

import (
	"cmp"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/kubetest"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
)

// site3 is three Ready servers, a volume replicated on all three and one
// whose only healthy replica is on node-b.
func site3() kube.Data {
	vol := func(name string) *lhv1beta2.Volume {
		v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		v.Status.KubernetesStatus.PVCName, v.Status.KubernetesStatus.Namespace = name+"-claim", kube.AppNamespace
		return v
	}
	d := kube.Data{
		Nodes: []*corev1.Node{
			kubetest.Node("node-a", "10.244.244.1", corev1.ConditionTrue, kubetest.T0, kubetest.ServerLabels),
			kubetest.Node("node-b", "10.244.244.2", corev1.ConditionTrue, kubetest.T0, kubetest.ServerLabels),
			kubetest.Node("node-c", "10.244.244.3", corev1.ConditionTrue, kubetest.T0, kubetest.ServerLabels),
		},
		Volumes: []*lhv1beta2.Volume{vol("vol-safe"), vol("vol-single")},
		Replicas: []*lhv1beta2.Replica{
			kubetest.Replica("s-a", "vol-safe", "node-a", "", "t", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("s-b", "vol-safe", "node-b", "", "t", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("s-c", "vol-safe", "node-c", "", "t", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("x-b", "vol-single", "node-b", "", "t", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("x-c", "vol-single", "node-c", "t", "", lhv1beta2.InstanceStateError),
		},
	}
	for _, r := range d.Replicas {
		r.Spec.Active = true // as Longhorn's replicas in use are
	}
	return withEtcdList(d)
}

// withEtcdList publishes in d the member list a healthy etcd gives on a
// site whose members are the Nodes with the etcd role label, as the first
// of them observed it now: what the quorum arithmetic counts (an unknown
// list refuses a server's drain).
func withEtcdList(d kube.Data) kube.Data {
	view := nodestate.EtcdView{ObservedAt: time.Now().UTC(), Endpoint: "https://127.0.0.1:2379"}
	for _, n := range d.Nodes {
		if kube.IsEtcdMember(n) {
			view.ObservedBy = cmp.Or(view.ObservedBy, n.Name)
			view.Members = append(view.Members, nodestate.EtcdMemberStatus{Name: n.Name, Healthy: true})
		}
	}
	raw, err := json.Marshal(view)
	if err != nil {
		panic(err)
	}
	d.ConfigMaps = append(d.ConfigMaps, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kube.EtcdMembersConfigMapName, Namespace: kube.AppNamespace},
		Data:       map[string]string{view.ObservedBy: string(raw)},
	})
	return d
}

func TestDrainPreflight(t *testing.T) {
	agentLabels := map[string]string{"node-role.kubernetes.io/agent": "true"}
	for name, tc := range map[string]struct {
		node     string
		edit     func(*DrainCheck)
		refusals []string // each must appear
		warnings []string
	}{
		"all safe":             {node: "node-a"},
		"unknown node":         {node: "node-z", refusals: []string{"node-z: no such node"}},
		"last healthy replica": {node: "node-b", refusals: []string{"node-b holds the only healthy replica of vol-single (eve-kube-app/vol-single-claim)"}},
		"another server not ready": {node: "node-a", edit: func(c *DrainCheck) {
			c.Data.Nodes[2] = kubetest.Node("node-c", "10.244.244.3", corev1.ConditionUnknown, kubetest.T0, kubetest.ServerLabels)
		}, refusals: []string{"3 etcd members, 1 unhealthy (node-c: NotReady); draining node-a leaves 1 of the 2 needed"}},
		"another server draining": {node: "node-a", edit: func(c *DrainCheck) {
			c.Data.Nodes[1].Spec.Unschedulable = true
		}, refusals: []string{"3 etcd members, 1 unhealthy (node-b: cordoned); draining node-a leaves 1 of the 2 needed"}},
		"agent node ignores quorum": {node: "node-d", edit: func(c *DrainCheck) {
			c.Data.Nodes = append(c.Data.Nodes, kubetest.Node("node-d", "10.244.244.4", corev1.ConditionTrue, kubetest.T0, agentLabels))
			c.Data.Nodes[2] = kubetest.Node("node-c", "10.244.244.3", corev1.ConditionUnknown, kubetest.T0, kubetest.ServerLabels)
		}},
		"last replica, Longhorn copies it off first": {node: "node-b", edit: func(c *DrainCheck) {
			c.LonghornPolicy = "block-for-eviction-if-contains-last-replica"
		}, warnings: []string{"node-b holds the only healthy replica of vol-single (eve-kube-app/vol-single-claim); Longhorn (block-for-eviction-if-contains-last-replica) copies it off first"}},
		"last replica, Longhorn would let it go": {node: "node-b", edit: func(c *DrainCheck) {
			c.LonghornPolicy = "always-allow"
		}, refusals: []string{"node-b holds the only healthy replica of vol-single"},
			warnings: []string{"Longhorn's node-drain-policy is always-allow"}},
		"a server without etcd has no vote": {node: "node-a", edit: func(c *DrainCheck) {
			// A control-plane node without an etcd member (as on an external
			// datastore), down: the three etcd members still hold a quorum.
			c.Data.Nodes = append(c.Data.Nodes, kubetest.Node("node-d", "10.244.244.4", corev1.ConditionUnknown, kubetest.T0, map[string]string{"node-role.kubernetes.io/control-plane": "true"}))
		}},
		"pods kubectl refuses": {node: "node-a", edit: func(c *DrainCheck) {
			c.Excluded = []error{errors.New("cannot delete Pods that declare no controller (use --force to override): default/bare")}
		}, refusals: []string{"default/bare"}},
		"pinned app stops": {node: "node-a", edit: func(c *DrainCheck) {
			c.Apps = []kube.AppStatus{{Name: "historian", Mode: kube.AppModePinned, Node: "node-a", Ready: true}, {Name: "hmi", Mode: kube.AppModeAuto, Node: "node-a", Ready: true}}
		}, warnings: []string{"pinned app historian runs on node-a"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := DrainCheck{Node: tc.node, Data: site3()}
			if tc.edit != nil {
				tc.edit(&c)
			}
			p := safety.DrainPreflight(c.Facts())
			if p.Refused() != (len(tc.refusals) > 0) || p.NeedsForce() != (len(tc.warnings) > 0) {
				t.Fatalf("refusals %q warnings %q", p.Refusals, p.Warnings)
			}
			for _, want := range tc.refusals {
				if !strings.Contains(strings.Join(p.Refusals, "\n"), want) {
					t.Errorf("refusals %q lack %q", p.Refusals, want)
				}
			}
			for _, want := range tc.warnings {
				if !strings.Contains(strings.Join(p.Warnings, "\n"), want) {
					t.Errorf("warnings %q lack %q", p.Warnings, want)
				}
			}
			if len(p.Warnings) > 1 {
				t.Errorf("auto apps move; only pinned ones warn: %q", p.Warnings)
			}
		})
	}
}
