package apps

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// The failover reconciler: the stats leader times the app pods on lost
// nodes from its first sighting, judges them once evicted (DecideFailover,
// failover.go) and carries out
// the verdicts: a force-delete, then the release of the volumes the
// evidence vouched for.

// clusterFailoverTimeout is the cluster's one failover timeout: the
// cluster record's (kube.ClusterKeyFailoverTimeout), which every agent
// reads alike, else this leader's own --failover-timeout (a record from
// before the key, or a site whose record has none). A node whose agent
// fences with another is held (fenceUncertain, FencedWithin); a leader
// whose own differs says so once, and times by the cluster's.
func (c *Controller) clusterFailoverTimeout(d kube.Data) time.Duration {
	t, ok, problem := kube.ClusterFailoverTimeout(d)
	switch {
	case problem != "":
		c.warnTimeoutOnce("the cluster's failover timeout cannot be read: this leader times by its own --failover-timeout", "problem", problem, "own", c.opts.FailoverTimeout)
	case !ok:
		return c.opts.FailoverTimeout
	default:
		if t != c.opts.FailoverTimeout {
			c.warnTimeoutOnce("this node's --failover-timeout is not the cluster's: the leader times by the cluster's, and this node's own pods are held if it is lost", "cluster", t, "own", c.opts.FailoverTimeout)
		}
		return t
	}
	return c.opts.FailoverTimeout
}

// warnTimeoutOnce logs a failover-timeout warning once per message.
func (c *Controller) warnTimeoutOnce(msg string, args ...any) {
	if c.timeoutWarned == msg {
		return
	}
	c.timeoutWarned = msg
	c.log.Warn(msg, args...)
}

// failover judges app pods on lost nodes (leader only): it times them from
// the first sighting and force-deletes them once evicted.
// It returns when the next verdict could change (0: none pending).
func (c *Controller) failover(ctx context.Context, set AppSet, observed map[string]AppObservation, nodes map[string]*corev1.Node, d kube.Data, states []PublishedApp, now time.Time) time.Duration {
	next := time.Duration(0)
	soon := func(wait time.Duration) {
		if wait = max(wait, 10*time.Millisecond); next == 0 || wait < next {
			next = wait
		}
	}
	live := map[types.UID]bool{}
	probed := map[string]NodeLife{} // one probe per node per pass
	timeout := c.clusterFailoverTimeout(d)
	for uuid, o := range observed {
		app, ok := set.Apps[uuid]
		if !ok {
			continue
		}
		// The pods not evicted yet too: the timer starts at the first
		// sighting on the lost node and runs while the pod tolerates the
		// taint, so that the toleration and the timer do not add up.
		for _, pod := range slices.Concat(o.Stuck, o.Placed) {
			node := nodes[pod.Spec.NodeName]
			if unreachableTaint(node) == nil {
				// Its kubelet finishes it. If the node is lost again later,
				// the timer starts from that sighting.
				continue
			}
			if pod.DeletionTimestamp == nil && app.Pinned() {
				// It stays; reported once the taint's default toleration
				// evicts it.
				continue
			}
			live[pod.UID] = true
			sp := c.stuck[pod.UID]
			if sp == nil {
				sp = &stuckPod{firstSeen: now}
				c.stuck[pod.UID] = sp
			}
			// The node is probed from the first sighting on, every
			// failoverRecheck, so that the timer counts its silence
			// (timerStart). A pinned app's pod is never moved: no probe.
			if !app.Pinned() {
				if wait := failoverRecheck - now.Sub(sp.lifeChecked); sp.lifeChecked.IsZero() || wait <= 0 {
					life := c.probeNode(ctx, node, probed, timeout)
					sp.observeLife(life.Alive, life.At)
					soon(failoverRecheck)
				} else {
					soon(wait)
				}
			}
			in := FailoverInput{App: app, Pod: pod, Node: node, FirstSeen: sp.timerStart(), Now: now, Timeout: timeout}
			v := DecideFailover(in)
			if v.NeedEvidence {
				if wait := failoverRecheck - now.Sub(sp.checked); !sp.checked.IsZero() && wait > 0 {
					// A hold or refusal stands until the evidence is read
					// again; a delete never rests on an earlier read.
					v = sp.verdict
					soon(wait)
				} else {
					in.Evidence = c.failoverEvidence(ctx, pod, node, probed, timeout, now)
					sp.observeLife(in.Evidence.Alive, in.Evidence.ProbedAt)
					in.FirstSeen = sp.timerStart()
					v = DecideFailover(in)
					sp.checked, sp.verdict = time.Time{}, v
					if v.Action == FailoverHold || v.Action == FailoverRefuse {
						sp.checked = time.Now()
						soon(failoverRecheck)
					}
				}
			}
			switch v.Action {
			case FailoverWait:
				if pod.DeletionTimestamp != nil {
					soon(sp.timerStart().Add(timeout).Sub(now))
				} // else its eviction is a change that wakes a pass
				continue
			case FailoverForceDelete:
				err := c.snap.Clients().Core.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
					GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}})
				if err != nil && !apierrors.IsNotFound(err) {
					c.opts.Metrics.APIErrors.Inc()
					c.log.Error("force delete", "pod", pod.Name, "err", err)
					soon(5 * time.Second)
					continue
				}
				// Then its volumes' VolumeAttachments on the lost node
				// (releaseLeftBehind, once the pod is gone: while it exists
				// the attach/detach controller wants the volume on that
				// node, and would attach it there again).
			}
			for i := range states {
				if states[i].UUID == uuid {
					states[i].Failover = v.Reason
				}
			}
			if sp.reported == v.Action && (v.Action != FailoverHold || sp.reportedLife == v.Life) {
				continue
			}
			if sp.reported != v.Action {
				c.opts.Metrics.FailoverActions.WithLabelValues(string(v.Action)).Inc()
			}
			sp.reported, sp.reportedLife = v.Action, v.Life
			kind, evType, reason := EventFailover, corev1.EventTypeNormal, "ForceDeleted"
			switch v.Action {
			case FailoverHold:
				kind, evType, reason = EventRefusal, corev1.EventTypeWarning, "FailoverHeld"
			case FailoverRefuse, FailoverPinned:
				kind, evType, reason = EventRefusal, corev1.EventTypeWarning, "FailoverRefused"
			}
			c.log.Info("failover", "app", app.DisplayName, "pod", pod.Name, "action", v.Action, "reason", v.Reason)
			c.timeline.Add(TimelineEvent{Time: now, Kind: kind, App: app.DisplayName, Node: pod.Spec.NodeName, Message: v.Reason, Warning: v.Action != FailoverForceDelete})
			c.recorder.Event(pod, evType, reason, v.Reason)
		}
	}
	// Bounded memory: a pod gone, finished by its kubelet or deleted here
	// leaves no record behind.
	maps.DeleteFunc(c.stuck, func(uid types.UID, _ *stuckPod) bool { return !live[uid] })
	if wait := c.releaseLeftBehind(ctx, set, nodes, d, probed, now); wait > 0 {
		soon(wait)
	}
	return next
}

// releaseCheck is the leader's last look at a VolumeAttachment left on a
// lost node that it did not release: when, and why not (reported once).
type releaseCheck struct {
	at  time.Time
	why string
}

// releaseLeftBehind releases the VolumeAttachments left on lost nodes by
// app pods that are gone (DecideRelease), each on evidence read afresh.
// What to release is found in the cluster every time, not remembered: a
// force-delete whose release a leader did not finish (it lost the lead,
// or died) is finished by whoever leads now. The attachments are listed
// only while a node is lost, at most every failoverRecheck unless an app
// pod left a lost node since the last pass. It returns when to look again
// (0: no need).
func (c *Controller) releaseLeftBehind(ctx context.Context, set AppSet, nodes map[string]*corev1.Node, d kube.Data, probed map[string]NodeLife, now time.Time) time.Duration {
	podsOnLost := map[types.UID]bool{}
	for _, p := range d.Pods {
		if p.Namespace == kube.AppNamespace && unreachableTaint(nodes[p.Spec.NodeName]) != nil {
			podsOnLost[p.UID] = true
		}
	}
	anyLost := slices.ContainsFunc(slices.Collect(maps.Values(nodes)), func(n *corev1.Node) bool { return unreachableTaint(n) != nil })
	timeout := c.clusterFailoverTimeout(d) // once a pass, as failover reads it
	podLeft := false
	for uid := range c.podsOnLost {
		podLeft = podLeft || !podsOnLost[uid]
	}
	c.podsOnLost = podsOnLost
	maps.DeleteFunc(c.nodeSilence, func(name string, _ time.Time) bool { return unreachableTaint(nodes[name]) == nil })
	if !anyLost {
		clear(c.releaseChecked)
		c.releasesListed = time.Time{}
		return 0
	}
	if wait := failoverRecheck - now.Sub(c.releasesListed); !podLeft && !c.releasesListed.IsZero() && wait > 0 {
		return wait
	}
	c.releasesListed = now
	client := c.snap.Clients().Core.StorageV1().VolumeAttachments()
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		c.opts.Metrics.APIErrors.Inc()
		c.log.Error("list volume attachments", "err", err)
		return 5 * time.Second
	}
	// The claim of each Longhorn volume (named as its PV), and the apps
	// that use each claim, for the report.
	claimOf := map[string]string{}
	for _, lv := range d.Volumes {
		if ks := lv.Status.KubernetesStatus; ks.Namespace == kube.AppNamespace && ks.PVCName != "" {
			claimOf[lv.Name] = ks.PVCName
		}
	}
	appsOf := map[string][]string{}
	for _, app := range set.Apps {
		for _, ref := range app.VolumeRefs {
			if v, ok := set.Volumes[ref]; ok {
				appsOf[ClaimName(v)] = append(appsOf[ClaimName(v)], app.DisplayName)
			}
		}
	}
	podsOn := map[string][]*corev1.Pod{} // read afresh, per node
	listed := map[types.UID]bool{}
	for i := range list.Items {
		va := &list.Items[i]
		listed[va.UID] = true
		node := nodes[va.Spec.NodeName]
		pv := ptr.Deref(va.Spec.Source.PersistentVolumeName, "")
		claim := claimOf[pv]
		if unreachableTaint(node) == nil || va.DeletionTimestamp != nil || claim == "" {
			continue
		}
		// The cache first: a pod there still mounting the claim is the
		// failover verdict's to judge.
		if slices.ContainsFunc(d.Pods, func(p *corev1.Pod) bool {
			return p.Namespace == kube.AppNamespace && p.Spec.NodeName == node.Name && slices.Contains(podClaims(p), claim)
		}) {
			continue
		}
		if last, ok := c.releaseChecked[va.UID]; ok && now.Sub(last.at) < failoverRecheck {
			continue
		}
		pods, ok := podsOn[node.Name]
		if !ok {
			got, err := c.snap.Clients().Core.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
			if err != nil {
				c.opts.Metrics.APIErrors.Inc()
				c.log.Error("list pods on lost node", "node", node.Name, "err", err)
				continue
			}
			for j := range got.Items {
				pods = append(pods, &got.Items[j])
			}
			podsOn[node.Name] = pods
		}
		stub := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: va.Name, Namespace: kube.AppNamespace}, Spec: corev1.PodSpec{NodeName: node.Name,
			Volumes: []corev1.Volume{{Name: claim, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
		ev := c.failoverEvidence(ctx, stub, node, probed, timeout, now)
		release, why := DecideRelease(va, node, claim, pods, ev)
		app := strings.Join(appsOf[claim], ", ")
		if !release {
			if last := c.releaseChecked[va.UID]; last.why != why {
				c.log.Warn("failover", "app", app, "attachment", va.Name, "action", "release held", "reason", why)
				c.timeline.Add(TimelineEvent{Time: now, Kind: EventRefusal, App: app, Node: node.Name, Message: why, Warning: true})
			}
			c.releaseChecked[va.UID] = releaseCheck{at: now, why: why}
			continue
		}
		err := client.Delete(ctx, va.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(va.UID)}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone, or another object of that name: not the one judged
		}
		if err != nil {
			c.opts.Metrics.APIErrors.Inc()
			c.log.Error("delete volume attachment", "attachment", va.Name, "err", err)
			c.releaseChecked[va.UID] = releaseCheck{at: now, why: err.Error()}
			continue
		}
		delete(c.releaseChecked, va.UID)
		c.opts.Metrics.FailoverActions.WithLabelValues("release-attachment").Inc()
		c.log.Info("failover", "app", app, "attachment", va.Name, "action", "release-attachment", "reason", why)
		c.timeline.Add(TimelineEvent{Time: now, Kind: EventFailover, App: app, Node: node.Name, Message: why})
		c.recorder.Event(va, corev1.EventTypeNormal, "VolumeAttachmentDeleted", why)
	}
	maps.DeleteFunc(c.releaseChecked, func(uid types.UID, _ releaseCheck) bool { return !listed[uid] })
	if len(c.releaseChecked) > 0 {
		return failoverRecheck
	}
	return 0
}

// failoverEvidence probes the lost node (once per pass) and, only when it
// is silent, reads the pod's claims afresh from the API server.
func (c *Controller) failoverEvidence(ctx context.Context, pod *corev1.Pod, node *corev1.Node, probed map[string]NodeLife, timeout time.Duration, now time.Time) *FailoverEvidence {
	life := c.probeNode(ctx, node, probed, timeout)
	ev := &FailoverEvidence{Alive: life.Alive, Probe: life.Detail, Life: life.Evidence, LeaderTimeout: timeout, ProbedAt: life.At}
	if since, ok := c.nodeSilence[node.Name]; ok && !life.Alive {
		ev.SilentFor = now.Sub(since)
	}
	if !life.Alive {
		ev.Volumes = ReadFailoverEvidence(ctx, c.snap.Clients(), pod)
		nodes, err := ReadReplicaNodes(ctx, c.snap.Clients(), ev.Volumes)
		if err != nil {
			// No replica can be shown on a live node: every claim unsafe.
			c.opts.Metrics.APIErrors.Inc()
			for i := range ev.Volumes {
				ev.Volumes[i].Problem = cmp.Or(ev.Volumes[i].Problem, err.Error())
			}
		}
		ev.ReplicaNodes = nodes
	}
	return ev
}

// probeNode probes the lost node once per pass (probed) and keeps the
// start of its silence (nodeSilence): any sign of life ends it, the
// first silent probe after one starts it, counted from when that probe
// began (NodeLife.At): not from the pass's start, which may be seconds
// earlier, before the node was cut off.
func (c *Controller) probeNode(ctx context.Context, node *corev1.Node, probed map[string]NodeLife, timeout time.Duration) NodeLife {
	if life, ok := probed[node.Name]; ok {
		return life
	}
	at := time.Now()
	life := FencedWithin(c.opts.NodeProbe(ctx, node), timeout)
	life.At = at
	probed[node.Name] = life
	_, silent := c.nodeSilence[node.Name]
	switch {
	case life.Alive:
		delete(c.nodeSilence, node.Name)
	case !silent:
		c.nodeSilence[node.Name] = at
	}
	return life
}

// observeLife records what a probe of the pod's node found at now: the
// start of its silence, cleared by any sign of life.
func (sp *stuckPod) observeLife(alive bool, now time.Time) {
	sp.lifeChecked = now
	switch {
	case alive:
		sp.silentSince = time.Time{}
	case sp.silentSince.IsZero():
		sp.silentSince = now
	}
}

// timerStart is when the leader's timer started: its first sighting of
// the pod, or the start of the node's silence when that came later. A
// node cut off fences itself FenceAfter into its silence
// (DeriveFenceTimings); a timer counted from a sighting made while the
// node still answered could run out right after the cut.
func (sp *stuckPod) timerStart() time.Time {
	if sp.silentSince.After(sp.firstSeen) {
		return sp.silentSince
	}
	return sp.firstSeen
}
