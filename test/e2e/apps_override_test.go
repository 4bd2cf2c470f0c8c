package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// An on-site override written straight into the placement ConfigMap (as
// anyone with kubectl can) naming a node without the app's labels is
// re-checked by the agents: refused and reported, and the app stays where
// its config puts it, instead of being laid out where it can never run.
func TestOverrideToUnfitNodeRefused(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	const label = "sitecon-e2e/line"
	setLabel := func(node, value string) {
		t.Helper()
		v := `"` + value + `"`
		if value == "" {
			v = "null"
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, label, v)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setLabel("node-b", "2")
	t.Cleanup(func() { setLabel("node-b", "") })

	appsDir, logDir := t.TempDir(), t.TempDir()
	app := apps.AppConfig{UUID: "e5000000-0000-4000-8000-000000000001", DisplayName: "override-unfit", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/line2:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred,
		NodeSelectLabels: map[string]string{label: "2"}}
	writeJSON(t, appsDir+"/apps/override-unfit.json", app)
	agents := map[string]*siteAgent{
		"node-b": startSiteAgent(t, site, "node-b", appsDir, logDir),
		"node-c": startSiteAgent(t, site, "node-c", appsDir, logDir),
	}
	all := []*siteAgent{agents["node-b"], agents["node-c"]}
	t.Cleanup(func() {
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{"override-unfit": app})
	})
	waitAgents(t, all, app.DisplayName, 60*time.Second, "running on node-b", runningOn("node-b"))

	// node-c lacks the label the app needs.
	if err := change.WriteOverride(ctx, cs, app.UUID, kube.PlacementOverride{Node: "node-c", NodeUUID: sitebox.NodeUUID("node-c"),
		By: "e2e", At: time.Now(), ConfigDNId: app.DesignatedNodeID, Reason: "hand-written"}); err != nil {
		t.Fatal(err)
	}
	deployments := cs.AppsV1().Deployments(kube.AppNamespace)
	// Either node-b says it refused the override, or the app moved.
	type outcome struct {
		movedTo string
		st      apps.PublishedApp
	}
	seen := until(t, 30*time.Second, "node-b reports the override refused", func() (outcome, bool) {
		if d, err := deployments.Get(ctx, apps.WorkloadName(app), metav1.GetOptions{}); err == nil && d.Annotations[apps.AnnotationDNId] != app.DesignatedNodeID {
			return outcome{movedTo: d.Annotations[apps.AnnotationDNId]}, true
		}
		st, ok := agents["node-b"].app(app.DisplayName)
		return outcome{st: st}, ok && strings.Contains(st.Error, "refused")
	}, func(o outcome) string { return fmt.Sprintf("node-b's view: %+v", o.st) })
	if seen.movedTo != "" {
		t.Fatalf("the app was laid out for node %s, which lacks its label %s", seen.movedTo, label)
	}
	st, _ := agents["node-b"].app(app.DisplayName)
	if !strings.Contains(st.Error, "lacks the app's label "+label+"=2") || !st.IsDNIdNode || st.Override != nil {
		t.Errorf("node-b's view of the refused override: error %q, is DNId %v, override %+v", st.Error, st.IsDNIdNode, st.Override)
	}
	waitTimeline(t, agents["node-b"], 10*time.Second, "the refusal on the timeline", func(e apps.TimelineEvent) bool {
		return e.Kind == apps.EventRefusal && strings.Contains(e.Message, "override-unfit to node-c refused")
	})
	waitAgents(t, all, app.DisplayName, 10*time.Second, "still on node-b", runningOn("node-b"))
}

// An entry in the placement ConfigMap that does not parse (a hand edit
// gone wrong) is an override the agents cannot use: it is refused as an
// unfit one is, and said where a technician looks (the node's
// config_errors, the app's error, the timeline), not dropped silently.
func TestUnusableOverrideIsReported(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	appsDir, logDir := t.TempDir(), t.TempDir()
	app := apps.AppConfig{UUID: "e5000000-0000-4000-8000-000000000002", DisplayName: "override-garbled", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	writeJSON(t, appsDir+"/apps/override-garbled.json", app)
	agents := map[string]*siteAgent{"node-b": startSiteAgent(t, site, "node-b", appsDir, logDir)}
	t.Cleanup(func() {
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{"override-garbled": app})
	})
	waitAgents(t, []*siteAgent{agents["node-b"]}, app.DisplayName, 60*time.Second, "running on node-b", runningOn("node-b"))

	// Cut off mid-object, as an editor that lost the rest would leave it.
	garbled := `{"node": "node-c"`
	cms := cs.CoreV1().ConfigMaps(kube.AppNamespace)
	if _, err := cms.Get(ctx, apps.PlacementConfigMapName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: apps.PlacementConfigMapName, Namespace: kube.AppNamespace},
			Data: map[string]string{app.UUID: garbled}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	} else {
		patch, _ := json.Marshal(map[string]any{"data": map[string]string{app.UUID: garbled}})
		if _, err := cms.Patch(ctx, apps.PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		patch := fmt.Sprintf(`{"data":{%q:null}}`, app.UUID)
		_, _ = cs.CoreV1().ConfigMaps(kube.AppNamespace).Patch(context.Background(), apps.PlacementConfigMapName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	})
	key := apps.PlacementConfigMapName + "/" + app.UUID
	until(t, 30*time.Second, "node-b reports the unusable override", func() (string, bool) {
		var node apps.PublishedNode
		if err := getSocketErr(agents["node-b"].socket, localapi.PathNode, &node); err != nil {
			return err.Error(), false
		}
		st, _ := agents["node-b"].app(app.DisplayName)
		return fmt.Sprintf("config_errors %v; app error %q", node.ConfigErrors, st.Error),
			strings.Contains(node.ConfigErrors[key], "not usable") && strings.Contains(st.Error, "not usable")
	}, func(s string) string { return s })
	waitTimeline(t, agents["node-b"], 10*time.Second, "a refusal on the timeline", func(e apps.TimelineEvent) bool {
		return e.App == app.DisplayName && e.Kind == apps.EventRefusal && strings.Contains(e.Message, "not usable")
	})
	// The app stays where its config puts it.
	if st, _ := agents["node-b"].app(app.DisplayName); st.Node != "node-b" || st.Override != nil {
		t.Errorf("with an unusable override the app is on %q, override %+v; want node-b, none", st.Node, st.Override)
	}
}
