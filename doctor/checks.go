package doctor

import "time"

// The checks' ids. Each has a row in docs/DOCTOR.md's "Findings" table.
const (
	IDEtcdQuorum           = "SC-ETCD-QUORUM"
	IDNodeNotReady         = "SC-NODE-NOT-READY"
	IDNodeCordoned         = "SC-NODE-CORDONED"
	IDNodeDiskPressure     = "SC-NODE-DISK-PRESSURE"
	IDStatsLeaderLost      = "SC-STATS-LEADER-LOST"
	IDVolumeDegraded       = "SC-VOL-DEGRADED"
	IDVolumeFaulted        = "SC-VOL-FAULTED"
	IDReplicaUnschedulable = "SC-REPLICA-UNSCHEDULABLE"
	IDSupportBundleLeft    = "SC-SUPPORT-BUNDLE-LEFT"
	IDAppAway              = "SC-APP-AWAY"
	IDAppPending           = "SC-APP-PENDING"
	IDAppNotRunning        = "SC-APP-NOT-RUNNING"
	IDOverrideStale        = "SC-OVERRIDE-STALE"
	IDAppConfigRejected    = "SC-APP-CONFIG-REJECTED"
	IDCertExpiry           = "SC-CERT-EXPIRY"
	IDClockSkew            = "SC-CLOCK-SKEW"
	IDLonghornPrereq       = "SC-LONGHORN-PREREQ"
	IDNodeCertExpiry       = "SC-NODE-CERT-EXPIRY"
	IDTimeUnsynced         = "SC-TIME-UNSYNCED"
	IDTokenAge             = "SC-TOKEN-AGE"
	IDSecondCluster        = "SC-SECOND-CLUSTER"
	IDMTUMismatch          = "SC-MTU-MISMATCH"
	IDDuplicateAddress     = "SC-DUPLICATE-ADDRESS"
	IDPeerPorts            = "SC-PEER-PORTS"
	IDFenceSettings        = "SC-FENCE-SETTINGS"
	IDNodePolicy           = "SC-NODE-POLICY"
	IDAuditChain           = "SC-AUDIT-CHAIN"
	IDNodeCredential       = "SC-NODE-CREDENTIAL"
)

// oneServerAtATime ends every next step that restarts k3s on more than
// one node: restarting two of three servers at once loses etcd's quorum.
const oneServerAtATime = "one server at a time; wait until " + IDEtcdQuorum + " is ok before the next"

// checkDeadline is each check's own deadline: the checks that read the
// snapshot finish in microseconds, those that ask the API server or the
// agent make one or two requests.
const checkDeadline = 5 * time.Second

// scanDeadline bounds the scan of the cluster prefix: up to 254 hosts,
// 64 at a time, a second each for a host that does not answer.
const scanDeadline = 8 * time.Second

// Checks are every check, in no particular order (the report sorts).
func Checks() []Check {
	return []Check{
		{ID: IDEtcdQuorum, Area: AreaControlPlane, Title: "etcd members and quorum", Deadline: checkDeadline, NeedsAPI: true,
			Next: "bring the down servers back before any drain, remove or replace", Run: checkEtcdQuorum},
		{ID: IDNodeNotReady, Area: AreaNodes, Title: "nodes Ready", Deadline: checkDeadline, NeedsAPI: true,
			Next: "check the node's power and network; on it: systemctl status sitecon-agent", Run: checkNodesNotReady},
		{ID: IDNodeCordoned, Area: AreaNodes, Title: "nodes left cordoned", Deadline: checkDeadline, NeedsAPI: true,
			Next: "if its maintenance is over: sitecon uncordon NODE", Run: checkNodesCordoned},
		{ID: IDNodeDiskPressure, Area: AreaNodes, Title: "nodes' disk pressure", Deadline: checkDeadline, NeedsAPI: true,
			Next: "free space on the node (images: k3s crictl rmi --prune; logs) before the kubelet evicts pods", Run: checkDiskPressure},
		{ID: IDStatsLeaderLost, Area: AreaNodes, Title: "stats leader", Deadline: checkDeadline, NeedsAPI: true,
			Next: "another node's agent takes the lease once it expires; if none does, check the agents (systemctl status sitecon-agent)", Run: checkStatsLeader},
		{ID: IDVolumeDegraded, Area: AreaStorage, Title: "volumes degraded", Deadline: checkDeadline, NeedsAPI: true,
			Next: "bring back the node of the failed replica; Longhorn rebuilds it (sitecon: volumes screen)", Run: checkVolumesDegraded},
		{ID: IDVolumeFaulted, Area: AreaStorage, Title: "volumes faulted", Deadline: checkDeadline, NeedsAPI: true,
			Next: "no healthy replica is left: bring back the nodes that held them; do not delete the volume", Run: checkVolumesFaulted},
		{ID: IDReplicaUnschedulable, Area: AreaStorage, Title: "replicas Longhorn cannot schedule", Deadline: checkDeadline, NeedsAPI: true,
			Next: "give Longhorn a node with room (disk space, Ready, schedulable) or lower the volume's replica count", Run: checkReplicasUnschedulable},
		{ID: IDSupportBundleLeft, Area: AreaStorage, Title: "leftover Longhorn support bundles", Deadline: checkDeadline, NeedsAPI: true,
			Next: "delete them: kubectl -n longhorn-system delete supportbundles.longhorn.io --all (they block volume creation)", Run: checkSupportBundles},
		{ID: IDAppAway, Area: AreaApps, Title: "apps on their designated node", Deadline: checkDeadline, NeedsAPI: true,
			Next: "when the designated node is Ready again: sitecon return-home APP", Run: checkAppsAway},
		{ID: IDAppPending, Area: AreaApps, Title: "apps waiting to be scheduled", Deadline: checkDeadline, NeedsAPI: true,
			Next: "the scheduler's reason says what is missing: a Ready node, room, or a label", Run: checkAppsPending},
		{ID: IDAppNotRunning, Area: AreaApps, Title: "apps placed but not running", Deadline: checkDeadline, NeedsAPI: true,
			Next: "l on the console's apps screen for its log; a lost node's apps move (auto) or wait for it (pinned)", Run: checkAppsNotRunning},
		{ID: IDOverrideStale, Area: AreaApps, Title: "on-site placement overrides", Deadline: checkDeadline, NeedsAPI: true,
			Next: "remove the entry: kubectl -n eve-kube-app edit configmap sitecon-placement, or migrate the app again", Run: checkOverrides},
		{ID: IDAppConfigRejected, Area: AreaThisNode, Title: "app configs this node's agent rejects", Deadline: checkDeadline,
			Next: "fix the named field of the file (or the controller's config); the agent retries by itself", Run: checkAgentConfigErrors},
		{ID: IDFenceSettings, Area: AreaNodes, Title: "nodes' fence and failover timeout", Deadline: checkDeadline, NeedsAPI: true,
			Next: "run every node's agent with fencing on and one --failover-timeout (the default, 28s): systemctl cat sitecon-agent", Run: checkFenceSettings},
		{ID: IDNodePolicy, Area: AreaControlPlane, Title: "the policies that keep a node's identity to its own node and apps", Deadline: checkDeadline, NeedsAPI: true,
			Next: "restart a server's agent (systemctl restart sitecon-agent): it puts them in force at start", Run: checkNodePolicies},
		{ID: IDClockSkew, Area: AreaNodes, Title: "nodes' clocks", Deadline: checkDeadline,
			Next: "synchronise the nodes' time (timedatectl status; an NTP server every node reaches)", Run: checkClocks},
		{ID: IDSecondCluster, Area: AreaNetwork, Title: "other clusters on the cluster prefix", Deadline: scanDeadline,
			Next: "identify the device first (ip neigh show ADDR, the switch's MAC table), then move that device or its cluster; never re-address a formed cluster", Run: checkSecondCluster},
		{ID: IDMTUMismatch, Area: AreaNetwork, Title: "cluster interfaces' MTU", Deadline: checkDeadline,
			Next: "set one MTU on every node's cluster interface, then restart k3s on the nodes changed, " + oneServerAtATime, Run: checkMTU},
		{ID: IDDuplicateAddress, Area: AreaNetwork, Title: "duplicates of the nodes' cluster addresses", Deadline: checkDeadline,
			Next: "find the device with that hardware address and take the address off it", Run: checkDuplicateAddress},
		{ID: IDPeerPorts, Area: AreaNetwork, Title: "peers' cluster ports from here", Deadline: checkDeadline,
			Next: "check the firewall between the nodes and that the service runs on the peer", Run: checkPeerPorts},
		{ID: IDCertExpiry, Area: AreaThisNode, Title: "k3s certificates", Deadline: checkDeadline,
			Next: "restart k3s within 90 days of expiry (systemctl restart sitecon-agent) or run k3s certificate rotate; " + oneServerAtATime, Run: checkCerts},
		// The checks each node's agent makes for its report (nodechecks.go).
		{ID: IDLonghornPrereq, Area: AreaStorage, Title: "Longhorn's prerequisites on every node", Deadline: checkDeadline,
			Next: "install and start what is missing on the node (iscsid, iscsi_tcp, an NFS client; multipathd blacklisting /dev/sd*)", Run: checkLonghornPrereqs},
		{ID: IDNodeCertExpiry, Area: AreaControlPlane, Title: "k3s certificates on every node", Deadline: checkDeadline,
			Next: "on the node: restart k3s within 90 days of expiry (systemctl restart sitecon-agent) or run k3s certificate rotate; " + oneServerAtATime, Run: checkNodeCerts},
		{ID: IDTimeUnsynced, Area: AreaNodes, Title: "nodes' time synchronisation", Deadline: checkDeadline,
			Next: "on the node: timedatectl status; give it an NTP server it reaches", Run: checkTimeSync},
		{ID: IDTokenAge, Area: AreaControlPlane, Title: "the cluster token's age on every node", Deadline: checkDeadline,
			Next: tokenRotateNext, Run: checkTokenAge},
		{ID: IDNodeCredential, Area: AreaNodes, Title: "nodes' own credentials, which sign their proofs of life", Deadline: checkDeadline,
			Next: credentialNext, Run: checkNodeCredentials},
		{ID: IDAuditChain, Area: AreaThisNode, Title: "this machine's audit log whole", Deadline: checkDeadline,
			Next: "keep the log as it is (it is evidence); compare it with the support bundles taken before, and ask who had root here", Run: checkAuditChain},
	}
}
