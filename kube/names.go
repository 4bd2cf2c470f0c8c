package kube

// The names sitecon reads and writes on Kubernetes objects, all in one
// place: namespaces, Leases, ConfigMaps and their keys, labels,
// annotations, and the RBAC objects of the agents. The agent (package
// agent) and the console use these, never a string of their own.

// Namespaces sitecon reports pod health for, in display order.
var Namespaces = []string{"kube-system", "longhorn-system", "kubevirt", "cdi", AppNamespace}

// Namespaces and Leases.
const (
	// AppNamespace holds the user apps (pods, VMIs) and sitecon's own objects.
	AppNamespace = "eve-kube-app"
	// LonghornNamespace holds Longhorn's volumes and replicas.
	LonghornNamespace = "longhorn-system"
	// VIPLeaseName is kube-vip's control-plane Lease; its holder owns the VIP.
	VIPLeaseName = "plndr-cp-lock"
	// VIPLeaseNamespace is where kube-vip keeps that Lease.
	VIPLeaseNamespace = "kube-system"
	// StatsLeaderLeaseName is the Lease whose holder publishes cluster-wide
	// stats (EVE: the stats leader), in AppNamespace.
	StatsLeaderLeaseName = "eve-kube-stats-leader"
)

// ConfigMaps, in AppNamespace.
const (
	// ClusterConfigMapName describes the cluster (name, UUID, seed, VIP address),
	// written by formation and read by every node.
	ClusterConfigMapName = "sitecon-cluster"
	// PlacementConfigMapName holds on-site placement overrides (app UUID →
	// JSON PlacementOverride), read by every agent.
	PlacementConfigMapName = "sitecon-placement"
	// EtcdMembersConfigMapName is where the agents of the server nodes
	// publish etcd's member list as each of them observes it: one key per
	// observing node, each written only by that node's agent (server-side
	// apply, its own field manager), so the writers never conflict and a
	// dead node's entry simply ages. Every snapshot already watches
	// AppNamespace's ConfigMaps: the console and the actions read it with
	// no request of their own.
	EtcdMembersConfigMapName = "sitecon-etcd-members"
)

// Keys of the sitecon-cluster ConfigMap.
const (
	ClusterKeyName         = "cluster_name"
	ClusterKeyID           = "cluster_id"
	ClusterKeyJoinServerIP = "join_server_ip"
	ClusterKeyVIPAddress   = "vip_address"
	// ClusterKeySeedNode names the seed node.
	ClusterKeySeedNode = "seed_node"
	// ClusterKeyNodes lists the cluster's nodes (comma-separated).
	ClusterKeyNodes = "nodes"
	// ClusterKeyFailoverTimeout is the cluster's one failover timeout
	// ("28s"): the stats leader times a lost node's pods by it, and a
	// node whose agent fences with another is held and reported. The
	// first member writes its own --failover-timeout; no agent changes it
	// after that.
	ClusterKeyFailoverTimeout = "failover_timeout"
)

// Labels sitecon reads on Kubernetes objects.
const (
	// LabelNodeUUID carries the EVE device UUID on its Node.
	LabelNodeUUID = "node-uuid"
	// LabelEtcd marks a node that runs an etcd member.
	LabelEtcd = "node-role.kubernetes.io/etcd"
	// LabelAppUUID carries the EVE app instance UUID on an app's pods and VMIs.
	LabelAppUUID = "sitecon.io/app-uuid"
	// LabelAppName carries the app's display name.
	LabelAppName = "sitecon.io/app-name"
	// LabelEdgeworker marks a generic Linux host joined as a k3s agent.
	LabelEdgeworker = "node-role.sitecon.io/edgeworker"

	nodeRolePrefix = "node-role.kubernetes.io/"
	// VirtLauncherPrefix begins the name of the pod KubeVirt runs each VMI in.
	VirtLauncherPrefix = "virt-launcher-"
)

// Annotations on an app's workload.
const (
	// AnnotationConfigDNId on an app's workload is its designated_node_id
	// in the app config; an override must name it to hold.
	AnnotationConfigDNId = "sitecon.io/config-dnid"
	// AnnotationConfigVersion on an app's workload is the version of the
	// app config it was laid out from; an override records it.
	AnnotationConfigVersion = "sitecon.io/config-version"
	// AnnotationConfigHash on an app's workload is the hash of the app
	// config it was laid out from.
	AnnotationConfigHash = "sitecon.io/config-hash"
	// AnnotationDNId on an app's workload is the UUID of the node that
	// laid it out: that node removes it when its app goes away.
	AnnotationDNId = "sitecon.io/dnid"
	// AnnotationVNCPort on a VM app's VMI is the port of its VNC console.
	AnnotationVNCPort = "sitecon.io/vnc-port"
	// AnnotationNetworks is Multus's list of the attachments a pod (a VM's
	// VMI) asks for; sitecon's passthrough attachments are host-<port>.
	AnnotationNetworks = "k8s.v1.cni.cncf.io/networks"
	// AnnotationFence on a Node is its agent's fence settings, written by
	// that agent ("on 28s": it fences, with that failover timeout; "off"
	// with --no-fence): the stats leader force-deletes a lost node's pods
	// only when the node fences with the leader's own timeout.
	AnnotationFence = "sitecon.io/fence"
)

// LonghornDrainPolicySetting is Longhorn's node drain policy setting.
const LonghornDrainPolicySetting = "node-drain-policy"

// The agents' RBAC objects.
const (
	// AgentRoleName names the ClusterRole and binding (reads, cluster-wide) and
	// the Role and binding in the app namespace (layouts) of the nodes' agents.
	AgentRoleName = "sitecon-agent"
	// NodePolicyName names the ValidatingAdmissionPolicy (and its binding) that
	// keeps a node's writes to its own node.
	NodePolicyName = "sitecon-node-restriction"
	// NodeAppsPolicyName names the ValidatingAdmissionPolicy (and its
	// binding) that keeps a node's writes of workloads to the apps the
	// servers record it the designated node of (DesignationsConfigMapName).
	NodeAppsPolicyName = "sitecon-node-apps"
	// DesignationsConfigMapName names the ConfigMap in the app namespace in
	// which the stats leader, a server, records which node lays out each
	// app: NodeAppsPolicyName's parameter. No node's identity writes it.
	DesignationsConfigMapName = "sitecon-designations"
)
