package apps

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/workloads"
)

// The fence comes before the force-delete with the margin the derivation
// states, for the shipped default and for the short timings a 60 s
// recovery needs; a failover timeout too short to leave a fence bound is
// raised, never the fence squeezed to nothing.
func TestDeriveFenceTimings(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second, 15 * time.Second, 20 * time.Second, 30 * time.Second, DefaultFailoverTimeout, 10 * time.Minute} {
		ft := DeriveFenceTimings(timeout)
		if timeout >= MinFailoverTimeout && ft.ForceDeleteAfter != timeout {
			t.Errorf("timeout %s: the leader's timer became %s; only a timeout below %s is raised", timeout, ft.ForceDeleteAfter, MinFailoverTimeout)
		}
		if timeout < MinFailoverTimeout && ft.ForceDeleteAfter != MinFailoverTimeout {
			t.Errorf("timeout %s: the leader's timer is %s, want it raised to %s", timeout, ft.ForceDeleteAfter, MinFailoverTimeout)
		}
		if ft.FenceAfter < MinFenceAfter {
			t.Errorf("timeout %s: fence after %s, below the %s a blip needs", timeout, ft.FenceAfter, MinFenceAfter)
		}
		// The fence is done (found at the next check, the check's probes
		// answered or timed out, the pods stopped) before the leader's
		// timer can run out, with a tenth of the timer to spare.
		done := ft.FenceAfter + fenceCheckEvery + probeTimeout + fenceStopBudget
		if spare := ft.ForceDeleteAfter - done; spare < ft.ForceDeleteAfter/10 {
			t.Errorf("timeout %s: fence done at %s, force-delete at %s: %s to spare, want at least %s",
				timeout, done, ft.ForceDeleteAfter, spare, ft.ForceDeleteAfter/10)
		}
		if ft.Margin != ft.ForceDeleteAfter-ft.FenceAfter {
			t.Errorf("timeout %s: margin %s is not the difference of %s and %s", timeout, ft.Margin, ft.ForceDeleteAfter, ft.FenceAfter)
		}
	}
	if ft := DeriveFenceTimings(DefaultFailoverTimeout); ft.FenceAfter != 16200*time.Millisecond {
		t.Errorf("the default 28 s failover timeout: fence after %s, want 16.2s", ft.FenceAfter)
	}
}

// A node fences only when it has reached neither the API server nor any
// peer for the whole bound, measured on the monotonic clock: a wall clock
// stepped forward does not fence early, one stepped back does not fence
// late. Contact again lifts the fence.
func TestFenceDecision(t *testing.T) {
	const bound = 45 * time.Second
	wall := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	type check struct {
		mono      time.Duration // since the watch started (monotonic)
		wallShift time.Duration // the wall clock's step, from wall+mono
		api, peer bool
		ago       time.Duration // the peer's contact age
		want      FenceAction
	}
	for name, checks := range map[string][]check{
		"API and peers silent past the bound: fence, and keep stopping what restarts": {
			{mono: 0, api: true, want: FenceNone},
			{mono: 2 * time.Second, want: FenceNone},
			{mono: 44 * time.Second, want: FenceNone},
			{mono: 45 * time.Second, want: FenceStop},
			{mono: 47 * time.Second, want: FenceStop},
		},
		"API back before the bound: nothing stopped": {
			{mono: 0, api: true},
			{mono: 30 * time.Second},
			{mono: 44 * time.Second, api: true},
			{mono: 80 * time.Second},
			{mono: 88 * time.Second, want: FenceNone},
		},
		"the API down here but a peer proves it reaches one (k3s restarting here): not cut off": {
			{mono: 0, api: true},
			{mono: 10 * time.Second, peer: true},
			{mono: 100 * time.Second, peer: true},
			{mono: 140 * time.Second, want: FenceNone},
		},
		// A peer's contact counts from when the peer itself reached the
		// API server, not from its answer: relayed contact never
		// stretches the bound (DeriveFenceTimings' order holds).
		"a peer's contact 4 s old: the bound counts from that contact": {
			{mono: 0, api: true},
			{mono: 10 * time.Second, peer: true, ago: 4 * time.Second},
			{mono: 50 * time.Second, want: FenceNone},
			{mono: 51 * time.Second, want: FenceStop},
		},
		"an old relayed contact does not move a newer one back": {
			{mono: 0, api: true},
			{mono: 10 * time.Second, api: true},
			{mono: 11 * time.Second, peer: true, ago: 5 * time.Second},
			{mono: 54 * time.Second, want: FenceNone},
			{mono: 55 * time.Second, want: FenceStop},
		},
		"a peer in contact, then none: the bound counts from that answer": {
			{mono: 0, api: true},
			{mono: 30 * time.Second, peer: true},
			{mono: 74 * time.Second, want: FenceNone},
			{mono: 75 * time.Second, want: FenceStop},
		},
		"wall clock stepped forward an hour: no early fence": {
			{mono: 0, api: true},
			{mono: 2 * time.Second, wallShift: time.Hour, want: FenceNone},
			{mono: 40 * time.Second, wallShift: time.Hour, want: FenceNone},
			{mono: 45 * time.Second, wallShift: time.Hour, want: FenceStop},
		},
		"wall clock stepped back an hour: no late fence": {
			{mono: 0, api: true},
			{mono: 2 * time.Second, wallShift: -time.Hour, want: FenceNone},
			{mono: 45 * time.Second, wallShift: -time.Hour, want: FenceStop},
		},
		"contact again lifts the fence": {
			{mono: 0, api: true},
			{mono: 50 * time.Second, want: FenceStop},
			{mono: 52 * time.Second, api: true, want: FenceLift},
			{mono: 54 * time.Second, api: true, want: FenceNone},
			{mono: 60 * time.Second, want: FenceNone},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var st FenceState
			for i, c := range checks {
				v := st.Observe(FenceCheck{Mono: c.mono, Wall: wall.Add(c.mono + c.wallShift), APIReachable: c.api, PeerInContact: c.peer, ContactAgo: c.ago}, bound)
				if c.want == "" {
					c.want = FenceNone
				}
				if v.Action != c.want {
					t.Fatalf("check %d at %s (wall %+v): %s (%s), want %s", i, c.mono, c.wallShift, v.Action, v.Reason, c.want)
				}
			}
		})
	}
}

// peerAt is a Node named name whose InternalIP the probe's dialer sends to
// addr (a loopback test server).
func peerAt(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.44." + name[len(name)-1:]}}}}
}

// A cut-off group of two (a server whose API server lost quorum and a
// worker beside it) answers each other: a peer's answer is contact only
// when the peer proves that it reaches a ready API server itself.
func TestFenceCheckCountsOnlyPeersInContact(t *testing.T) {
	key := testLifeKey(t, "cluster-password")
	noQuorum := func(context.Context) error { return errors.New("readyz: etcd has no quorum") }
	ready := func(context.Context) error { return nil }
	// status is a peer agent's record: reached the quorum ago (<0: never).
	status := func(ago time.Duration) *config.LifeStatus {
		st := config.NewLifeStatus(true, DefaultFailoverTimeout)
		if ago >= 0 {
			st.QuorumContact(time.Now().Add(-ago))
		}
		return st
	}
	for _, c := range []struct {
		name    string
		api     func(context.Context) error
		peer    http.Handler // nil: no peer at all
		contact bool
	}{
		{"API ready", ready, nil, true},
		// The other half of the cut-off pair: its agent answers, proving
		// only that it runs (an older agent's answer says no more).
		{"a peer that answers but claims no contact", noQuorum, config.LifeProofHandler(key, "node-b", nil), false},
		{"a peer that never reached the quorum since it started", noQuorum, config.LifeProofHandler(key, "node-b", status(-1)), false},
		{"a peer whose last contact is old", noQuorum, config.LifeProofHandler(key, "node-b", status(peerContactFresh+time.Second)), false},
		{"a peer in contact just now (k3s restarting here)", noQuorum, config.LifeProofHandler(key, "node-b", status(time.Second)), true},
		// A peer's claim of contact counts only signed by the cluster's key.
		{"another cluster's agent in contact", noQuorum, config.LifeProofHandler(testLifeKey(t, "other-password"), "node-b", status(0)), false},
		{"no peer answers", noQuorum, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := refusingAddr(t)
			if c.peer != nil {
				addr = serve(t, c.peer)
			}
			probe := LifeProbe{Key: key, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}
			check := fenceCheckWith(context.Background(), c.api, []*corev1.Node{peerAt("node-b")}, probe.Node)
			if got := check.APIReachable || check.PeerInContact; got != c.contact {
				t.Fatalf("%+v: contact %v, want %v", check, got, c.contact)
			}
		})
	}
}

// An agent restarted while its node is cut off fences too: before the
// cluster cache has anything, the watch fences from its durable record of
// the peers and the auto pods, written by the run before.
func TestFenceWatchFencesFromItsRecordBeforeTheCacheAnswers(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/" + FenceRecordFile
	data, _ := json.Marshal(fenceRecord{Node: "node-a", Peers: []fencePeer{{Name: "node-b", Address: "127.0.44.2"}},
		AutoPods: []string{"uid-auto-1", "uid-auto-2"}, Written: &metav1.Time{Time: time.Now()}})
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var probed []string
	stopped := make(chan []string, 100)
	life := config.NewLifeStatus(true, DefaultFailoverTimeout)
	w := &FenceWatch{Node: "node-a", Bound: 50 * time.Millisecond, RecordPath: path, Status: life,
		APIReady: func(context.Context) error { return errors.New("connection refused") },
		Peers:    func() []*corev1.Node { return nil }, // the cache is empty: the API never answered
		AutoPods: func() ([]string, []string, bool) { return nil, nil, false },
		Probe: func(_ context.Context, n *corev1.Node) NodeLife {
			mu.Lock()
			defer mu.Unlock()
			probed = append(probed, n.Name+"@"+internalIP(n))
			return NodeLife{Evidence: LifeSilent}
		},
		Stop: func(_ context.Context, uids []string) (workloads.Report, error) {
			stopped <- uids
			return workloads.Report{}, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case uids := <-stopped:
		if !slices.Equal(uids, []string{"uid-auto-1", "uid-auto-2"}) {
			t.Fatalf("stopped %v, want the record's auto pods", uids)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never fenced from its record")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(probed) == 0 || probed[0] != "node-b@127.0.44.2" {
		t.Errorf("probed %v, want the record's peer at its address", probed)
	}
	if w.Reason() == "" {
		t.Error("fenced without a reason in the node's status")
	}
	// Said once the stop returned: wait for it, with a deadline.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, ok := life.State(time.Now()).FencedFor(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proof of life does not say the node fenced: %+v", life.State(time.Now()))
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// The record follows the cache and the apps part, is written whole, and a
// record of another node's, or one that cannot be read, is not used.
func TestFenceRecordFollowsTheCache(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/" + FenceRecordFile
	peers := []*corev1.Node{peerAt("node-a"), peerAt("node-b"), peerAt("node-c")}
	pods := []string{"uid-2", "uid-1"}
	w := &FenceWatch{Node: "node-a", RecordPath: path, Log: slog.New(slog.DiscardHandler),
		Peers: func() []*corev1.Node { return peers }, AutoPods: func() ([]string, []string, bool) { return pods, nil, true }}
	gotPeers, gotPods, _, known := w.sources()
	if len(gotPeers) != 2 || !known || len(gotPods) != 2 {
		t.Fatalf("peers %d, pods %v (known %v): want node-b and node-c, and both pods", len(gotPeers), gotPods, known)
	}
	var rec fenceRecord
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil || rec.Node != "node-a" || !slices.Equal(rec.AutoPods, []string{"uid-1", "uid-2"}) || len(rec.Peers) != 2 {
		t.Fatalf("record %+v, %v", rec, err)
	}
	// A fresh watch of node-b must not take node-a's record for its own.
	other := &FenceWatch{Node: "node-b", RecordPath: path, Log: slog.New(slog.DiscardHandler),
		Peers: func() []*corev1.Node { return nil }, AutoPods: func() ([]string, []string, bool) { return nil, nil, false }}
	other.loadRecord()
	if _, pods, _, known := other.sources(); known || len(pods) > 0 {
		t.Fatalf("node-b used node-a's record: %v", pods)
	}
	// An unreadable record is none.
	if err := os.WriteFile(path, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := &FenceWatch{Node: "node-a", RecordPath: path, Log: slog.New(slog.DiscardHandler),
		Peers: func() []*corev1.Node { return nil }, AutoPods: func() ([]string, []string, bool) { return nil, nil, false }}
	again.loadRecord()
	if _, pods, _, known := again.sources(); known || len(pods) > 0 {
		t.Fatalf("a half-written record was used: %v", pods)
	}
}

// Issue 36, found by the fault explorer (TestChaosShortSchedule): an agent
// restarted while its node is cut off counted the fence bound from its own
// start, not from the node's last contact with the quorum, so its fence
// came the restart's time (and its bring-up's) late: after the leader's
// force-delete, which counts from the node's silence. The last contact is
// kept in the record on the boot's clock (CLOCK_BOOTTIME and the boot ID,
// which a restart keeps and a clock step does not move): a watch restarted
// in the same boot counts from it; one after a reboot (nothing runs any
// more) counts from its start.
func TestFenceWatchRestartedCutOffCountsFromTheLastContact(t *testing.T) {
	const bound = 20 * time.Second
	boot := func(id string, at time.Duration) func() (string, time.Duration, error) {
		start := time.Now()
		return func() (string, time.Duration, error) { return id, at + time.Since(start), nil }
	}
	run := func(t *testing.T, rec fenceRecord, clock func() (string, time.Duration, error), apiUp bool) (*FenceWatch, chan []string, context.CancelFunc) {
		dir := t.TempDir()
		path := dir + "/" + FenceRecordFile
		rec.Node, rec.Written = "node-a", &metav1.Time{Time: time.Now()}
		data, _ := json.Marshal(rec)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		w, stopped := recordOnlyWatch(path, config.NewLifeStatus(true, DefaultFailoverTimeout), clock, apiUp)
		w.Bound = bound
		ctx, cancel := context.WithCancel(context.Background())
		go w.Run(ctx)
		return w, stopped, cancel
	}

	t.Run("same boot, last contact longer ago than the bound: fences at once", func(t *testing.T) {
		rec := fenceRecord{AutoPods: []string{"uid-auto"}, Contact: &fenceContact{BootID: "boot-1", Boot: 70 * time.Second}}
		_, stopped, cancel := run(t, rec, boot("boot-1", 100*time.Second), false)
		defer cancel()
		select {
		case uids := <-stopped:
			if !slices.Equal(uids, []string{"uid-auto"}) {
				t.Fatalf("stopped %v", uids)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the restarted watch did not fence within 5 s though its last contact was 30 s ago (bound 20 s): it counts from its own start")
		}
	})
	t.Run("another boot: counts from its start", func(t *testing.T) {
		rec := fenceRecord{AutoPods: []string{"uid-auto"}, Contact: &fenceContact{BootID: "boot-0", Boot: 70 * time.Second}}
		w, stopped, cancel := run(t, rec, boot("boot-1", 100*time.Second), false)
		defer cancel()
		select {
		case uids := <-stopped:
			t.Fatalf("fenced %v at once from a contact of an earlier boot", uids)
		case <-time.After(3 * fenceCheckEvery): // three checks: a fence would have come at the first
		}
		if r := w.Reason(); r != "" {
			t.Errorf("reason %q", r)
		}
	})
	t.Run("in contact: the record keeps the contact on the boot's clock", func(t *testing.T) {
		w, _, cancel := run(t, fenceRecord{}, boot("boot-7", 500*time.Second), true)
		defer cancel()
		for deadline := time.Now().Add(5 * time.Second); ; {
			data, _ := os.ReadFile(w.RecordPath)
			var rec fenceRecord
			if json.Unmarshal(data, &rec) == nil && rec.Contact != nil {
				if rec.Contact.BootID != "boot-7" || rec.Contact.Boot < 500*time.Second || rec.Contact.Boot > 510*time.Second {
					t.Fatalf("contact %+v, want boot-7 at about 500 s", rec.Contact)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no contact in the record: %s", data)
			}
			time.Sleep(20 * time.Millisecond) // polling a file with a deadline
		}
	})
}

// A record written while the pods were not yet known (the peers came
// first, from the cache's first kinds) is not, after a restart, a record
// of no pods: the restarted watch would fence and stop nothing while
// saying, signed, that it fenced.
func TestFenceRecordOfUnknownPodsIsNotNoPods(t *testing.T) {
	path := t.TempDir() + "/" + FenceRecordFile
	peers := []*corev1.Node{peerAt("node-b")}
	first := &FenceWatch{Node: "node-a", RecordPath: path, Log: slog.New(slog.DiscardHandler),
		Peers: func() []*corev1.Node { return peers }, AutoPods: func() ([]string, []string, bool) { return nil, nil, false }}
	first.sources()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the peers were not recorded: %v", err)
	}
	restarted := &FenceWatch{Node: "node-a", RecordPath: path, Log: slog.New(slog.DiscardHandler),
		Peers: func() []*corev1.Node { return nil }, AutoPods: func() ([]string, []string, bool) { return nil, nil, false }}
	restarted.loadRecord()
	gotPeers, pods, _, known := restarted.sources()
	if known {
		t.Errorf("pods %v known from a record written before any pod was known", pods)
	}
	if len(gotPeers) != 1 {
		t.Errorf("peers %d, want the recorded node-b", len(gotPeers))
	}
	// Once known (none, or some), they are known after a restart.
	first.AutoPods = func() ([]string, []string, bool) { return []string{}, nil, true }
	first.sources()
	again := &FenceWatch{Node: "node-a", RecordPath: path, Log: slog.New(slog.DiscardHandler),
		Peers: func() []*corev1.Node { return nil }, AutoPods: func() ([]string, []string, bool) { return nil, nil, false }}
	again.loadRecord()
	if _, pods, _, known := again.sources(); !known || len(pods) != 0 {
		t.Errorf("pods %v known %v, want none, known", pods, known)
	}
}

// The agent starts the fence watch before its bring-up asks its peers or
// starts k3s (seconds, while the leader's timer runs): not yet connected
// to the cluster cache, NewFenceWatch's watch counts the API server as
// unreachable and fences from its record.
func TestNewFenceWatchFencesBeforeItIsConnected(t *testing.T) {
	dir := t.TempDir()
	id, since, err := bootClock()
	if err != nil {
		t.Skipf("no boot clock here: %v", err)
	}
	known := true
	rec := fenceRecord{Node: "node-a", AutoPods: []string{"uid-auto"}, PodsKnown: &known, Written: &metav1.Time{Time: time.Now()},
		Contact: &fenceContact{BootID: id, Boot: since - time.Minute}}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(dir+"/"+FenceRecordFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan []string, 10)
	opts := Options{NodeName: "node-a", StateDir: dir, FailoverTimeout: DefaultFailoverTimeout,
		NodeProbe: func(context.Context, *corev1.Node) NodeLife { return NodeLife{Evidence: LifeSilent} }}
	opts.Fence.Stop = func(_ context.Context, uids []string) (workloads.Report, error) {
		stopped <- uids
		return workloads.Report{}, nil
	}
	w := NewFenceWatch(opts, config.NewLifeStatus(true, DefaultFailoverTimeout))
	if err := w.APIReady(context.Background()); err == nil {
		t.Fatal("the API counts as ready before the watch is connected")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case uids := <-stopped:
		if !slices.Equal(uids, []string{"uid-auto"}) {
			t.Fatalf("stopped %v, want the record's pod", uids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not fenced from the record before being connected, a minute after the last contact")
	}
}

// A fence kills its pods again at every check while cut off, and the
// kubelet's crash back-off doubles at each kill, up to 5 minutes. Once the
// fence lifts and the API server answers, the pods it stopped are renewed
// (their controllers start them afresh), retried while that fails; never
// while the node is still cut off, and not again once done.
func TestFenceLiftRenewsThePodsItStopped(t *testing.T) {
	var apiUp sync.Mutex
	up := false
	setAPI := func(v bool) { apiUp.Lock(); up = v; apiUp.Unlock() }
	stopped := make(chan []string, 100)
	renewed := make(chan []string, 100)
	var renewCalls sync.Mutex
	failFirst := true
	w := &FenceWatch{Node: "node-a", Bound: 50 * time.Millisecond, Status: config.NewLifeStatus(true, DefaultFailoverTimeout),
		APIReady: func(context.Context) error {
			apiUp.Lock()
			defer apiUp.Unlock()
			if up {
				return nil
			}
			return errors.New("i/o timeout")
		},
		Peers:    func() []*corev1.Node { return nil },
		AutoPods: func() ([]string, []string, bool) { return []string{"uid-auto"}, nil, true },
		Probe:    func(context.Context, *corev1.Node) NodeLife { return NodeLife{Evidence: LifeSilent} },
		Stop: func(_ context.Context, uids []string) (workloads.Report, error) {
			stopped <- uids
			return workloads.Report{}, nil
		},
		Renew: func(_ context.Context, uids []string) ([]string, error) {
			renewed <- uids
			renewCalls.Lock()
			defer renewCalls.Unlock()
			if failFirst {
				failFirst = false
				return nil, errors.New("the API server refused")
			}
			return uids, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("never fenced")
	}
	select {
	case uids := <-renewed:
		t.Fatalf("renewed %v while still cut off", uids)
	case <-time.After(3 * fenceCheckEvery): // three checks, each of which would have renewed
	}
	setAPI(true)
	for i, want := range []string{"the first try (refused)", "the retry"} {
		select {
		case uids := <-renewed:
			if !slices.Equal(uids, []string{"uid-auto"}) {
				t.Fatalf("%s renewed %v, want the pod the fence stopped", want, uids)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no renewal (%d: %s) after the fence lifted", i, want)
		}
	}
	select {
	case uids := <-renewed:
		t.Fatalf("renewed %v again, after it was done", uids)
	case <-time.After(3 * fenceCheckEvery):
	}
}

// The fence stops every app pod the node's kubelet started that it does
// not know as a pinned app's, not only the auto pods the cluster or its
// record named: a restart cut off with a record that missed a pod (written
// before the pods were known, or not at all on a full disk) still stops
// it. The fence is signed as done when the node's own list was read, even
// with the pods unknown; not when neither could be read.
func TestFenceStopsEveryAppPodNotKnownPinned(t *testing.T) {
	run := func(t *testing.T, auto, pinned []string, known bool, onNode func() ([]string, error)) ([]string, *config.LifeStatus) {
		stopped := make(chan []string, 100)
		life := config.NewLifeStatus(true, DefaultFailoverTimeout)
		w := &FenceWatch{Node: "node-a", Bound: 50 * time.Millisecond, Status: life,
			APIReady: func(context.Context) error { return errors.New("i/o timeout") },
			Peers:    func() []*corev1.Node { return nil },
			AutoPods: func() ([]string, []string, bool) { return auto, pinned, known },
			Probe:    func(context.Context, *corev1.Node) NodeLife { return NodeLife{Evidence: LifeSilent} },
			Stop: func(_ context.Context, uids []string) (workloads.Report, error) {
				stopped <- uids
				return workloads.Report{}, nil
			},
			PodsOnNode: onNode}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go w.Run(ctx)
		select {
		case uids := <-stopped:
			slices.Sort(uids)
			// Signed once the stop returned: the second stop comes after.
			<-stopped
			return uids, life
		case <-time.After(10 * time.Second):
			t.Fatal("never fenced")
		}
		return nil, nil
	}
	fenced := func(life *config.LifeStatus) bool {
		_, ok := life.State(time.Now()).FencedFor()
		return ok
	}
	t.Run("known pods: a pod the cache missed is stopped, the pinned one spared", func(t *testing.T) {
		got, life := run(t, []string{"uid-auto"}, []string{"uid-pinned"}, true, func() ([]string, error) {
			return []string{"uid-auto", "uid-new", "uid-pinned"}, nil
		})
		if !slices.Equal(got, []string{"uid-auto", "uid-new"}) {
			t.Errorf("stopped %v, want the auto pod and the one not known (never the pinned)", got)
		}
		if !fenced(life) {
			t.Error("the fence is not signed as done")
		}
	})
	t.Run("pods unknown: every app pod on the node is stopped, and the fence signed", func(t *testing.T) {
		got, life := run(t, nil, nil, false, func() ([]string, error) { return []string{"uid-1", "uid-2"}, nil })
		if !slices.Equal(got, []string{"uid-1", "uid-2"}) {
			t.Errorf("stopped %v, want every app pod the node runs", got)
		}
		if !fenced(life) {
			t.Error("the fence of every app pod the node runs is not signed as done")
		}
	})
	t.Run("pods unknown and the node's list unreadable: not signed", func(t *testing.T) {
		got, life := run(t, nil, nil, false, func() ([]string, error) { return nil, errors.New("permission denied") })
		if len(got) != 0 {
			t.Errorf("stopped %v", got)
		}
		if fenced(life) {
			t.Error("signed as fenced with nothing known to stop")
		}
	})
}

// recordOnlyWatch is node-a's fence watch as an agent restarted with the
// cache empty has it: its record at path, no peer answering, the API
// server up or not; what it stops is sent on stopped.
func recordOnlyWatch(path string, status *config.LifeStatus, clock func() (string, time.Duration, error), apiUp bool) (w *FenceWatch, stopped chan []string) {
	stopped = make(chan []string, 100)
	w = &FenceWatch{Node: "node-a", RecordPath: path, Status: status, BootClock: clock,
		APIReady: func(context.Context) error {
			if apiUp {
				return nil
			}
			return errors.New("i/o timeout")
		},
		Peers:    func() []*corev1.Node { return nil },
		AutoPods: func() ([]string, []string, bool) { return nil, nil, false },
		Probe:    func(context.Context, *corev1.Node) NodeLife { return NodeLife{Evidence: LifeSilent} },
		Stop: func(_ context.Context, uids []string) (workloads.Report, error) {
			stopped <- uids
			return workloads.Report{}, nil
		}}
	return w, stopped
}
