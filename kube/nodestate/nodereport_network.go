package nodestate

import "time"

// NetworkReport is a node's cluster interface as its agent sees it (its
// own view: sitecon doctor compares the nodes' MTUs and reads each one's
// duplicate-address probe from it). A report without it comes from an
// older agent: the doctor says its checks could not run for that node.
type NetworkReport struct {
	// Interface is the cluster interface's name; MTU its MTU, read
	// through netlink when the report was made.
	Interface string `json:"interface,omitempty"`
	MTU       int    `json:"mtu,omitempty"`
	// Problem is why the interface could not be read (no cluster config
	// applied, the interface missing).
	Problem string `json:"problem,omitempty"`
	// Unmanaged: the agent runs without bootstrap (--no-bootstrap) and
	// configures no cluster interface: there is nothing of its own for
	// the network checks to read (a sitebox node, a host whose network
	// sitecon does not manage), which is no fault of the node.
	Unmanaged bool `json:"unmanaged,omitempty"`
	// AddressProbe is the agent's last ARP probe for its own cluster
	// address; nil before the first.
	AddressProbe *AddressProbe `json:"addressProbe,omitempty"`
}

// AddressProbe is one ARP probe (RFC 5227: sender address 0.0.0.0) from
// the cluster interface for the node's own cluster address: another
// device that answers holds the same address.
type AddressProbe struct {
	Address string    `json:"address"`
	At      time.Time `json:"at"`
	// HeldBy is the hardware address of another device that answered for
	// Address; empty when none did.
	HeldBy string `json:"heldBy,omitempty"`
	// Every is how often the agent probes (zero from an older agent): a
	// probe much older than that says nothing of now.
	Every time.Duration `json:"every,omitempty"`
	// Problem is why the probe could not be made (the link down, no
	// permission, not an Ethernet link): nothing is known then.
	Problem string `json:"problem,omitempty"`
}
