package e2e

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// term is one node's time as leader.
type term struct {
	who        string
	start, end time.Time
}

// The stats leader: one of three agents leads; when it dies another takes
// over within the lease duration; the API server restarting does not leave
// the cluster without a leader; and at no moment do two lead.
func TestStatsLeaderElection(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	d := agent.LeaderDurations{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	var mu sync.Mutex
	var terms []term
	electors := map[string]*agent.StatsLeader{}
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		e := &agent.StatsLeader{Client: cs, Identity: node, Durations: d}
		e.OnStarted = func() {
			mu.Lock()
			terms = append(terms, term{who: node, start: time.Now()})
			mu.Unlock()
		}
		e.OnStopped = func() {
			mu.Lock()
			for i := len(terms) - 1; i >= 0; i-- {
				if terms[i].who == node && terms[i].end.IsZero() {
					terms[i].end = time.Now()
					break
				}
			}
			mu.Unlock()
		}
		ctx, cancel := context.WithCancel(context.Background())
		electors[node], cancels[node] = e, cancel
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	leader := func() (string, int) {
		who, n := "", 0
		for node, e := range electors {
			if e.State().IsLeader {
				who, n = node, n+1
			}
		}
		return who, n
	}
	waitLeader := func(within time.Duration, what string) string {
		t.Helper()
		var who string
		err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
			w, n := leader()
			who = w
			return n == 1, nil
		})
		if err != nil {
			t.Fatalf("%s: no single leader within %s", what, within)
		}
		return who
	}
	first := waitLeader(10*time.Second, "first election")

	// The leader's node dies: it stops renewing, without giving the lease up.
	killed := time.Now()
	cancels[first]()
	delete(electors, first)
	second := waitLeader(d.LeaseDuration+2*d.RetryPeriod+2*time.Second, "takeover")
	if second == first {
		t.Fatalf("the dead leader %s still leads", first)
	}
	if took := time.Since(killed); took > d.LeaseDuration+2*d.RetryPeriod+time.Second {
		t.Errorf("takeover took %s, lease duration %s", took, d.LeaseDuration)
	}
	lease, err := cs.CoordinationV1().Leases(kube.AppNamespace).Get(t.Context(), kube.StatsLeaderLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != second || lease.Spec.LeaseTransitions == nil || *lease.Spec.LeaseTransitions < 1 {
		t.Errorf("lease holder %s transitions %v, want %s after at least one transition", *lease.Spec.HolderIdentity, lease.Spec.LeaseTransitions, second)
	}

	// sitecon status names the leader.
	out, errOut, err := runSitecon(t, "status", "-o", "json", "--kubeconfig", site.Kubeconfig())
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var st kube.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.StatsLeader.Holder != second || st.StatsLeader.Expired {
		t.Errorf("status stats leader = %+v, want %s", st.StatsLeader, second)
	}

	// The API server restarts: the leader cannot renew and steps down; once
	// it is back, one node leads again.
	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, d.RenewDeadline+5*time.Second, true, func(context.Context) (bool, error) {
		_, n := leader()
		return n == 0, nil
	})
	if err != nil {
		t.Error("a leader kept leading without the API server past its renew deadline")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := site.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	waitLeader(30*time.Second, "after the API server restart")

	// Never two at once.
	mu.Lock()
	defer mu.Unlock()
	for i := range terms {
		for j := range terms {
			a, b := terms[i], terms[j]
			if i == j {
				continue
			}
			aEnd, bEnd := a.end, b.end
			if aEnd.IsZero() {
				aEnd = time.Now()
			}
			if bEnd.IsZero() {
				bEnd = time.Now()
			}
			if a.start.Before(bEnd) && b.start.Before(aEnd) {
				t.Errorf("%s (%s–%s) and %s (%s–%s) led at once", a.who, a.start.Format(time.StampMilli), aEnd.Format(time.StampMilli), b.who, b.start.Format(time.StampMilli), bEnd.Format(time.StampMilli))
			}
		}
	}
	if len(terms) < 3 {
		t.Errorf("terms = %+v, want a first leader, a takeover and a leader after the restart", terms)
	}
}
