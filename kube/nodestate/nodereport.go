package nodestate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Node reports: each node's agent serves what it knows of itself on its
// cluster address (agent/statusserver, behind the cluster key), and the
// console and `sitecon status` read every node's directly when the
// cluster API does not answer. These are the report's and the reading's
// shapes; the field names of the agent's own state are those of its local
// API (agent.State), so a report reads as `sitecon agent status` does.

// NodeReport is what one node's agent says of itself.
type NodeReport struct {
	Node      string `json:"node"`
	ClusterID string `json:"clusterID,omitempty"`
	Role      string `json:"role,omitempty"`
	// Phase is the agent's bootstrap phase, since Since.
	Phase     string    `json:"phase"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
	// ClusterIP is the node's cluster address; ClusterIPReady says it is on
	// the interface with its firewall.
	ClusterIP      string     `json:"clusterIP,omitempty"`
	ClusterIPReady bool       `json:"clusterIPReady"`
	ConfigError    string     `json:"configError,omitempty"`
	ConfigNote     string     `json:"configNote,omitempty"`
	K3s            K3sReport  `json:"k3s"`
	Etcd           EtcdReport `json:"etcd"`
	// Peers are the nodes this agent last saw in its cluster (its cache,
	// however old), with their cluster addresses: a reader that knew only
	// some of the nodes asks the others too, and one that does not answer
	// is still listed.
	Peers []NodePeer `json:"peers,omitempty"`
	// Network is the node's cluster interface (nodereport_network.go);
	// nil from an agent older than it.
	Network *NetworkReport `json:"network,omitempty"`
	// Version is the agent's build.
	Version string `json:"version,omitempty"`
	// Clock is the agent's clock when it answered: the reader compares it
	// with its own.
	Clock time.Time `json:"clock"`
	// The node-side checks sitecon doctor gathers (kube/nodestate/nodechecks.go);
	// nil from an agent that predates them.
	Storage *StorageReport `json:"storage,omitempty"`
	Time    *TimeReport    `json:"time,omitempty"`
	Certs   *CertsReport   `json:"certs,omitempty"`
	// Token is since when this node applies its cluster token; nil from
	// an agent older than it, or one with no config applied.
	Token *TokenReport `json:"token,omitempty"`
	// Credential is whether the agent signs its proof of life with the
	// node's own credential; nil from an agent older than it.
	Credential *CredentialReport `json:"credential,omitempty"`
}

// NodePeer is a node as another node's agent last saw it.
type NodePeer struct {
	Name string `json:"name"`
	// Address is its InternalIP, its cluster address.
	Address string `json:"address,omitempty"`
}

// NodePeers are nodes' names and InternalIPs.
func NodePeers(nodes []*corev1.Node) []NodePeer {
	var out []NodePeer
	for _, n := range nodes {
		p := NodePeer{Name: n.Name}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				p.Address = a.Address
				break
			}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b NodePeer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// K3sReport is the k3s this agent supervises.
type K3sReport struct {
	// Supervised: this agent runs k3s (false: it was started without
	// bring-up, --no-bootstrap, or has not started k3s yet).
	Supervised bool `json:"supervised"`
	Running    bool `json:"running"`
	// RunningSince is when the running k3s started.
	RunningSince *time.Time `json:"runningSince,omitempty"`
	Starts       int        `json:"starts"`
	// LastExit is how k3s last exited.
	LastExit string `json:"lastExit,omitempty"`
}

// EtcdReport is this node's etcd member's view of etcd, as the agent last
// observed it through its local endpoint (it never waits on etcd to
// answer a report).
type EtcdReport struct {
	// View is the last observation; nil when there is none.
	View *EtcdView `json:"view,omitempty"`
	// Error is why the last observation failed (no member here: a
	// worker's, or etcd not answering).
	Error string `json:"error,omitempty"`
}

// Text is k3s's state in a few words: "running 2h (3 starts)", "not
// running: exit status 1", "not run here" (this agent runs no k3s).
func (k K3sReport) Text(now time.Time) string {
	switch {
	case !k.Supervised:
		return "not run here"
	case k.Running:
		s := "running"
		if k.RunningSince != nil {
			s += " " + shortAge(now.Sub(*k.RunningSince))
		}
		if k.Starts > 1 {
			s += fmt.Sprintf(" (%d starts)", k.Starts)
		}
		return s
	case k.LastExit != "":
		return "not running: " + k.LastExit
	}
	return "not running"
}

// Text is the member's view of etcd in a few words: "3/3 healthy, leader
// node-a-…", "no quorum: 1/3 healthy, no leader", "no view: no etcd member
// here (…)".
func (e EtcdReport) Text() string {
	if e.View == nil {
		if e.Error != "" {
			return "no view: " + e.Error
		}
		return "not observed yet"
	}
	healthy, voters := 0, 0
	leader := ""
	for _, m := range e.View.Members {
		if m.Learner {
			continue
		}
		voters++
		if m.Healthy {
			healthy++
		}
		if m.Leader {
			leader = m.Name
		}
	}
	// The finding first: a narrow table cuts the end.
	s := fmt.Sprintf("%d/%d healthy", healthy, voters)
	if voters > 0 && healthy < voters/2+1 {
		s = "no quorum: " + s
	}
	switch {
	case leader != "":
		s += ", leader " + leader
	default:
		s += ", no leader"
	}
	if e.Error != "" {
		// The view is an older observation's: say first that the
		// member does not answer now (a narrow table cuts the end).
		s = "no answer now; before: " + s + " (now: " + e.Error + ")"
	}
	return s
}

// NodeAnswer is what one address answered a reader asking for its node's
// report: a report that verified with the cluster's key, or why there is
// none. A node that does not answer never hides another's answer.
type NodeAnswer struct {
	// Address is where the reader asked (host:port).
	Address string `json:"address"`
	// Node is the node the reader expected there (from the cluster's last
	// known Nodes; "" for an address of the config alone).
	Node string `json:"node,omitempty"`
	// Answered: a report came and verified.
	Answered bool        `json:"answered"`
	Report   *NodeReport `json:"report,omitempty"`
	// Problem is why there is no verified report: no answer (a timeout,
	// the connection refused), a refusal (the clocks differ), or an answer
	// not made with this cluster's key.
	Problem string `json:"problem,omitempty"`
	// NotOwn is a report made with this cluster's key but not signed with
	// its node's own credential where the reader checks that: never the
	// node's word (Report stays nil), kept only so the doctor can say why
	// the node cannot sign (its Credential section).
	NotOwn *NodeReport `json:"notOwn,omitempty"`
	// ClockSkew is the node's clock minus the reader's (the middle of the
	// exchange), when it answered.
	ClockSkew time.Duration `json:"clockSkewNanoseconds,omitempty"`
}

// Name is the node's name: its report's, else the one expected there,
// else its address.
func (a NodeAnswer) Name() string {
	switch {
	case a.Report != nil && a.Report.Node != "":
		return a.Report.Node
	case a.Node != "":
		return a.Node
	}
	host, _, _ := strings.Cut(a.Address, ":")
	return host
}

// NodeReports is a round of asking every node.
type NodeReports struct {
	// At is when the round began.
	At      time.Time    `json:"at"`
	Answers []NodeAnswer `json:"answers"`
	// Problem is why no node could be asked at all (no cluster config).
	Problem string `json:"problem,omitempty"`
}

// shortAge is a duration as a cell says it: 42s, 5m, 3h, 2d.
func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(max(d, 0).Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
