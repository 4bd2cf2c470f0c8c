package change

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/kubetest"
	"github.com/sitecon/sitecon/kube/safety"
)

func TestSeedCheck(t *testing.T) {
	d := site3()
	d.Nodes[1] = kubetest.Node("node-b", "10.244.244.2", corev1.ConditionFalse, kubetest.T0, kubetest.ServerLabels)
	d.Nodes = append(d.Nodes, kubetest.Node("node-d", "10.244.244.4", corev1.ConditionTrue, kubetest.T0, map[string]string{"node-role.kubernetes.io/control-plane": "true"}))
	for n, want := range map[string]string{"node-a": "", "node-b": "not Ready", "node-d": "not an etcd member", "node-z": "no such node"} {
		err := safety.SeedCheck(kube.NodeFacts(d.Nodes), n)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", n, err, want)
		}
	}
}
