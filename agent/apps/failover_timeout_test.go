package apps

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// The leader times by the cluster record's one failover timeout, which
// every agent reads alike, not by its own flag: a leader started with
// another --failover-timeout neither holds every node's failover nor
// times one too short for their fence. Without a usable record value it
// falls back to its own.
func TestLeaderTimesByTheClusterRecordsTimeout(t *testing.T) {
	record := func(v string) kube.Data {
		return kube.Data{ConfigMaps: []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: kube.ClusterConfigMapName},
			Data: map[string]string{kube.ClusterKeyFailoverTimeout: v}}}}
	}
	own := 40 * time.Second
	for _, tc := range []struct {
		name string
		d    kube.Data
		want time.Duration
	}{
		{"the record's", record("28s"), 28 * time.Second},
		{"no record: its own", kube.Data{}, own},
		{"a record without the key: its own", kube.Data{ConfigMaps: []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: kube.ClusterConfigMapName}}}}, own},
		{"an unreadable value: its own", record("soon"), own},
		{"too short to fence before: its own", record("5s"), own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{opts: Options{FailoverTimeout: own}, log: slog.New(slog.DiscardHandler)}
			if got := c.clusterFailoverTimeout(tc.d); got != tc.want {
				t.Errorf("timeout %s, want %s", got, tc.want)
			}
		})
	}
}

// A node's signed word that it fenced counts only when it fenced with
// the cluster's timeout: with another, its fence may come after the
// force-delete, and the answer is a sign of life that holds the failover.
func TestFencedWithinTheClustersTimeout(t *testing.T) {
	fenced := func(timeout time.Duration) NodeLife {
		return NodeLife{Alive: false, Evidence: LifeFenced, Detail: "its agent proved that it runs and has fenced",
			State: &config.LifeState{FencedForMs: 20_000, Fencing: true, FailoverTimeoutMs: timeout.Milliseconds(), QuorumContactAgoMs: -1}}
	}
	if got := FencedWithin(fenced(28*time.Second), 28*time.Second); got.Alive || got.Evidence != LifeFenced {
		t.Errorf("fenced with the cluster's timeout: %+v, want fenced", got)
	}
	got := FencedWithin(fenced(time.Minute), 28*time.Second)
	if !got.Alive || got.Evidence != LifeProven || !strings.Contains(got.Detail, "not the cluster's 28s") {
		t.Errorf("fenced with another timeout: %+v, want a proven sign of life saying why", got)
	}
	silent := NodeLife{Evidence: LifeSilent, Detail: "silent"}
	if got := FencedWithin(silent, 28*time.Second); got != silent {
		t.Errorf("silence changed: %+v", got)
	}
}
