// Package k3s is what the agent makes of k3s: the node's role, the config
// files k3s reads (and the ones a generic Linux host needs to join as an
// edgeworker), and the supervised k3s process.
package k3s

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sitecon/sitecon/agent/config"
)

// Role is what this node is in the cluster.
type Role string

// Roles.
const (
	// RoleSeed is the server whose cluster address is join_server_ip: it
	// initialises the cluster on first boot.
	RoleSeed Role = "seed"
	// RoleServer is a server (control plane + etcd) that joins the seed.
	RoleServer Role = "server"
	// RoleAgent is a worker node: k3s agent only.
	RoleAgent Role = "agent"
)

// DecideRole is the node's role: the seed iff its cluster IP is the join
// server IP; otherwise a worker if is_worker_node, else a joining server.
func DecideRole(v *config.Validated) Role {
	switch {
	case v.IsSeed:
		return RoleSeed
	case v.IsWorkerNode:
		return RoleAgent
	default:
		return RoleServer
	}
}

// Paths are where k3s reads its configuration and keeps its data.
type Paths struct {
	// ConfigFile is k3s's main config file.
	ConfigFile string
	// DataDir is k3s's --data-dir; its etcd member data tells a first boot
	// from a restart.
	DataDir string
}

// DefaultPaths are k3s's own defaults.
var DefaultPaths = Paths{
	ConfigFile: "/etc/rancher/k3s/config.yaml",
	DataDir:    "/var/lib/rancher/k3s",
}

// DropInDir is the directory k3s merges after the main config file.
func (p Paths) DropInDir() string { return p.ConfigFile + ".d" }

// NodeKubeconfig is the kubeconfig of this node's own identity, which k3s
// writes on every node, servers and agents alike: the kubelet's client
// certificate (user system:node:<name>, group system:nodes), the credential
// a worker's agent reaches the cluster with (kube.EnsureAgentAccess).
func NodeKubeconfig(p Paths) string {
	return filepath.Join(p.DataDir, "agent", "kubelet.kubeconfig")
}

// AgentKubeconfig is the kubeconfig the agent reaches its cluster with:
// the one it was given, else a server's admin kubeconfig, a worker's node
// identity (a worker has no admin kubeconfig and is trusted with no more
// than its node).
func AgentKubeconfig(explicit string, role Role, p Paths, adminKubeconfig string) string {
	switch {
	case explicit != "":
		return explicit
	case role == RoleAgent:
		return NodeKubeconfig(p)
	default:
		return adminKubeconfig
	}
}

// EtcdMemberDataPresent reports whether this node has been an etcd member
// before: then even the seed must rejoin (server: ...) instead of
// initialising a new cluster over its old data.
func (p Paths) EtcdMemberDataPresent() bool {
	_, err := os.Stat(filepath.Join(p.DataDir, "server", "db", "etcd", "member"))
	return err == nil
}

// Config is what the agent writes for k3s and how it starts it.
type Config struct {
	Role Role
	// FirstBoot is true when the seed initialises the cluster.
	FirstBoot bool
	// Subcommand is "server" or "agent".
	Subcommand string
	// Files are the config files to write, in order, path to content.
	Files []RenderedFile
	// Args are k3s's arguments after the binary.
	Args []string
}

// RenderedFile is one config file.
type RenderedFile struct {
	Path string
	// Content has the token in clear; Redacted is the same text with the
	// token hidden, for screens and logs.
	Content  []byte
	Redacted []byte
}

// Names of the files the agent owns under the drop-in directory.
const nodeDropIn = "50-sitecon-node.yaml"

// Render renders the k3s configuration for a validated config.
//
// config.yaml carries cluster membership (cluster-init or server, token,
// tls-san) and, on servers, the controller-manager's failover timings
// (kube-controller-manager-arg); the drop-in carries this node's identity and network (node-name,
// node-ip, flannel-iface, node-label). Every key is a real k3s flag of the
// role's subcommand; server-only flags never go to an agent.
func Render(v *config.Validated, paths Paths, etcdDataPresent bool) Config {
	role := DecideRole(v)
	out := Config{Role: role, Subcommand: "server"}
	if role == RoleAgent {
		out.Subcommand = "agent"
	}
	join := v.JoinIP.String()
	main := &yamlDoc{}
	redactedMain := &yamlDoc{}
	header := fmt.Sprintf("# Written by sitecon agent for %s (%s). sitecon rewrites this file: change the cluster config instead.", v.NodeName, roleDescription(role, !etcdDataPresent))
	main.comment(header)
	redactedMain.comment(header)
	if role == RoleSeed && !etcdDataPresent {
		out.FirstBoot = true
		for _, d := range []*yamlDoc{main, redactedMain} {
			d.scalar("cluster-init", "true")
			d.list("tls-san", []string{join})
		}
	} else {
		server := "https://" + join + ":6443"
		main.scalar("server", strconv.Quote(server))
		redactedMain.scalar("server", strconv.Quote(server))
		if role != RoleAgent {
			main.list("tls-san", []string{join})
			redactedMain.list("tls-san", []string{join})
		}
	}
	if role != RoleAgent {
		// Any server's controller-manager may hold the lead: each runs
		// with the timings a node's loss is failed over in.
		for _, d := range []*yamlDoc{main, redactedMain} {
			d.comment("# How soon a lost node's apps run elsewhere, and why a blink of the link moves nothing: sitecon's docs/APPS.md, \"Failover budget\".")
			d.list("kube-controller-manager-arg", controllerManagerArgs())
		}
	}
	main.scalar("token", strconv.Quote(v.Token.Reveal()))
	redactedMain.scalar("token", strconv.Quote(fmt.Sprintf("[redacted: %d bytes from %s]", len(v.Token.Reveal()), tokenSource(v))))

	node := &yamlDoc{}
	node.comment(fmt.Sprintf("# Written by sitecon agent: %s's identity on the cluster network.", v.NodeName))
	node.scalar("node-name", strconv.Quote(v.NodeName))
	node.scalar("node-ip", strconv.Quote(v.NodeIP.String()))
	node.scalar("flannel-iface", strconv.Quote(v.ClusterInterface))
	node.list("node-label", v.NodeLabels())

	out.Files = []RenderedFile{
		{Path: paths.ConfigFile, Content: main.bytes(), Redacted: redactedMain.bytes()},
		{Path: filepath.Join(paths.DropInDir(), nodeDropIn), Content: node.bytes(), Redacted: node.bytes()},
	}
	out.Args = []string{out.Subcommand}
	if paths.ConfigFile != DefaultPaths.ConfigFile {
		out.Args = append(out.Args, "--config", paths.ConfigFile)
	}
	if paths.DataDir != DefaultPaths.DataDir {
		out.Args = append(out.Args, "--data-dir", paths.DataDir)
	}
	return out
}

func tokenSource(v *config.Validated) string {
	if v.TokenFile != "" {
		return v.TokenFile
	}
	return "encrypted_cluster_token"
}

func roleDescription(r Role, firstBoot bool) string {
	switch {
	case r == RoleSeed && firstBoot:
		return "seed server, first boot: initialises the cluster"
	case r == RoleSeed:
		return "seed server, restart: rejoins its etcd peers"
	case r == RoleServer:
		return "server joining the seed"
	default:
		return "worker (k3s agent)"
	}
}

// yamlDoc writes the flat YAML k3s reads: scalars and lists of strings.
type yamlDoc struct{ buf bytes.Buffer }

func (d *yamlDoc) comment(c string) { d.buf.WriteString(c + "\n") }

func (d *yamlDoc) scalar(key, value string) { fmt.Fprintf(&d.buf, "%s: %s\n", key, value) }

func (d *yamlDoc) list(key string, values []string) {
	fmt.Fprintf(&d.buf, "%s:\n", key)
	for _, v := range values {
		fmt.Fprintf(&d.buf, "  - %s\n", strconv.Quote(v))
	}
}

func (d *yamlDoc) bytes() []byte { return bytes.Clone(d.buf.Bytes()) }

// CommandLine is the k3s command as a technician would type it.
func (c Config) CommandLine(k3sBin string) string {
	return strings.Join(append([]string{k3sBin}, c.Args...), " ")
}

// Write writes every file atomically with mode 0600 (it holds the token).
func (c Config) Write() error {
	for _, f := range c.Files {
		if err := config.WriteFileAtomic(f.Path, f.Content, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// PrintPlan writes what the agent would do for this node: its role, each
// config file (token redacted) and the k3s command line.
func (c Config) PrintPlan(w io.Writer, v *config.Validated, k3sBin string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s in cluster %s (%s): %s\n", v.NodeName, v.ClusterName, v.ClusterID, roleDescription(c.Role, c.FirstBoot || c.Role != RoleSeed))
	fmt.Fprintf(&b, "# cluster address %s on %s, seed %s\n", v.Prefix, v.ClusterInterface, v.JoinIP)
	for _, f := range c.Files {
		fmt.Fprintf(&b, "\n# --- %s (mode 0600)\n%s", f.Path, f.Redacted)
	}
	fmt.Fprintf(&b, "\n# --- command\n%s\n", c.CommandLine(k3sBin))
	_, err := io.WriteString(w, b.String())
	return err
}

// Rooted returns the same configuration with every file moved under root,
// for writing a node's files somewhere to inspect them.
func (c Config) Rooted(root string) Config {
	out := c
	out.Files = make([]RenderedFile, len(c.Files))
	for i, f := range c.Files {
		f.Path = filepath.Join(root, f.Path)
		out.Files[i] = f
	}
	return out
}
