package e2e

import (
	"context"
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
	"k8s.io/apimachinery/pkg/util/wait"

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
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			_, err := deployments.Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatalf("Deployment %s not laid out within %s", name, within)
		}
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
	gone := false
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := deployments.Get(ctx, before.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			gone = true
			return true, nil
		}
		for _, e := range nodeB.agent.Apps().Timeline() {
			if strings.Contains(e.Message, "removals held") && strings.Contains(e.Message, appsSub) {
				return true, nil
			}
		}
		return false, nil
	})
	if gone {
		t.Fatal("the apps directory moved away: the agent deleted the app's Deployment")
	}
	if err != nil {
		t.Fatal("the agent never said it holds removals for the missing apps directory")
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
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := deployments.Get(ctx, before.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("a config file removed from a readable directory did not remove its app")
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(kube.AppNamespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.name": before.Name, "reason": "Removed"}.String()})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeNormal && strings.Contains(e.Message, "left the config") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Error("the removal left no Kubernetes Event")
	}
}
