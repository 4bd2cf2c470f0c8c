package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// An app deactivated and moved to another designated node in one change
// of the config: the new designated node lays nothing out for a
// deactivated app, so the node that laid it out removes it, and says so.
// Neither node may leave it running.
func TestAppsDeactivatedAndMovedInOneChange(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	app := apps.AppConfig{UUID: "e7000000-0000-4000-8000-000000000001", DisplayName: "off-moved", Version: 1, Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/off-moved:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	path := filepath.Join(appsDir, "apps", app.DisplayName+".json")
	writeJSON(t, path, app)
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c")
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{app.DisplayName: app})
	})
	all := []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}
	waitAgents(t, all, app.DisplayName, 60*time.Second, "running on node-b", runningOn("node-b"))

	off := app
	off.Version, off.Activate, off.DesignatedNodeID = 2, false, sitebox.NodeUUID("node-c")
	writeJSON(t, path, off)
	name := apps.WorkloadName(app)
	_ = until(t, 30*time.Second, "the deactivated app's Deployment removed", func() (error, bool) {
		_, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(t.Context(), name, metav1.GetOptions{})
		return err, apierrors.IsNotFound(err)
	}, func(err error) string { return fmt.Sprintf("Deployment %s: get: %v", name, err) })
	waitEvent(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "reason": "Removed"}.String()},
		15*time.Second, "the removal, by the node that laid it out", func(e corev1.Event) bool {
			return strings.Contains(e.Message, "deactivated") && e.Source.Host == "node-b"
		})
}

// A move by an unversioned config: every node now holds a config that
// designates the other node, but the old layout still records the old
// config, which wins the tie (its designated node's UUID sorts first).
// The node that laid it out no longer places the app and records on its
// layout the config it holds now: the configs agree, and the new
// designated node takes the app at once, not after a window, and not
// never.
func TestAppsUnversionedMoveTakesEffect(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	from, to := "node-b", "node-c"
	if sitebox.NodeUUID(to) < sitebox.NodeUUID(from) {
		from, to = to, from
	}
	app := apps.AppConfig{UUID: "e7000000-0000-4000-8000-000000000002", DisplayName: "moved-unversioned", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/moved:1", DesignatedNodeID: sitebox.NodeUUID(from), Affinity: apps.AffinityPreferred}
	path := filepath.Join(appsDir, "apps", app.DisplayName+".json")
	writeJSON(t, path, app)
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c")
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{app.DisplayName: app})
	})
	all := []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}
	waitAgents(t, all, app.DisplayName, 60*time.Second, "running on "+from, runningOn(from))

	moved := app
	moved.DesignatedNodeID = sitebox.NodeUUID(to)
	writeJSON(t, path, moved)
	name := apps.WorkloadName(app)
	until(t, 30*time.Second, "the Deployment laid out by "+to+" (the conflict window is minutes)", func() (string, bool) {
		d, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		return d.Annotations[apps.AnnotationLaidOutBy], d.Annotations[apps.AnnotationLaidOutBy] == to
	}, func(by string) string {
		st, _ := agents[to].app(app.DisplayName)
		return fmt.Sprintf("laid out by %s; %s says %q", by, to, st.Error)
	})
	waitAgents(t, all, app.DisplayName, 60*time.Second, "running on "+to, runningOn(to))
}
