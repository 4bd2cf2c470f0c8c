package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/sitebox"
)

// publishEtcdMembers publishes etcd's member list as the servers' agents
// do (kube.EtcdPublisher): each server that runs a member observes etcd
// through its own and publishes under its own key, kept fresh until the
// test ends; then the list is deleted. Quorum is counted from that list
// only: a server's drain, remove, replace, leave or maintenance walk is
// refused while it is not published or stale (issue 36 A). With every
// server publishing, the freshest entry stays in time while one of them
// is down, as on a device. Sitebox's own agents publish it when a test
// starts them (startSiteboxAgents); this is for the tests that start
// none. It returns once the list counts, as a preflight reads it. Each
// edit changes every observation before it is published (a member list
// other than the site's real one).
func publishEtcdMembers(t *testing.T, site *sitebox.TestSite, edits ...func(*nodestate.EtcdView)) {
	t.Helper()
	cs := clientset(t, site)
	cms := cs.CoreV1().ConfigMaps(kube.AppNamespace)
	ctx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, m := range site.Etcd {
		access := nodestate.EtcdAccess{Endpoint: m.ClientURL()}
		publisher := &nodestate.EtcdPublisher{Access: access, Node: m.Node, Client: cs,
			ObserveEvery: time.Second, PublishEvery: 10 * time.Second,
			Observe: func(ctx context.Context) (nodestate.EtcdView, error) {
				v, err := nodestate.ObserveEtcd(ctx, access, m.Node, time.Now)
				if err != nil {
					return v, err
				}
				for _, edit := range edits {
					edit(&v)
				}
				return v, nil
			}}
		running.Go(func() { publisher.Run(ctx) })
	}
	t.Cleanup(func() {
		// Stopped first: a publish after the delete would leave a list
		// that goes stale behind the next test.
		stop()
		running.Wait()
		_ = cms.Delete(context.Background(), kube.EtcdMembersConfigMapName, metav1.DeleteOptions{})
	})
	until(t, 30*time.Second, "the servers' etcd member list published", func() (string, bool) {
		cm, err := cms.Get(context.Background(), kube.EtcdMembersConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error(), false
		}
		d := kube.Data{ConfigMaps: []*corev1.ConfigMap{cm}}
		for i := range nodes.Items {
			d.Nodes = append(d.Nodes, &nodes.Items[i])
		}
		q := nodestate.EtcdQuorumMembers(d, time.Now())
		return fmt.Sprintf("%s (%d members)", q.Source, len(q.Members)), q.FromEtcd
	}, func(last string) string { return "last: " + last })
}
