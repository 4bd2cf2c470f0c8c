package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/apps"
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
	d := apps.LeaderDurations{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	history := watchLeaseHistory(t, cs)
	var mu sync.Mutex
	var terms []term
	electors := map[string]*apps.StatsLeader{}
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		e := &apps.StatsLeader{Client: cs, Identity: node, Durations: d}
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
		type seen struct {
			who string
			n   int
		}
		return until(t, within, what+": a single leader", func() (seen, bool) {
			who, n := leader()
			return seen{who, n}, n == 1
		}, func(s seen) string { return fmt.Sprintf("%d leading", s.n) }).who
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
	if code := exitCode(err); code != 0 && code != 1 { // 1: something needs attention
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
	if who, stepped := poll(pollEvery, d.RenewDeadline+5*time.Second, func() (string, bool) {
		who, n := leader()
		return who, n == 0
	}); !stepped {
		t.Errorf("the leader steps down without the API server: %s still leads %s after, past its renew deadline", who, d.RenewDeadline+5*time.Second)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := site.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	waitLeader(30*time.Second, "after the API server restart")
	// The site's simulators, on re-list backoff, must be live for the next test.
	t.Cleanup(func() { site.WaitSimulatorsLive(t, 90*time.Second) })

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
	// And as the cluster recorded it: each new holder acquired the Lease
	// only after the previous holder's last renewal had expired (or it gave
	// the Lease up).
	changes := 0
	for _, x := range history.holderChanges() {
		changes++
		if x.prev.holder == "" || x.prev.released {
			continue
		}
		expired := x.prev.renew.Add(time.Duration(x.prev.durationSeconds) * time.Second)
		if x.next.acquire.Before(expired.Add(-10 * time.Millisecond)) {
			t.Errorf("%s acquired the Lease at %s while %s's renewal of %s held until %s",
				x.next.holder, x.next.acquire.Format(time.StampMilli), x.prev.holder, x.prev.renew.Format(time.StampMilli), expired.Format(time.StampMilli))
		}
	}
	if changes < 1 {
		t.Errorf("the Lease history shows no change of holder: %+v", history.versions())
	}
}

// leaseVersion is one version of the stats-leader Lease.
type leaseVersion struct {
	holder          string
	acquire, renew  time.Time
	durationSeconds int32
	released        bool
}

type leaseHistory struct {
	mu   sync.Mutex
	seen []leaseVersion
}

func (h *leaseHistory) versions() []leaseVersion {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

type holderChange struct{ prev, next leaseVersion }

// holderChanges pairs each version whose holder differs from the one
// before with the last version of that previous holder.
func (h *leaseHistory) holderChanges() []holderChange {
	var out []holderChange
	v := h.versions()
	for i := 1; i < len(v); i++ {
		if v[i].holder != v[i-1].holder && v[i].holder != "" {
			out = append(out, holderChange{v[i-1], v[i]})
		}
	}
	return out
}

// watchLeaseHistory records every version of the stats-leader Lease the
// API server hands out, from a watch, until the test ends.
func watchLeaseHistory(t *testing.T, cs kubernetes.Interface) *leaseHistory {
	h := &leaseHistory{}
	record := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		v := leaseVersion{holder: ptr.Deref(l.Spec.HolderIdentity, ""), durationSeconds: ptr.Deref(l.Spec.LeaseDurationSeconds, 0)}
		if l.Spec.AcquireTime != nil {
			v.acquire = l.Spec.AcquireTime.Time
		}
		if l.Spec.RenewTime != nil {
			v.renew = l.Spec.RenewTime.Time
		}
		// client-go gives a Lease up by clearing the holder with a 1 s duration.
		v.released = v.holder == "" || v.durationSeconds == 1
		h.mu.Lock()
		h.seen = append(h.seen, v)
		h.mu.Unlock()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(kube.AppNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + kube.StatsLeaderLeaseName }))
	inf := factory.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("lease informer never synced")
	}
	return h
}
