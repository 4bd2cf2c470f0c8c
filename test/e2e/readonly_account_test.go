package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/test/sitebox"
)

// Issue 37 (docs/SECURITY.md gap 5): read-only is the cluster's word. The
// kubeconfig `sitecon readonly-kubeconfig` writes reads everything the
// console reads (a snapshot syncs with it, `sitecon status` and the doctor
// run with it and are refused nothing), and the API server refuses it
// every write and every Secret; the console run with it offers no action;
// --revoke ends its token.
func TestReadOnlyKubeconfig(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	path := filepath.Join(t.TempDir(), "readonly.kubeconfig")
	out, err := act(t, site, auditLog, "readonly-kubeconfig", "--out", path, "--valid", "1h")
	if err != nil || !strings.Contains(out, "changes nothing") {
		t.Fatalf("readonly-kubeconfig: %v\n%s", err, out)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the kubeconfig: %v, mode %v; want 0600", err, st.Mode())
	}
	if rec := lastAudit(t, auditLog); rec.Action != "readonly-kubeconfig" || rec.Outcome != "done" {
		t.Errorf("audit: %+v", rec)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)

	// Reads what sitecon reads: the console's read model syncs.
	sitebox.StartSnapshot(t, cfg)
	if out, errOut, err := runSitecon(t, "status", "--kubeconfig", path); !strings.Contains(out, "node-a") || strings.Contains(out+errOut, "forbidden") {
		t.Errorf("status with the read-only kubeconfig: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, _ := runSitecon(t, "doctor", "--kubeconfig", path, "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl")); strings.Contains(strings.ToLower(out+errOut), "forbidden") {
		t.Errorf("the doctor was refused a read:\n%s%s", out, errOut)
	}

	// Writes nothing, reads no Secret.
	ctx := context.Background()
	if _, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list Secrets: %v, want Forbidden", err)
	}
	// sitecon's ConfigMaps, in the app namespace; no other namespace's.
	if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list the app namespace's ConfigMaps: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list kube-system's ConfigMaps: %v, want Forbidden", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "readonly-probe", Namespace: kube.AppNamespace}}
	if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create a ConfigMap: %v, want Forbidden", err)
	}
	if may, err := access.MayChangeNodes(ctx, cs); err != nil || may {
		t.Errorf("MayChangeNodes: %v, %v; want false", may, err)
	}
	out, errOut, err := runSitecon(t, "cordon", "node-a", "--yes", "--kubeconfig", path, "--audit-log", auditLog)
	if err == nil || !strings.Contains(strings.ToLower(out+errOut), "forbidden") {
		t.Errorf("cordon with the read-only kubeconfig: %v\n%s%s; want refused by the API server", err, out, errOut)
	}
	if n, err := clientset(t, site).CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node-a after the refused cordon: unschedulable %v, %v", n.Spec.Unschedulable, err)
	}

	// The console run with it offers no action, and says why.
	c := startConsole(t, "--kubeconfig", path, "--log-file", t.TempDir()+"/console.log")
	c.waitScreen(15*time.Second, "overview, read-only", func(s string) bool {
		return strings.Contains(s, "3/3 ready") && strings.Contains(s, "read-only")
	})
	c.keys("2")
	c.waitScreen(5*time.Second, "nodes screen", func(s string) bool { return strings.Contains(s, "ROLES") })
	// c would ask to cordon; then ? would go to that dialog. Read-only,
	// the help opens, and offers no action.
	c.keys("c", "?")
	s := c.waitScreen(5*time.Second, "the help after c", func(s string) bool { return strings.Contains(s, "go back") })
	if strings.Contains(s, "cordon") || strings.Contains(s, "drain") {
		t.Errorf("the read-only console offers actions:\n%s", s)
	}

	// Revoked: the token no longer reads anything.
	if out, err := act(t, site, auditLog, "readonly-kubeconfig", "--revoke"); err != nil {
		t.Fatalf("--revoke: %v\n%s", err, out)
	}
	_ = until(t, 20*time.Second, "the revoked token refused", func() (error, bool) {
		_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err, apierrors.IsUnauthorized(err)
	}, func(err error) string { return "list nodes: " + errString(err) })
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
