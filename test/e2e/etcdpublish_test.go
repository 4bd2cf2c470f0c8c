package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/sitebox"
)

// A server's agent publishes the etcd member list its own member gives
// (the drain and remove preflights read it) from the one observation it
// makes every interval for its node report: under its node's key, the
// site's three members, healthy, observed by it.
func TestAgentPublishesTheEtcdMembersItObserves(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	drop := func() {
		if err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Delete(ctx, kube.EtcdMembersConfigMapName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("the published etcd members: %v", err)
		}
	}
	drop()
	member, ok := site.EtcdMemberOf("node-b")
	if !ok {
		t.Fatal("node-b runs no etcd member")
	}
	a := startAgentWith(t, site, "node-b", "", t.TempDir(), func(o *agent.Options) {
		startSiteAgentTimings(o)
		o.Etcd = nodestate.EtcdAccess{Endpoint: member.ClientURL()}
	})
	t.Cleanup(func() { a.stop(); drop() })
	until(t, 60*time.Second, "node-b's agent publishes etcd's three members", func() (string, bool) {
		cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.EtcdMembersConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		var view nodestate.EtcdView
		if err := json.Unmarshal([]byte(cm.Data["node-b"]), &view); err != nil {
			return fmt.Sprintf("node-b's key: %v (%d keys)", err, len(cm.Data)), false
		}
		healthy := 0
		for _, m := range view.Members {
			if m.Healthy {
				healthy++
			}
		}
		return fmt.Sprintf("observed by %q: %d members, %d healthy", view.ObservedBy, len(view.Members), healthy),
			view.ObservedBy == "node-b" && len(view.Members) == 3 && healthy == 3
	}, func(s string) string { return s })
}
