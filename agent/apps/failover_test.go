package apps

import (
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// TestDecideFailover: the pure failover decision. Each case names the
// evidence that must hold it back; the API server's timestamps are set as a
// leader whose clock runs 60 s ahead would read them (long past), so that
// only the leader's own first sighting can be holding the pod.
func TestDecideFailover(t *testing.T) {
	now := time.Now()
	configClaim := ClaimName(VolumeConfig{UUID: volID, Name: "plc-data"})
	podOn := func(claims ...string) *corev1.Pod {
		deleted := metav1.NewTime(now.Add(-2 * time.Minute))
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plc-0", Namespace: "eve-kube-app", DeletionTimestamp: &deleted},
			Spec: corev1.PodSpec{NodeName: "node-b"}}
		for _, c := range claims {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		}
		return p
	}
	pod := podOn(configClaim)
	// notEvicted: the same pod before the toleration ran out.
	notEvicted := podOn(configClaim)
	notEvicted.DeletionTimestamp = nil
	// lostWith is node-b unreachable, its agent's fence settings (kube.AnnotationFence) as given ("": none).
	lostWith := func(fence string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: now.Add(-90 * time.Second)}}}}}
		if fence != "" {
			n.Annotations = map[string]string{kube.AnnotationFence: fence}
		}
		return n
	}
	// lost fences with the leader's timeout (1m0s in every case).
	lost := lostWith("on 1m0s")
	reachable := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	// running: a replica as the cache (and the Replica object) shows a
	// healthy one: running, healthyAt set, not failed.
	running := func(name, node string) *lhv1beta2.Replica {
		return &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   lhv1beta2.ReplicaSpec{InstanceSpec: lhv1beta2.InstanceSpec{NodeID: node, VolumeName: "pvc-1"}, HealthyAt: "x"},
			Status: lhv1beta2.ReplicaStatus{InstanceStatus: lhv1beta2.InstanceStatus{CurrentState: lhv1beta2.InstanceStateRunning}}}
	}
	vol := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}}
	both := []*lhv1beta2.Replica{running("r-b", "node-b"), running("r-a", "node-a")}
	read := func(claim string, reps []*lhv1beta2.Replica) ClaimVolume {
		return ClaimVolume{Claim: claim, VolumeName: "pvc-1", Volume: vol, Replicas: reps}
	}
	safe := read(configClaim, both)
	readyNode := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	// The replicas' nodes as read with the evidence: node-a and node-c
	// live, node-d not Ready, node-b the lost one (its Node object still
	// says Ready: a lost node's last word is not evidence).
	replicaNodes := map[string]*corev1.Node{"node-a": readyNode("node-a", corev1.ConditionTrue), "node-c": readyNode("node-c", corev1.ConditionTrue),
		"node-d": readyNode("node-d", corev1.ConditionUnknown), "node-b": readyNode("node-b", corev1.ConditionTrue)}
	silent := func(vols ...ClaimVolume) *FailoverEvidence {
		return &FailoverEvidence{Probe: "10.0.0.2:12346 is silent (dial tcp 10.0.0.2:12346: i/o timeout)", Volumes: vols, ReplicaNodes: replicaNodes}
	}
	// elsewhere is the lost node's replica and one on node (node-a unless
	// named), changed by edit.
	elsewhere := func(edit func(*lhv1beta2.Replica)) ClaimVolume {
		r := running("r-a", "node-a")
		edit(r)
		return read(configClaim, []*lhv1beta2.Replica{running("r-b", "node-b"), r})
	}
	pinned := testApp()
	pinned.Affinity = AffinityRequired
	// noVolume is an auto app that no volume holds: its pods tolerate a
	// lost node for good, and the guard deletes them itself.
	noVolume := testApp()
	noVolume.VolumeRefs = nil
	noVolumePod := podOn()
	noVolumePod.DeletionTimestamp = nil
	expired := now.Add(-2 * time.Minute) // first seen by this leader two minutes ago

	for name, tc := range map[string]struct {
		in      FailoverInput
		want    FailoverAction
		mention string
	}{
		"node reachable": {FailoverInput{App: testApp(), Pod: pod, Node: reachable, FirstSeen: expired, Evidence: silent(safe)},
			FailoverWait, "not unreachable"},
		// The API server says deleted 2 min ago and tainted 90 s ago; this
		// leader has only now seen the pod stuck: its own timer starts now.
		"leader clock ahead: API timestamps old, first seen now": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: now, Evidence: silent(safe)},
			FailoverWait, "seen unreachable for 0s of 1m0s"},
		"own timer not run out": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: now.Add(-30 * time.Second), Evidence: silent(safe)},
			FailoverWait, "for 30s of 1m0s"},
		"timer out, nothing read yet": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired},
			FailoverWait, "reading the evidence"},
		"a healthy replica on a live node, node silent": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired, Evidence: silent(safe)},
			FailoverForceDelete, "every volume has an up-to-date replica elsewhere"},
		// A partitioned node still runs the old pod: its agent's proof of
		// life, or its host refusing a connection, holds; the reason says
		// which evidence.
		"node's agent proves it runs": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: &FailoverEvidence{Alive: true, Probe: "its agent proved at 10.0.0.2:12346 that it runs (cluster x, node node-b)", Volumes: []ClaimVolume{safe}}},
			FailoverHold, "lost node node-b shows a sign of life: its agent proved at 10.0.0.2:12346 that it runs"},
		"node's host refuses": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: &FailoverEvidence{Alive: true, Probe: "its host is up: 10.0.0.2:12346 refused the connection", Volumes: []ClaimVolume{safe}}},
			FailoverHold, "shows a sign of life: its host is up: 10.0.0.2:12346 refused"},
		// A host that answers without the node's proof, or takes the
		// connection and never answers (paused), is a sign of the host.
		"a host answers without the proof": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: &FailoverEvidence{Alive: true, Life: LifeStranger, Probe: "10.0.0.2:12346 took the connection but gave no proof of life for node-b (context deadline exceeded): its host is up", Volumes: []ClaimVolume{safe}, ReplicaNodes: replicaNodes}},
			FailoverHold, "shows a sign of life: 10.0.0.2:12346 took the connection"},
		// Both timers are each node's own flag: the leader counts on the
		// lost node's fence only when that node fences, with the leader's
		// own timeout; silence alone does not show that it fenced in time.
		"node silent, but it runs without fencing": {FailoverInput{App: testApp(), Pod: pod, Node: lostWith("off 1m0s"), FirstSeen: expired, Evidence: silent(safe)},
			FailoverHold, "runs without fencing"},
		"node silent, but it fences with a longer timeout": {FailoverInput{App: testApp(), Pod: pod, Node: lostWith("on 2m0s"), FirstSeen: expired, Evidence: silent(safe)},
			FailoverHold, "fences with --failover-timeout 2m0s, not this leader's 1m0s"},
		"node silent, but it never said how it fences": {FailoverInput{App: testApp(), Pod: pod, Node: lostWith(""), FirstSeen: expired, Evidence: silent(safe)},
			FailoverHold, "never said that it fences"},
		"node silent, its fence settings unreadable": {FailoverInput{App: testApp(), Pod: pod, Node: lostWith("maybe"), FirstSeen: expired, Evidence: silent(safe)},
			FailoverHold, "cannot be read"},
		"only replica on the lost node": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(read(configClaim, []*lhv1beta2.Replica{running("r-b", "node-b")}))},
			FailoverRefuse, "no up-to-date replica off node-b for " + configClaim + " (volume pvc-1"},
		// The volume's engine ran on the lost node: its replica modes are
		// that node's last word, and it may be gone with it. The
		// replicas' own status on live nodes is what counts.
		"the volume's engine gone with the lost node, a healthy replica on a live node": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(read(configClaim, both))},
			FailoverForceDelete, "up-to-date replica elsewhere"},
		"the replica elsewhere rebuilding (healthyAt cleared)": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Spec.HealthyAt = "" }))},
			FailoverRefuse, "(volume pvc-1"},
		"the replica elsewhere failed": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Spec.FailedAt = "2026-11-25T10:00:00Z" }))},
			FailoverRefuse, "(volume pvc-1"},
		"the replica elsewhere in error": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Status.CurrentState = lhv1beta2.InstanceStateError }))},
			FailoverRefuse, "(volume pvc-1"},
		"the replica elsewhere stopped": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Status.CurrentState = lhv1beta2.InstanceStateStopped }))},
			FailoverRefuse, "(volume pvc-1"},
		"a healthy-looking replica on a node that is not Ready": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Spec.NodeID = "node-d" }))},
			FailoverRefuse, "(volume pvc-1"},
		"a healthy-looking replica on a node the cluster does not have": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Spec.NodeID = "node-gone" }))},
			FailoverRefuse, "(volume pvc-1"},
		// Its status was written by the lost node's manager: not the
		// replica's own word now.
		"a replica whose status the lost node's manager wrote": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Status.OwnerID = "node-b" }))},
			FailoverRefuse, "(volume pvc-1"},
		"a healthy replica on a live third node": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Spec.NodeID = "node-c" }))},
			FailoverForceDelete, "up-to-date replica elsewhere"},
		"another volume's replica does not count": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(elsewhere(func(r *lhv1beta2.Replica) { r.Spec.VolumeName = "pvc-2" }))},
			FailoverRefuse, "(volume pvc-1"},
		"claim not bound": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(ClaimVolume{Claim: configClaim, Problem: "claim not bound"})},
			FailoverRefuse, configClaim + " (claim not bound)"},
		"volume not in longhorn": {FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: expired,
			Evidence: silent(ClaimVolume{Claim: configClaim, VolumeName: "pvc-9"})},
			FailoverRefuse, "no Longhorn volume pvc-9"},
		// The pod mounts a claim the app config does not name (restored
		// from a backup under another name): the app config's claim being
		// safe says nothing about the pod's.
		"pod's own claim differs from the app config's": {FailoverInput{App: testApp(), Pod: podOn("restored-data"), Node: lost, FirstSeen: expired, Evidence: silent(safe)},
			FailoverRefuse, "restored-data (not read)"},
		"pod's own claim read and safe": {FailoverInput{App: testApp(), Pod: podOn("restored-data"), Node: lost, FirstSeen: expired,
			Evidence: silent(read("restored-data", both))},
			FailoverForceDelete, "up-to-date replica elsewhere"},
		"pod without claims, node silent": {FailoverInput{App: testApp(), Pod: podOn(), Node: lost, FirstSeen: expired, Evidence: silent()},
			FailoverForceDelete, "no sign of life: 10.0.0.2:12346 is silent"},
		// The timer runs from the first sighting on the lost node, in the
		// shadow of the pod's toleration; the pod goes only once evicted.
		"timer out, node silent, pod not evicted yet": {FailoverInput{App: testApp(), Pod: notEvicted, Node: lost, FirstSeen: expired, Evidence: silent(safe)},
			FailoverWait, "not evicted yet"},
		"pinned": {FailoverInput{App: pinned, Pod: pod, Node: lost, FirstSeen: expired, Evidence: silent(safe)},
			FailoverPinned, "stays"},
		// Issue 36: nothing else holds the replacement of an app without a
		// volume, so the taint never evicts its pod and the guard's own
		// rule moves it: the timer, then silence or the node's word.
		"no volume: not evicted, the timer out, node silent": {FailoverInput{App: noVolume, Pod: noVolumePod, Node: lost, FirstSeen: expired, Evidence: silent()},
			FailoverForceDelete, "no sign of life: 10.0.0.2:12346 is silent (dial tcp 10.0.0.2:12346: i/o timeout)); it mounts no volume"},
		"no volume: not evicted, the timer not out": {FailoverInput{App: noVolume, Pod: noVolumePod, Node: lost, FirstSeen: now.Add(-30 * time.Second), Evidence: silent()},
			FailoverWait, "for 30s of 1m0s"},
		"no volume: a paused host holds it": {FailoverInput{App: noVolume, Pod: noVolumePod, Node: lost, FirstSeen: expired,
			Evidence: &FailoverEvidence{Alive: true, Life: LifeStranger, Probe: "10.0.0.2:12346 took the connection but gave no proof of life for node-b (context deadline exceeded): its host is up", ReplicaNodes: replicaNodes}},
			FailoverHold, "shows a sign of life"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.in.Now, tc.in.Timeout = now, time.Minute
			v := DecideFailover(tc.in)
			if v.Action != tc.want || !strings.Contains(v.Reason, tc.mention) {
				t.Fatalf("got %s %q, want %s mentioning %q", v.Action, v.Reason, tc.want, tc.mention)
			}
			if v.NeedEvidence != (tc.in.Evidence == nil && v.Action == FailoverWait && tc.in.Node == lost && tc.in.FirstSeen.Equal(expired) && tc.in.Pod.DeletionTimestamp != nil) {
				t.Fatalf("NeedEvidence = %v", v.NeedEvidence)
			}
		})
	}
}
