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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
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
		_ = until(t, within, "Deployment "+name+" laid out", func() (error, bool) {
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
	_ = until(t, 30*time.Second, "the app removed with its config file from a readable directory", func() (error, bool) {
		_, err := deployments.Get(ctx, before.Name, metav1.GetOptions{})
		return err, apierrors.IsNotFound(err)
	}, func(err error) string { return fmt.Sprintf("Deployment %s: get: %v", before.Name, err) })
	waitEvent(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": before.Name, "reason": "Removed"}.String()},
		15*time.Second, "a Kubernetes Event for the removal", func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeNormal && strings.Contains(e.Message, "left the config")
		})
}

// A tool that swaps the app files (rm *.json; cp ...) leaves each absent
// for a moment: that is not an intent to remove the app. The agent keeps
// the file's last good version for --app-file-absent-grace and says so in
// its config errors; the file back within the grace changes nothing (the
// Deployment is the same object, never written again). Absent past the
// grace, the app is removed.
func TestAppsFileAbsentForAMomentStopsNothing(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	appsDir, logDir := t.TempDir(), t.TempDir()
	blink := apps.AppConfig{UUID: "e4000000-0000-4000-8000-000000000003", DisplayName: "blink-keep", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/blink:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	path := filepath.Join(appsDir, "apps", blink.DisplayName+".json")
	writeJSON(t, path, blink)
	if err := os.MkdirAll(filepath.Join(appsDir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	const grace = 8 * time.Second
	agents := map[string]*siteAgent{"node-b": startAgentWith(t, site, "node-b", appsDir, logDir, func(o *agent.Options) {
		o.Apps.FileAbsentGrace = grace
	})}
	nodeB := agents["node-b"]
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-b")
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{blink.DisplayName: blink})
	})
	deployments := cs.AppsV1().Deployments(kube.AppNamespace)
	name := apps.WorkloadName(blink)
	before := until(t, 60*time.Second, "Deployment "+name+" laid out", func() (*appsv1.Deployment, bool) {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return d, err == nil
	}, func(*appsv1.Deployment) string { return "not there" })
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func() error {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case d.UID != before.UID || d.DeletionTimestamp != nil:
			return fmt.Errorf("deleted (uid %s → %s, deletion %v)", before.UID, d.UID, d.DeletionTimestamp)
		case d.Generation != before.Generation || siteconApply(d) != siteconApply(before):
			return fmt.Errorf("written again: generation %d → %d", before.Generation, d.Generation)
		}
		return nil
	}

	// rm: the agent reads the absence and holds the app (or deletes it).
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	held := until(t, grace/2, "the agent reports the absent file held, or deletes the app", func() (string, bool) {
		if err := unchanged(); err != nil {
			return err.Error(), true
		}
		msg := nodeB.agent.Apps().Node().ConfigErrors[path]
		return msg, strings.Contains(msg, "absent")
	}, func(msg string) string { return "config error for the file: " + msg })
	if err := unchanged(); err != nil {
		t.Fatalf("the app's file absent for a moment: its Deployment %s: %v (the agent said %q)", name, err, held)
	}
	if st, ok := nodeB.app(blink.DisplayName); !ok || !st.Activate {
		t.Fatalf("while its file is held the app is still configured and active: %+v (found %v)", st, ok)
	}
	// cp: back within the grace; nothing changes, through and past the
	// end of the grace.
	if err := config.WriteFileAtomic(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	holds(t, grace+2*time.Second, "the Deployment stays as it was with its file back", unchanged)
	if msg := nodeB.agent.Apps().Node().ConfigErrors[path]; msg != "" {
		t.Fatalf("the file is back, the agent still reports it: %q", msg)
	}

	// Absent past the grace: the app leaves the config, its Deployment is
	// removed, and not before the grace.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	holds(t, grace-2*time.Second, "the Deployment stays through the grace", unchanged)
	_ = until(t, 20*time.Second, "the app removed once its file stayed absent past the grace", func() (error, bool) {
		_, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return err, apierrors.IsNotFound(err)
	}, func(err error) string { return fmt.Sprintf("Deployment %s: get: %v", name, err) })
}
