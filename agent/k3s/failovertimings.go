package k3s

import (
	"fmt"
	"time"
)

// The kube-controller-manager settings every server's k3s runs with
// (kube-controller-manager-arg): they bound the first steps from a node's
// loss to its apps running elsewhere. The whole path, step by step, is
// agent.FailoverBudget (and the failover table in docs/APPS.md, "Failover
// budget").
const (
	// NodeMonitorGracePeriod is how long a node's heartbeats may stop
	// before the node lifecycle controller marks it Unknown and taints it
	// unreachable (Kubernetes' default: 50s).
	NodeMonitorGracePeriod = 15 * time.Second
	// NodeMonitorPeriod is how often the node lifecycle controller looks
	// at the nodes' heartbeats (Kubernetes' default: 5s).
	NodeMonitorPeriod = time.Second
	// AttachDetachSyncPeriod is how often the attach/detach controller
	// checks its record of attached volumes against the
	// VolumeAttachments (Kubernetes' default: 1m).
	AttachDetachSyncPeriod = 2 * time.Second
)

// The kubelet's own heartbeat, left at its defaults (sitecon passes no
// kubelet-arg): a blink of the link must outlast these before the node is
// marked Unknown.
const (
	// KubeletLeaseRenewInterval: the kubelet renews its node lease every
	// quarter of its 40s lease duration.
	KubeletLeaseRenewInterval = 10 * time.Second
	// KubeletHeartbeatTimeout bounds one heartbeat request (the kubelet's
	// node status update frequency).
	KubeletHeartbeatTimeout = 10 * time.Second
)

// controllerManagerArgs are the kube-controller-manager-arg values.
func controllerManagerArgs() []string {
	return []string{
		fmt.Sprintf("node-monitor-grace-period=%s", NodeMonitorGracePeriod),
		fmt.Sprintf("node-monitor-period=%s", NodeMonitorPeriod),
		fmt.Sprintf("attach-detach-reconcile-sync-period=%s", AttachDetachSyncPeriod),
	}
}
