package formation

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sitecon/sitecon/agent/config"
)

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
