package k3s

import "path/filepath"

// ClientCA is the CA k3s writes on every node, servers and agents alike,
// that issues the clients' certificates, each node's own identity
// (NodeKubeconfig) among them: what one node checks another's signed word
// against (agent/nodecred).
func ClientCA(p Paths) string {
	return filepath.Join(p.DataDir, "agent", "client-ca.crt")
}
