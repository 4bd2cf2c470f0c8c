package agent

import (
	"time"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/k3s"
)

// FailoverSettings are the settings on the path from a node's loss to its
// auto-migration apps running elsewhere: the k3s controller-manager's
// (rendered by agent/k3s), the kubelet's heartbeat, and the agent's own.
type FailoverSettings struct {
	NodeMonitorGracePeriod, NodeMonitorPeriod, AttachDetachSyncPeriod time.Duration
	KubeletLeaseRenewInterval, KubeletHeartbeatTimeout                time.Duration
	// MoveAfter is the tolerationSeconds of the unreachable and not-ready
	// taints on auto apps' pods (--move-after).
	MoveAfter time.Duration
	// FailoverTimeout is the guard's timer (--failover-timeout); the fence
	// bound derives from it.
	FailoverTimeout time.Duration
	Leader          apps.LeaderDurations
}

// ShippedFailoverSettings are the defaults sitecon ships.
func ShippedFailoverSettings() FailoverSettings {
	return FailoverSettings{
		NodeMonitorGracePeriod:    k3s.NodeMonitorGracePeriod,
		NodeMonitorPeriod:         k3s.NodeMonitorPeriod,
		AttachDetachSyncPeriod:    k3s.AttachDetachSyncPeriod,
		KubeletLeaseRenewInterval: k3s.KubeletLeaseRenewInterval,
		KubeletHeartbeatTimeout:   k3s.KubeletHeartbeatTimeout,
		MoveAfter:                 apps.DefaultMoveAfter,
		FailoverTimeout:           apps.DefaultFailoverTimeout,
		Leader:                    apps.DefaultLeaderDurations,
	}
}

// Allowances for steps no setting bounds: work done on a healthy site in
// well under them.
const (
	// watchAllowance: a change reaches the leader's cache and its pass.
	watchAllowance = time.Second
	// attachAllowance: Longhorn attaches the volume on the new node (its
	// engine starts against the live replicas) and the kubelet mounts it.
	attachAllowance = 3 * time.Second
	// containerStartAllowance: the container starts from an image already
	// on the node.
	containerStartAllowance = 2 * time.Second
	// vmBootAllowance: KubeVirt's replica set has its replacement VMI (made
	// when the old launcher was evicted) and the VM boots once its disk is
	// attached.
	vmBootAllowance = 25 * time.Second
)

// FailoverStep is one step from a node's loss (C) to its app running
// elsewhere, and the most it adds to that time.
type FailoverStep struct {
	What    string
	Bound   time.Duration
	Setting string
}

// FailoverBudget is the worst case from a node's loss to an auto app with a
// Longhorn volume running elsewhere, step by step (the longest path: an app
// without volumes runs as soon as it is evicted, without the guard).
// The last step differs by kind; Total adds them up.
type FailoverBudget struct {
	Steps                   []FailoverStep
	Container, VM           FailoverStep
	ContainerTotal, VMTotal time.Duration
}

// Budget computes the failover budget for s.
func (s FailoverSettings) Budget() FailoverBudget {
	taint := s.NodeMonitorGracePeriod + 2*s.NodeMonitorPeriod
	takeover := s.Leader.LeaseDuration + s.Leader.RetryPeriod
	fence := apps.DeriveFenceTimings(s.FailoverTimeout)
	steps := []FailoverStep{
		{"the node lifecycle controller marks the node Unknown and taints it unreachable: its last heartbeat seen up to a period late, the silence judged up to a period late",
			taint, "k3s kube-controller-manager-arg node-monitor-grace-period, node-monitor-period"},
		{"a stats leader is there to judge it: when the lost node led, its lease runs out and another agent takes it (in the shadow of the step above while it is no longer)",
			max(0, takeover-taint), "--leader-lease-duration, --leader-retry-period"},
		{"the leader sees the app's pod on the unreachable node: the failover guard's timer starts",
			watchAllowance, "allowance"},
		{"the pod tolerates the taint, then is evicted; KubeVirt or the ReplicaSet makes its replacement, which waits for the volume (in the shadow of the guard's timer while it is no longer)",
			max(0, s.MoveAfter-fence.ForceDeleteAfter), "--move-after (tolerationSeconds of the not-ready and unreachable taints)"},
		{"the guard's timer runs out; the lost node fenced itself before it (fence bound " + fence.FenceAfter.String() + ")",
			fence.ForceDeleteAfter, "--failover-timeout"},
		{"the guard reads the evidence, probes the node silent and force-deletes the pod",
			apps.LifeProbeBound, "the life probe's timeout"},
		{"the guard releases the volume's VolumeAttachment on the lost node, on a fresh probe",
			apps.LifeProbeBound, "the life probe's timeout"},
		{"the attach/detach controller sees the VolumeAttachment gone and attaches the volume on the new node",
			s.AttachDetachSyncPeriod, "k3s kube-controller-manager-arg attach-detach-reconcile-sync-period"},
		{"Longhorn attaches the volume there and the kubelet mounts it", attachAllowance, "allowance"},
	}
	b := FailoverBudget{Steps: steps,
		Container: FailoverStep{"the container starts", containerStartAllowance, "allowance"},
		VM:        FailoverStep{"the VM boots", vmBootAllowance, "allowance"},
	}
	var path time.Duration
	for _, st := range steps {
		path += st.Bound
	}
	b.ContainerTotal, b.VMTotal = path+b.Container.Bound, path+b.VM.Bound
	return b
}

// BlinkCrossing is one bound a cut-off of the node's link must cross before
// something moves, how much of it a blink uses, and what crossing it does.
type BlinkCrossing struct {
	// Moves: crossing it moves an app or fences a node; the other bounds
	// only move the stats leadership.
	Moves   bool
	Bound   string
	Limit   time.Duration
	Used    time.Duration
	Crossed string
}

// Blink lists, for a cut-off of length cut that ends, each bound that stands
// between it and a move or a fence, with the most of it the cut-off uses.
func (s FailoverSettings) Blink(cut time.Duration) []BlinkCrossing {
	fence := apps.DeriveFenceTimings(s.FailoverTimeout)
	// The heartbeats stop for at most: the renewal before the cut up to an
	// interval before it, the cut, and the first heartbeat after it (the
	// kubelet's status update, which turns the node Ready again and so
	// lifts the taint) waiting out its request's timeout; the controller
	// sees it a period late. The pods are evicted only if that outlasts
	// the grace period and the toleration together.
	gap := s.KubeletLeaseRenewInterval + cut + s.KubeletHeartbeatTimeout + s.NodeMonitorPeriod
	return []BlinkCrossing{
		{true, "the fence bound (the lost node stops its auto apps)", fence.FenceAfter, apps.FenceSilenceCounted(cut), "the node fences itself"},
		{true, "node-monitor-grace-period and the pods' toleration (eviction)", s.NodeMonitorGracePeriod + s.MoveAfter, gap, "the apps' pods are evicted and replaced"},
		{false, "the stats leader's renew deadline (the leader keeps its lead)", s.Leader.RenewDeadline, cut + s.Leader.RetryPeriod, "the stats leader steps down"},
		{false, "the stats leader's lease (no other agent takes it)", s.Leader.LeaseDuration, cut + s.Leader.RetryPeriod, "another agent leads"},
	}
}
