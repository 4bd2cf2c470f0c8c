package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/test/syncbuf"
)

// Safety rule 5, end to end: a drain held up by a disruption budget has
// its intent on disk while it runs (the node already cordoned), and the
// SIGHUP a dropped SSH session sends ends it with the outcome
// "interrupted" under the same id; the node stays cordoned, as said.
func TestDrainIntentAndSIGHUP(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	const ns, name, node = "default", "hup-web", "node-c"
	// One replica that prefers node-c, and a budget that allows no
	// disruption: its eviction waits for as long as the drain does.
	pdbGuardedDeployment(t, cs, ns, name, node, 1)
	waitPods(t, cs, ns, metav1.ListOptions{LabelSelector: "app=" + name}, 30*time.Second, "the budgeted pod Ready on "+node, onlyPodReadyOn(node))
	// node-c is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)

	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(sitecon, "drain", node, "--yes", "--timeout", "5m", "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})

	// The intent is on disk while the drain waits on the budget.
	type seen struct {
		intent    audit.Record
		cordoned  bool
		readErr   error
		nodeError error
	}
	intent := until(t, 60*time.Second, "the drain's intent in the audit log while it runs and "+node+" is cordoned", func() (seen, bool) {
		var s seen
		recs, err := audit.Read(auditLog)
		s.readErr = err
		for _, r := range recs {
			if r.Outcome == audit.OutcomeIntent {
				s.intent = r
			}
		}
		if s.intent.Action == "" {
			return s, false
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		s.nodeError, s.cordoned = err, err == nil && n.Spec.Unschedulable
		return s, s.cordoned
	}, func(s seen) string {
		return fmt.Sprintf("intent %+v (read: %v), %s cordoned %v (%v); drain output:\n%s", s.intent, s.readErr, node, s.cordoned, s.nodeError, out.String())
	}).intent
	select {
	case err := <-exited:
		t.Fatalf("the drain ended before the test could read its intent: %v\n%s", err, out.String())
	default:
	}
	if recs, _ := audit.Read(auditLog); len(recs) != 1 || intent.Action != "drain" || intent.Target != node {
		t.Fatalf("while the drain runs the log holds %+v, want only its intent", recs)
	}

	// The SSH session drops: SIGHUP.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if st, ok := err.(*exec.ExitError); !ok || st.Sys().(syscall.WaitStatus).Signaled() {
			t.Fatalf("the drain did not end on its own after SIGHUP: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the drain still runs 60 s after SIGHUP:\n%s", out.String())
	}
	recs, _ := audit.Read(auditLog)
	if len(recs) != 2 {
		t.Fatalf("records after SIGHUP: %+v\n%s", recs, out.String())
	}
	if r := recs[1]; r.ID != intent.ID || r.Outcome != audit.OutcomeInterrupted || !strings.Contains(r.Error, "hangup") || !strings.Contains(r.Error, "stays cordoned") {
		t.Fatalf("outcome after SIGHUP: %+v", r)
	}
}
