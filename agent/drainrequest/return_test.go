package drainrequest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
)

// nodeSeen is one state of the drained node: gone (its Node deleted), or
// Ready or not with the boot ID its status reports; uid tells a
// re-created Node from the first.
type nodeSeen struct {
	gone  bool
	ready bool
	boot  string
	uid   string
}

func (s nodeSeen) node(name string, cordoned bool) *corev1.Node {
	status := corev1.ConditionFalse
	if s.ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(s.uid)},
		Spec:       corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			NodeInfo:   corev1.NodeSystemInfo{BootID: s.boot},
		},
	}
}

// fakeSite is a started snapshot over a fake cluster holding node-a as
// first (cordoned); set makes the Node as a later state says (keeping its
// cordon; a re-created one is not cordoned), and waits until the
// snapshot has it. For a synctest bubble.
func fakeSite(t *testing.T, ctx context.Context, first nodeSeen) (*kube.Snapshot, *fake.Clientset, func(nodeSeen)) {
	t.Helper()
	cs := fake.NewClientset(first.node("node-a", true))
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	snap, err := kube.NewSnapshot(cfg, nil, kube.WithClients(&kube.Clients{Config: cfg, Core: cs}))
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(ctx)
	if err := snap.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	nodes := cs.CoreV1().Nodes()
	set := func(s nodeSeen) {
		t.Helper()
		was, err := nodes.Get(ctx, "node-a", metav1.GetOptions{})
		switch {
		case s.gone:
			err = nodes.Delete(ctx, "node-a", metav1.DeleteOptions{})
		case err != nil:
			_, err = nodes.Create(ctx, s.node("node-a", false), metav1.CreateOptions{})
		case was.UID != types.UID(s.uid):
			t.Fatalf("node-a re-created (uid %s) while the old one (%s) is still there", s.uid, was.UID)
		default:
			_, err = nodes.Update(ctx, s.node("node-a", was.Spec.Unschedulable), metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
	}
	return snap, cs, set
}

// A drain request ends, and the agent takes back its cordon, only on
// evidence of the boot it was drained for: the Node's boot ID changed
// from the one recorded when the drain completed. A NotReady blip with
// the same boot ID is not that boot: the node stays cordoned and the
// request complete, said in its status (issue 36). Only when no boot ID
// was recorded does NotReady then Ready end it, said to rest on weaker
// evidence.
func TestADrainRequestEndsOnlyOnANewBootID(t *testing.T) {
	up := func(boot string) nodeSeen { return nodeSeen{ready: true, boot: boot, uid: "1"} }
	down := func(boot string) nodeSeen { return nodeSeen{boot: boot, uid: "1"} }
	for _, c := range []struct {
		name     string
		recorded string     // the boot ID when the drain completed
		then     []nodeSeen // the node's states after the drain
		ends     bool       // the request settled, the agent's cordon taken back
		says     string     // in the status's lines (why or did)
	}{
		{name: "a NotReady blip, the boot ID unchanged", recorded: "b1",
			then: []nodeSeen{down("b1"), up("b1")}, says: "same boot ID"},
		{name: "powered off and booted", recorded: "b1",
			then: []nodeSeen{down("b1"), up("b2")}, ends: true, says: "uncordoned (the agent's own cordon)"},
		{name: "a reboot too quick to be seen NotReady", recorded: "b1",
			then: []nodeSeen{up("b2")}, ends: true, says: "uncordoned (the agent's own cordon)"},
		{name: "a blip, then the real boot", recorded: "b1",
			then: []nodeSeen{down("b1"), up("b1"), down("b1"), up("b2")}, ends: true, says: "uncordoned (the agent's own cordon)"},
		{name: "the boot ID goes empty over a blip", recorded: "b1",
			then: []nodeSeen{down(""), up("")}, says: "no boot ID"},
		{name: "the Node deleted and re-created, the same boot", recorded: "b1",
			then: []nodeSeen{{gone: true}, {boot: "b1", uid: "2"}, {ready: true, boot: "b1", uid: "2"}}, says: "same boot ID"},
		{name: "the Node re-created after a boot", recorded: "b1",
			then: []nodeSeen{{gone: true}, {boot: "b2", uid: "2"}, {ready: true, boot: "b2", uid: "2"}}, ends: true, says: "back and Ready"},
		{name: "no boot ID recorded: NotReady then Ready", recorded: "",
			then: []nodeSeen{down(""), up("")}, ends: true, says: "weaker evidence"},
		{name: "no boot ID recorded, one reported later, never NotReady", recorded: "",
			then: []nodeSeen{up("b2")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer func() {
					cancel()
					synctest.Wait()
				}()
				snap, cs, set := fakeSite(t, ctx, up(c.recorded))
				dir := t.TempDir()
				r := New(Options{Node: "node-a", StateDir: dir, Audit: func() (flow.Recorder, error) {
					log, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
					return flow.Recorder{Log: log}, err
				}})
				if _, err := r.Request(Request{Requester: "baseosmgr", Reason: "update"}); err != nil {
					t.Fatal(err)
				}
				// As the drain leaves it (attempt): the agent's cordon, the
				// boot ID the cluster showed then.
				_ = r.update(func(s *Status, rc *record) {
					s.State, rc.CordonedByAgent, rc.BootID = Complete, true, c.recorded
				})
				for _, s := range c.then {
					set(s)
					// The run loop looks once a second, more than once a state.
					r.watchReturn(ctx, snap)
					r.watchReturn(ctx, snap)
				}

				st := r.Status()
				n, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				_, recErr := os.Stat(filepath.Join(dir, RecordFile))
				if ended := st.State == NotRequested; ended != c.ends {
					t.Errorf("the request ended: %v, want %v; status %+v", ended, c.ends, st)
				}
				if !c.ends && (n.Spec.Unschedulable != (n.UID == "1") || recErr != nil) {
					t.Errorf("the request goes on, but node-a's cordon is %v or its record gone (%v)", n.Spec.Unschedulable, recErr)
				}
				if c.ends && (n.Spec.Unschedulable || !os.IsNotExist(recErr)) {
					t.Errorf("the request ended, but node-a is cordoned: %v, or its record kept (%v)", n.Spec.Unschedulable, recErr)
				}
				said := slices.Concat(st.Why, st.Did)
				if c.says != "" && !slices.ContainsFunc(said, func(l string) bool { return strings.Contains(l, c.says) }) {
					t.Errorf("the status does not say %q: why %q, did %q", c.says, st.Why, st.Did)
				}
				// Looked at every second, a state is said once, not each look.
				for i := 1; i < len(st.Did); i++ {
					if st.Did[i] == st.Did[i-1] {
						t.Errorf("said twice in a row: %q", st.Did[i])
					}
				}
			})
		})
	}
}

// A request that failed still has its node watched for the boot, to take
// back a cordon an attempt made: it keeps the boot ID of when it failed,
// so that a NotReady blip does not end it either. It kept none, and a
// blip ended it on NotReady then Ready alone.
func TestAFailedDrainRequestKeepsItsBootID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			synctest.Wait()
		}()
		snap, cs, set := fakeSite(t, ctx, nodeSeen{ready: true, boot: "b1", uid: "1"})
		if _, err := cs.CoreV1().Nodes().Update(ctx, nodeSeen{ready: true, boot: "b1", uid: "1"}.node("node-a", false), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// The cordon fails: the request ends failed, the agent's cordon
		// maybe made (it is remembered before it is tried).
		var refuse atomic.Bool
		refuse.Store(true)
		for _, verb := range []string{"patch", "update"} {
			cs.PrependReactor(verb, "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return refuse.Load(), nil, errors.New("refused by the test")
			})
		}
		dir := t.TempDir()
		r := New(Options{Node: "node-a", StateDir: dir, Attempts: 1, Audit: func() (flow.Recorder, error) {
			log, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
			return flow.Recorder{Log: log}, err
		}})
		if _, err := r.Request(Request{Requester: "baseosmgr", Reason: "update"}); err != nil {
			t.Fatal(err)
		}
		r.drain(ctx, snap)
		if st := r.Status(); !st.State.Final() || st.State == Complete {
			t.Fatalf("with its cordon refused, the request did not fail: %+v; the test proves nothing", st)
		}
		refuse.Store(false)
		if _, rec := r.current(); rec.BootID != "b1" {
			t.Errorf("the failed request recorded boot ID %q, want b1", rec.BootID)
		}
		set(nodeSeen{boot: "b1", uid: "1"})
		r.watchReturn(ctx, snap)
		set(nodeSeen{ready: true, boot: "b1", uid: "1"})
		r.watchReturn(ctx, snap)
		if st := r.Status(); !st.State.Final() {
			t.Errorf("a NotReady blip ended the failed request: %+v", st)
		}
	})
}
