package k3s

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sitecon/sitecon/agent/config"
)

// EdgeworkerLabel marks a generic Linux host joined as a k3s agent
// (StarlingX's edgeworker personality).
const EdgeworkerLabel = "node-role.sitecon.io/edgeworker=true"

// EdgeworkerInstructions tells how to join a generic Linux host, not running
// EVE, as a k3s agent: the config it needs and the command. The token is not
// printed: it is copied from this node's token file, and written in k3s's
// secure form pinning caHash (the cluster CA's, empty: unknown here) so the
// host's k3s joins only a server serving that CA.
func EdgeworkerInstructions(v *config.Validated, nodeName string, addr netip.Addr, serverVersion, caHash string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Join a generic Linux host as edgeworker %s of cluster %s.\n", nodeName, v.ClusterName)
	fmt.Fprintf(&b, "# On that host, with k3s installed")
	if serverVersion != "" {
		fmt.Fprintf(&b, " (kubelet no newer than the API server %s and at most 3 minor versions older)", serverVersion)
	}
	fmt.Fprintf(&b, ":\n#  1. Put %s/%d on its cluster-LAN interface.\n", addr, v.Prefix.Bits())
	own, _ := config.ParseToken(v.Token.Reveal())
	switch {
	case own != "":
		fmt.Fprintf(&b, "#  2. Copy the cluster token from %s:%s to /etc/rancher/k3s/cluster-token (mode 0600); it pins the cluster's CA.\n", v.NodeName, tokenSource(v))
	case caHash != "":
		fmt.Fprintf(&b, "#  2. Write the cluster token from %s:%s to /etc/rancher/k3s/cluster-token (mode 0600) in k3s's secure form,\n", v.NodeName, tokenSource(v))
		fmt.Fprintf(&b, "#     which pins the cluster's CA: K10%s::server:<that token>\n", caHash)
	default:
		fmt.Fprintf(&b, "#  2. Copy the cluster token from %s:%s to /etc/rancher/k3s/cluster-token (mode 0600).\n", v.NodeName, tokenSource(v))
		b.WriteString("#     No cluster CA was found on this node to pin (see --k3s-data-dir): the host's k3s will trust whichever server answers.\n")
	}
	b.WriteString("#  3. Write /etc/rancher/k3s/config.yaml:\n")
	doc := &yamlDoc{}
	doc.scalar("server", fmt.Sprintf("%q", "https://"+v.JoinIP.String()+":6443"))
	doc.scalar("token-file", `"/etc/rancher/k3s/cluster-token"`)
	doc.scalar("node-name", fmt.Sprintf("%q", nodeName))
	doc.scalar("node-ip", fmt.Sprintf("%q", addr.String()))
	doc.list("node-label", []string{EdgeworkerLabel})
	b.Write(doc.bytes())
	b.WriteString("#  4. Start it:\nk3s agent\n")
	return b.String()
}
