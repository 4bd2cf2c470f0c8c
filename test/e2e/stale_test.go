package e2e

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/sitebox"
)

// exitCode is a finished command's exit status (0 when err is nil, -1
// when it did not run to an exit).
func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}

// healthyLine is what the overview says when the cluster says all is well.
const healthyLine = "none: every node ready"

// The console and sitecon status while etcd has no quorum (two of three
// members stopped, the API server up, answering from its watch cache but
// unable to serve a list or a write), as issue 22 found on make demo: the
// console kept "Nodes 3/3 ready" and its green "none" line, the nodes
// screen three Ready. Now every screen says how old its data is, none
// says all is well, the overview says the cluster API is down and why, in
// 80 columns; sitecon status exits 2 and names etcd's quorum. Once etcd
// has its quorum back, the console is live again.
func TestConsoleAndStatusWhenEtcdLosesQuorum(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	c := startConsoleNoColor(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log")
	c.waitScreen(15*time.Second, "the live overview", func(s string) bool {
		return strings.Contains(s, "3/3 ready") && !strings.Contains(s, "STALE")
	})
	t.Cleanup(func() {
		for _, node := range []string{"node-b", "node-c"} {
			if err := site.StartEtcdMember(node); err != nil {
				t.Errorf("etcd of %s: %v", node, err)
			}
		}
		site.WaitSettled(t, 120*time.Second)
	})
	for _, node := range []string{"node-b", "node-c"} {
		if err := site.StopEtcdMember(node); err != nil {
			t.Fatal(err)
		}
	}
	// The snapshot asks /readyz once its watches have been quiet 15s.
	s := c.waitScreen(60*time.Second, "the overview says the cluster API is down", func(s string) bool {
		return strings.Contains(s, "STALE") && strings.Contains(s, "The cluster API is down")
	})
	t.Logf("the overview without quorum:\n%s", s)
	text := strings.Join(strings.Fields(s), " ")
	for _, want := range []string{"Nodes 3/3 ready (as of", "etcd", "more than half the servers down?"} {
		if !strings.Contains(text, want) {
			t.Errorf("the overview does not say %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, healthyLine) {
		t.Errorf("the overview says all is well while etcd has no quorum:\n%s", s)
	}
	c.keys("2")
	s = c.waitScreen(5*time.Second, "the nodes screen", func(s string) bool { return strings.Contains(s, "ROLES") })
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		if l := lineWith(s, node); !regexp.MustCompile(`\bReady\?`).MatchString(l) {
			t.Errorf("%s is drawn as %q, want its last state marked Ready?:\n%s", node, l, s)
		}
	}
	if !regexp.MustCompile(`as of \S+ ago`).MatchString(s) {
		t.Errorf("the nodes screen does not say how old its data is:\n%s", s)
	}
	// Every other screen from the cache says it is stale too.
	for _, key := range []string{"3", "4", "5", "6"} {
		c.keys(key)
		c.waitScreen(5*time.Second, "screen "+key+" marked stale", func(s string) bool {
			return strings.Contains(s, "Cluster API down") && regexp.MustCompile(`as of \S+ ago`).MatchString(s) && !strings.Contains(s, healthyLine)
		})
	}

	start := time.Now()
	_, errOut, err := runSitecon(t, "status", "--kubeconfig", site.Kubeconfig())
	if code := exitCode(err); code != 2 {
		t.Errorf("sitecon status exited %d (%v), want 2 (the cluster API cannot be read); stderr:\n%s", code, err, errOut)
	}
	t.Logf("sitecon status without quorum:\n%s", errOut)
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("sitecon status took %s", took)
	}
	for _, want := range []string{site.Config.Host, "etcd", "quorum"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("sitecon status does not say %q:\n%s", want, errOut)
		}
	}

	for _, node := range []string{"node-b", "node-c"} {
		if err := site.StartEtcdMember(node); err != nil {
			t.Fatal(err)
		}
	}
	c.keys("1")
	c.waitScreen(90*time.Second, "live again", func(s string) bool {
		return !strings.Contains(s, "STALE") && strings.Contains(s, "3/3 ready") && !strings.Contains(s, "as of")
	})
}

// sitecon status's exit status (issue 22, as talosctl health's): 0 when
// all is well, 2 when the cluster API cannot be read (with what was not
// reached, why and what to check), 3 for a usage error. 1 (something
// needs attention) is TestStatusFollowsNodeFailure's.
func TestStatusExitCodes(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	// No agent runs here: no stats leader (an earlier test's agents may
	// have left their lease, run out, which status counts as lost).
	clearStatsLeaderLease(t, clientset(t, site))
	out, errOut, err := runSitecon(t, "status", "--kubeconfig", site.Kubeconfig())
	if code := exitCode(err); code != 0 {
		t.Errorf("status of a settled site exited %d, want 0; stderr %q, stdout:\n%s", code, errOut, out)
	}
	_, errOut, err = runSitecon(t, "status", "--bogus", "--kubeconfig", site.Kubeconfig())
	if code := exitCode(err); code != 3 {
		t.Errorf("status --bogus exited %d (stderr %q), want 3", code, errOut)
	}
	_, errOut, err = runSitecon(t, "status", "-o", "xml", "--kubeconfig", site.Kubeconfig())
	if code := exitCode(err); code != 3 {
		t.Errorf("status -o xml exited %d (stderr %q), want 3", code, errOut)
	}

	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = site.StartAPIServer(ctx)
		site.WaitSettled(t, 120*time.Second)
	})
	out, errOut, err = runSitecon(t, "status", "--kubeconfig", site.Kubeconfig())
	if code := exitCode(err); code != 2 {
		t.Errorf("status with the API server stopped exited %d (%v), want 2; stderr:\n%s", code, err, errOut)
	}
	for _, want := range []string{"the cluster API at " + site.Config.Host + " did not answer within 5s", "connection refused", "is k3s running on a server node?", "etcd quorum"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	if out != "" {
		t.Errorf("stdout = %q, want nothing", out)
	}
}
