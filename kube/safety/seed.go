package safety

import "fmt"

// SeedCheck says why node cannot be the seed server (the address every
// node joins through), or nil: the seed must be Ready, an etcd member, and
// have an internal address.
func SeedCheck(nodes []Node, node string) error {
	for _, n := range nodes {
		if n.Name != node {
			continue
		}
		switch {
		case !n.Ready:
			return fmt.Errorf("%s is not Ready: the seed must answer joiners now", node)
		case !n.EtcdMember:
			return fmt.Errorf("%s is not an etcd member: only a server with etcd can be the seed", node)
		case n.InternalIP == "":
			return fmt.Errorf("%s has no internal address to join through", node)
		}
		return nil
	}
	return fmt.Errorf("%s: %w (nodes: %s)", node, ErrUnknownNode, nodeNames(nodes))
}
