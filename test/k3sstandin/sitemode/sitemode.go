// Package sitemode is what sitebox tells the k3s stand-in when the stand-in
// runs as a node's k3s in sitebox's bootstrap mode: where the site's API
// server and the node's etcd member live, in the machine's network
// namespace, while the node's agent and its stand-in run in the node's own.
package sitemode

import (
	"encoding/json"
	"fmt"
	"os"
)

// Env names the file (JSON, a Node) that puts the stand-in in sitebox's
// bootstrap mode. The node's agent passes its environment on to its k3s.
const Env = "K3SSTANDIN_SITEBOX"

// Node is one node's side of the site, as the stand-in sees it.
type Node struct {
	// HostNetns is the machine's network namespace (a path such as
	// /proc/1/ns/net), where the API server and the etcd members listen.
	HostNetns string `json:"hostNetns"`
	// APIServer is the site's API server, host:port in HostNetns: the
	// stand-in's :6443 relays to it, as k3s's own API port serves.
	APIServer string `json:"apiServer"`
	// ServerCA is the site's CA certificate, written where k3s keeps its
	// server CA (<data-dir>/server/tls/server-ca.crt).
	ServerCA string `json:"serverCA"`
	// ServerCAKey is the site's CA private key, written on servers where
	// k3s keeps its server CA key (<data-dir>/server/tls/server-ca.key), as
	// k3s's bootstrap data gives it to every server; workers get none.
	ServerCAKey string `json:"serverCAKey,omitempty"`
	// NodeKubeconfig is the node's own identity (system:node:NAME), naming
	// 127.0.0.1:6443: written where k3s writes the one it issued the
	// node, <data-dir>/agent/kubelet.kubeconfig, servers included.
	NodeKubeconfig string `json:"nodeKubeconfig,omitempty"`
	// NodeClientCA is the CA that issued the nodes' identities, written
	// beside the node's kubeconfig as <data-dir>/agent/client-ca.crt.
	NodeClientCA string `json:"nodeClientCA,omitempty"`
	// Etcd is the node's etcd member; nil on a worker.
	Etcd *Etcd `json:"etcd,omitempty"`
}

// Etcd is a node's etcd member, run by the stand-in as k3s runs the
// embedded one of a server.
type Etcd struct {
	// CommandFile holds the member's command line, a JSON array (sitebox's
	// DIR/run/etcd-NODE.cmd): its data dir is kept across starts.
	CommandFile string `json:"commandFile"`
	// PIDFile is where sitebox looks for the member's PID.
	PIDFile string `json:"pidFile"`
	// LogFile receives the member's output.
	LogFile string `json:"logFile"`
	// Client is the member's client address, host:port in HostNetns: the
	// stand-in's 127.0.0.1:2379 relays to it, where k3s serves etcd.
	Client string `json:"client"`
	// Members are every member's client address, host:port in HostNetns,
	// as the member list advertises them: the stand-in listens on each in
	// the node's namespace too and relays it, as every member's client URL
	// is reachable from every server on a device's LAN. Without them, a
	// node's own view of etcd (its agent's observation, a leave's
	// preflight) finds every other member silent.
	Members []string `json:"members,omitempty"`
}

// Read reads a Node from path.
func Read(path string) (Node, error) {
	var n Node
	data, err := os.ReadFile(path)
	if err != nil {
		return n, err
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return n, fmt.Errorf("%s: %w", path, err)
	}
	if n.HostNetns == "" || n.APIServer == "" {
		return n, fmt.Errorf("%s: hostNetns and apiServer are required", path)
	}
	return n, nil
}
