package formation

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"

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

// JoinBundle is everything a node needs to join a cluster formed offline.
// It carries the token: it is secret, like the token file.
type JoinBundle struct {
	Version          int           `json:"v"`
	ClusterName      string        `json:"cluster_name"`
	ClusterID        string        `json:"cluster_id"`
	ClusterInterface string        `json:"cluster_interface"`
	ClusterIPPrefix  string        `json:"cluster_ip_prefix"`
	IsWorkerNode     bool          `json:"is_worker_node,omitempty"`
	JoinServerIP     string        `json:"join_server_ip"`
	Token            config.Secret `json:"-"`
	NodeName         string        `json:"node_name"`
	NodeUUID         string        `json:"node_uuid"`
	// ExistingCluster says the bundle was made on a cluster that already
	// runs (join-info, node add/replace): the node joins it and must never
	// initialise one, whatever address it is given.
	ExistingCluster bool `json:"existing_cluster,omitempty"`
}

// bundleWire is the bundle as encoded: the token in clear inside.
type bundleWire struct {
	JoinBundle
	Token string `json:"token"`
}

const (
	bundleVersion = 1
	BundlePrefix  = "sitecon-join.v1."
)

// Encode turns the bundle into one copy-pasteable line:
// sitecon-join.v1.<base64 of the JSON>.<first 8 bytes of its SHA-256, hex>.
func (b JoinBundle) Encode() (string, error) {
	data, err := json.Marshal(bundleWire{JoinBundle: b, Token: b.Token.Reveal()})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return BundlePrefix + base64.RawStdEncoding.EncodeToString(data) + "." + hex.EncodeToString(sum[:8]), nil
}

// ErrBundleChecksum means a bundle was mistyped or cut short.
var ErrBundleChecksum = errors.New("join bundle checksum does not match: it was mistyped or cut short; copy it again")

// DecodeBundle checks and decodes a join bundle. Whitespace (line breaks from
// a terminal) is ignored.
func DecodeBundle(s string) (JoinBundle, error) {
	s = strings.Join(strings.Fields(s), "")
	rest, ok := strings.CutPrefix(s, BundlePrefix)
	if !ok {
		return JoinBundle{}, errors.New("not a sitecon join bundle (it starts with " + BundlePrefix + ")")
	}
	payload, sumHex, ok := strings.Cut(rest, ".")
	if !ok || len(sumHex) != 16 {
		return JoinBundle{}, ErrBundleChecksum
	}
	// Strict: a typo in the last character's unused bits must not decode to
	// the same bytes and slip past the checksum.
	data, err := base64.RawStdEncoding.Strict().DecodeString(payload)
	if err != nil {
		return JoinBundle{}, ErrBundleChecksum
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:8]) != strings.ToLower(sumHex) {
		return JoinBundle{}, ErrBundleChecksum
	}
	var w bundleWire
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return JoinBundle{}, fmt.Errorf("join bundle content: %w", err)
	}
	if w.Version != bundleVersion {
		return JoinBundle{}, fmt.Errorf("join bundle version %d; this sitecon reads version %d", w.Version, bundleVersion)
	}
	b := w.JoinBundle
	b.Token = config.Secret(w.Token)
	return b, nil
}

// NodeFiles are the files that make a node a cluster member: its cluster
// config and its token file.
type NodeFiles struct {
	ConfigPath string
	Config     []byte
	TokenPath  string
	Token      config.Secret
}

// Files turns a bundle into this node's config, with the token in a file of
// its own under dir (the config names it). iface overrides the bundle's
// cluster interface when this node's port has another name.
func (b JoinBundle) Files(dir, iface string) (NodeFiles, error) {
	if iface == "" {
		iface = b.ClusterInterface
	}
	tokenPath := filepath.Join(dir, "token")
	cfg := config.Config{
		ClusterName:      b.ClusterName,
		ClusterID:        b.ClusterID,
		ClusterInterface: iface,
		ClusterIPPrefix:  b.ClusterIPPrefix,
		IsWorkerNode:     b.IsWorkerNode,
		JoinServerIP:     b.JoinServerIP,
		TokenFile:        tokenPath,
		NodeName:         b.NodeName,
		NodeUUID:         b.NodeUUID,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return NodeFiles{}, err
	}
	return NodeFiles{ConfigPath: filepath.Join(dir, "cluster.json"), Config: append(data, '\n'), TokenPath: tokenPath, Token: b.Token}, nil
}

// Write writes the token, then the config that names it, each atomically
// with mode 0600.
func (f NodeFiles) Write() error {
	if err := config.WriteFileAtomic(f.TokenPath, []byte(f.Token.Reveal()+"\n"), 0o600); err != nil {
		return err
	}
	return config.WriteFileAtomic(f.ConfigPath, f.Config, 0o600)
}
