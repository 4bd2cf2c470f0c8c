package formation

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"

	"github.com/sitecon/sitecon/agent/config"
)

// DefaultClusterPrefix is the cluster prefix offline formation uses unless
// told otherwise: 13 host addresses on a /28.
const DefaultClusterPrefix = "10.244.244.0/28"

// FormNode is one node of a cluster being formed.
type FormNode struct {
	Name string
	// UUID is the EVE device UUID; empty: one is generated.
	UUID   string
	Worker bool
}

// FormRequest is what offline formation needs to know.
type FormRequest struct {
	ClusterName string
	Interface   string
	// Prefix is the cluster network, e.g. 10.244.244.0/28.
	Prefix string
	// Seed names the seed server; empty: the first node.
	Seed  string
	Nodes []FormNode
	// ExistingPrefixes are the subnets already on the cluster interface; the
	// cluster prefix must not overlap them.
	ExistingPrefixes []netip.Prefix
	// Rand is the randomness source for the UUIDs and the token (tests fix it).
	Rand io.Reader
}

// FormPlan is a formed cluster: every node's config and the shared token.
type FormPlan struct {
	ClusterID string
	Token     config.Secret
	Nodes     []JoinBundle
}

// Plan forms a cluster: it generates the cluster UUID and token, gives each
// node an address (the seed the first host address, the others in order) and
// returns every node's config. Every problem is reported at once.
func Plan(req FormRequest) (*FormPlan, error) {
	var problems []*config.FieldError
	add := func(field, problem, fix string) {
		problems = append(problems, &config.FieldError{Field: field, Problem: problem, Fix: fix})
	}
	rnd := req.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	if !config.ClusterNameRegexp.MatchString(req.ClusterName) {
		add("cluster name", fmt.Sprintf("%q is not a valid name", req.ClusterName), "use letters, digits, '-', '_' or '.', at most 63 characters")
	}
	if req.Interface == "" {
		add("interface", "missing", "name the cluster interface, e.g. eth1")
	}
	prefixText := req.Prefix
	if prefixText == "" {
		prefixText = DefaultClusterPrefix
	}
	network, err := netip.ParsePrefix(prefixText)
	if err != nil || !network.Addr().Is4() {
		add("prefix", fmt.Sprintf("%q is not an IPv4 prefix", prefixText), "write e.g. 10.244.244.0/28")
	} else {
		network = network.Masked()
		for _, existing := range req.ExistingPrefixes {
			if existing.Overlaps(network) {
				add("prefix", fmt.Sprintf("%s overlaps %s already on %s", network, existing.Masked(), req.Interface), "choose a prefix the site LAN does not use")
			}
		}
		if hosts := (1 << (32 - network.Bits())) - 2; hosts < len(req.Nodes) {
			add("prefix", fmt.Sprintf("%s has %d host addresses for %d nodes", network, max(hosts, 0), len(req.Nodes)), "use a shorter prefix")
		}
	}
	if len(req.Nodes) == 0 {
		add("nodes", "no nodes", "name the cluster's nodes")
	}
	seed := req.Seed
	if seed == "" && len(req.Nodes) > 0 {
		seed = req.Nodes[0].Name
	}
	seen := map[string]bool{}
	seedFound := false
	for _, n := range req.Nodes {
		if !config.NodeNamePattern.MatchString(n.Name) {
			add("nodes", fmt.Sprintf("%q is not a valid node name", n.Name), "use lower-case letters, digits and '-'")
		}
		if seen[n.Name] {
			add("nodes", fmt.Sprintf("%s is named twice", n.Name), "give every node its own name")
		}
		seen[n.Name] = true
		if n.UUID != "" && !config.UUIDPattern.MatchString(n.UUID) {
			add("nodes", fmt.Sprintf("%s: %q is not a UUID", n.Name, n.UUID), "use the 8-4-4-4-12 hex form or leave it out")
		}
		if n.Name == seed {
			seedFound = true
			if n.Worker {
				add("seed", fmt.Sprintf("%s is a worker node", seed), "choose a server node as the seed")
			}
		}
	}
	if seed != "" && !seedFound {
		add("seed", fmt.Sprintf("%s is not one of the nodes", seed), "choose one of the nodes")
	}
	if len(problems) > 0 {
		return nil, &config.ValidationError{Problems: problems}
	}

	clusterID, err := newUUID(rnd)
	if err != nil {
		return nil, err
	}
	tokenBytes := make([]byte, 32)
	if _, err := io.ReadFull(rnd, tokenBytes); err != nil {
		return nil, err
	}
	plan := &FormPlan{ClusterID: clusterID, Token: config.Secret(hex.EncodeToString(tokenBytes))}
	// The seed takes the first host address, the rest follow in order.
	ordered := make([]FormNode, 0, len(req.Nodes))
	for _, n := range req.Nodes {
		if n.Name == seed {
			ordered = append([]FormNode{n}, ordered...)
		} else {
			ordered = append(ordered, n)
		}
	}
	addr := network.Addr().Next()
	joinIP := addr
	for _, n := range ordered {
		uuid := n.UUID
		if uuid == "" {
			if uuid, err = newUUID(rnd); err != nil {
				return nil, err
			}
		}
		plan.Nodes = append(plan.Nodes, JoinBundle{
			Version:          bundleVersion,
			ClusterName:      req.ClusterName,
			ClusterID:        clusterID,
			ClusterInterface: req.Interface,
			ClusterIPPrefix:  netip.PrefixFrom(addr, network.Bits()).String(),
			IsWorkerNode:     n.Worker,
			JoinServerIP:     joinIP.String(),
			Token:            plan.Token,
			NodeName:         n.Name,
			NodeUUID:         uuid,
		})
		addr = addr.Next()
	}
	return plan, nil
}

func newUUID(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", err
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
