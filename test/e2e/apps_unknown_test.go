package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

// The apps directory moved away (a tool swapping it, a config partition
// remounting) is unknown, not empty: the agent keeps every app it runs and
// says removals are held. A directory put back as a new one (a new inode)
// is watched again: a file added to it is laid out at once. Only a file
// removed from a readable directory removes its app, and says so in a
// Kubernetes Event.
func TestAppsDirectoryMovedAwayStopsNothing(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	appsDir, logDir := t.TempDir(), t.TempDir()
	b := sitebox.NodeUUID("node-b")
	keep := apps.AppConfig{UUID: "e4000000-0000-4000-8000-000000000001", DisplayName: "unknown-keep", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/keep:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred}
	added := keep
	added.UUID, added.DisplayName, added.Image = "e4000000-0000-4000-8000-000000000002", "unknown-added", "registry.local/added:1"
	writeJSON(t, filepath.Join(appsDir, "apps", keep.DisplayName+".json"), keep)
	if err := os.MkdirAll(filepath.Join(appsDir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	agents := map[string]*siteAgent{"node-b": startSiteAgent(t, site, "node-b", appsDir, logDir)}
	nodeB := agents["node-b"]
	t.Cleanup(func() {
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{keep.DisplayName: keep, added.DisplayName: added})
	})
	deployments := cs.AppsV1().Deployments(kube.AppNamespace)
	waitDeployment := func(name string, within time.Duration) {
		t.Helper()
		until(t, within, "Deployment "+name+" laid out", func() (error, bool) {
			_, err := deployments.Get(ctx, name, metav1.GetOptions{})
			return err, err == nil
		}, func(err error) string { return fmt.Sprintf("last get: %v", err) })
	}
	waitDeployment(apps.WorkloadName(keep), 60*time.Second)
	before, err := deployments.Get(ctx, apps.WorkloadName(keep), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// apps/ moved away, and something else in the apps dir changes.
	appsSub := filepath.Join(appsDir, "apps")
	if err := os.Rename(appsSub, appsSub+".away"); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(appsDir, "volumes", "unrelated.json"), apps.VolumeConfig{
		UUID: "e4000000-0000-4000-8000-00000000000a", Name: "unrelated", DesignatedNodeID: sitebox.NodeUUID("node-c"), Size: "1Gi", ReplicaCount: 1})
	// Either the agent says it holds removals, or it has deleted the app.
	timeline := func() string {
		var b strings.Builder
		for _, e := range nodeB.agent.Apps().Timeline() {
			fmt.Fprintf(&b, "\n  %s %s %s", e.Kind, e.App, e.Message)
		}
		return b.String()
	}
	gone := until(t, 30*time.Second, "the agent says it holds removals for the missing apps directory", func() (bool, bool) {
		if _, err := deployments.Get(ctx, before.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, true
		}
		for _, e := range nodeB.agent.Apps().Timeline() {
			if strings.Contains(e.Message, "removals held") && strings.Contains(e.Message, appsSub) {
				return false, true
			}
		}
		return false, false
	}, func(bool) string { return "node-b's timeline:" + timeline() })
	if gone {
		t.Fatal("the apps directory moved away: the agent deleted the app's Deployment")
	}
	// The pass that held removals has run; the app is as it was.
	after, err := deployments.Get(ctx, before.Name, metav1.GetOptions{})
	if err != nil || after.UID != before.UID || after.Generation != before.Generation {
		t.Fatalf("the app's Deployment changed while its config was unknown: %v (uid %s → %s, generation %d → %d)",
			err, before.UID, after.UID, before.Generation, after.Generation)
	}
	if st, ok := nodeB.app(keep.DisplayName); !ok || !st.Activate {
		t.Fatalf("the agent no longer gates the app on its node while apps/ is unknown: %+v (found %v)", st, ok)
	}

	// Put back as a new directory (a copy renamed into place: a new inode).
	if out, err := exec.Command("cp", "-a", appsSub+".away", appsSub+".new").CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.Rename(appsSub+".new", appsSub); err != nil {
		t.Fatal(err)
	}
	// A file added to the new directory is seen by the watch, well before
	// the 30 s full re-read.
	writeJSON(t, filepath.Join(appsSub, added.DisplayName+".json"), added)
	waitDeployment(apps.WorkloadName(added), 15*time.Second)

	// A file removed from a readable directory removes its app, with an Event.
	if err := os.Remove(filepath.Join(appsSub, keep.DisplayName+".json")); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "the app removed with its config file from a readable directory", func() (error, bool) {
		_, err := deployments.Get(ctx, before.Name, metav1.GetOptions{})
		return err, apierrors.IsNotFound(err)
	}, func(err error) string { return fmt.Sprintf("Deployment %s: get: %v", before.Name, err) })
	waitEvent(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": before.Name, "reason": "Removed"}.String()},
		15*time.Second, "a Kubernetes Event for the removal", func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeNormal && strings.Contains(e.Message, "left the config")
		})
}
