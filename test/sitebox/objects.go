package sitebox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// LonghornVolume is a Volume as Longhorn's mutating webhook leaves it: the
// real CRD's schema rejects the empty enums a bare typed object carries, and
// sitebox runs no webhook.
func LonghornVolume(name string, sizeBytes int64, replicas int) *lhv1beta2.Volume {
	return &lhv1beta2.Volume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.LonghornNamespace},
		Spec: lhv1beta2.VolumeSpec{
			Size:                        sizeBytes,
			NumberOfReplicas:            replicas,
			Frontend:                    lhv1beta2.VolumeFrontendBlockDev,
			DataEngine:                  lhv1beta2.DataEngineTypeV1,
			AccessMode:                  lhv1beta2.AccessModeReadWriteOnce,
			DataLocality:                lhv1beta2.DataLocalityDisabled,
			ReplicaAutoBalance:          lhv1beta2.ReplicaAutoBalanceIgnored,
			ReplicaSoftAntiAffinity:     lhv1beta2.ReplicaSoftAntiAffinityDefault,
			ReplicaZoneSoftAntiAffinity: lhv1beta2.ReplicaZoneSoftAntiAffinityDefault,
			ReplicaDiskSoftAntiAffinity: lhv1beta2.ReplicaDiskSoftAntiAffinityDefault,
			UnmapMarkSnapChainRemoved:   lhv1beta2.UnmapMarkSnapChainRemovedIgnored,
			SnapshotDataIntegrity:       lhv1beta2.SnapshotDataIntegrityIgnored,
			RestoreVolumeRecurringJob:   lhv1beta2.RestoreVolumeRecurringJobDefault,
			FreezeFilesystemForSnapshot: lhv1beta2.FreezeFilesystemForSnapshotDefault,
			OfflineRebuilding:           lhv1beta2.VolumeOfflineRebuildingIgnored,
			BackupCompressionMethod:     lhv1beta2.BackupCompressionMethodLz4,
			BackupBlockSize:             2 << 20,
		},
	}
}

// DemoApp is one app of the demo site.
type DemoApp struct {
	Name, UUID, Kind, Node string
	Pinned, VNC            bool
	// HostPorts are host Ethernet ports passed through to it (pinned).
	HostPorts []string
}

// DemoApps are the demo site's apps: two VMs and three containers, two
// pinned, one of those with a host Ethernet port passed through.
var DemoApps = []DemoApp{
	{Name: "hmi", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d01", Kind: apps.KindVM, Node: "node-a", VNC: true},
	{Name: "historian", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d02", Kind: apps.KindVM, Node: "node-b", Pinned: true},
	{Name: "plc-gateway", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d03", Kind: apps.KindContainer, Node: "node-b"},
	{Name: "mqtt-broker", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d04", Kind: apps.KindContainer, Node: "node-c"},
	{Name: "plc-io", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d05", Kind: apps.KindContainer, Node: "node-c", Pinned: true, HostPorts: []string{"eth1"}},
}

// WriteDemoApps writes the demo site's app and volume configs under dir, as
// a controller would hand them to every node's agent: each app has a
// three-replica volume and is designated to its node by UUID.
func WriteDemoApps(dir string) error {
	for i, app := range DemoApps {
		vol := apps.VolumeConfig{
			UUID: fmt.Sprintf("9a7e0000-0000-4000-8000-%012d", i+1), Name: app.Name + "-data",
			DesignatedNodeID: NodeUUID(app.Node), Size: fmt.Sprintf("%dGi", 10*(i+1)), ReplicaCount: 3,
		}
		cfg := apps.AppConfig{
			UUID: app.UUID, DisplayName: app.Name, Activate: true, Kind: app.Kind,
			Image: "registry.local/" + app.Name + ":1.0", DesignatedNodeID: NodeUUID(app.Node),
			Affinity: apps.AffinityPreferred, VolumeRefs: []string{vol.UUID},
			Resources: apps.AppResources{CPU: "250m", Memory: "256Mi"},
		}
		if app.Pinned {
			cfg.Affinity = apps.AffinityRequired
		}
		cfg.EnableVNC = app.VNC
		for _, port := range app.HostPorts {
			cfg.Adapters = append(cfg.Adapters, apps.IoAdapter{Type: apps.IoNetEth, Name: port})
		}
		for path, v := range map[string]any{
			filepath.Join(dir, "volumes", vol.Name+".json"): vol,
			filepath.Join(dir, "apps", app.Name+".json"):    cfg,
		} {
			data, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return err
			}
			if err := config.WriteFileAtomic(path, append(data, '\n'), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// AgentTimings are the failover timings a site's agents run with: how long
// an auto app tolerates a lost node (--move-after) and how long the
// failover guard times its pod there (--failover-timeout).
type AgentTimings struct {
	MoveAfter, FailoverTimeout time.Duration
}

// ShippedAgentTimings are the agent's own defaults, as a device runs it.
var ShippedAgentTimings = AgentTimings{MoveAfter: apps.DefaultMoveAfter, FailoverTimeout: apps.DefaultFailoverTimeout}

// QuickAgentTimings are a test's: apps move after moveAfter, and the guard
// times twice that (the agents' fence bound follows from it,
// apps.DeriveFenceTimings).
func QuickAgentTimings(moveAfter time.Duration) AgentTimings {
	return AgentTimings{MoveAfter: moveAfter, FailoverTimeout: 2 * moveAfter}
}

// StartAgents runs one sitecon agent per node (--no-bootstrap) as site
// processes, so `sitebox down` stops them: servers' with the admin
// kubeconfig, workers' with their node's own identity (NodeKubeconfig);
// etcd's member list published from each server's own member, apps from
// appsDir, sockets
// DIR/run/agent-NODE.sock, state under DIR/state/NODE, metrics on
// the node's own address (Node.MetricsAddr), /status and the proof of life on the node's
// address (StatusAddr), with the failover timings given.
//
// On a bootstrap-mode site (Options.Bootstrap) each agent bootstraps for
// real instead, in its node's namespace (bootmode.go).
func (s *Site) StartAgents(sitecon, appsDir string, timings AgentTimings) error {
	// Site processes run in the site directory: every path must be absolute.
	var err error
	if sitecon, err = filepath.Abs(sitecon); err != nil {
		return err
	}
	if appsDir, err = filepath.Abs(appsDir); err != nil {
		return err
	}
	if s.Bootstrap {
		return s.startBootAgents(sitecon, appsDir, timings)
	}
	dir, err := filepath.Abs(s.Dir)
	if err != nil {
		return err
	}
	for _, n := range s.Nodes {
		// As on a device: a server's agent holds the admin kubeconfig and
		// reads etcd's member list from its node's own member (plain http
		// here); a worker's has only its node's own identity.
		etcdEndpoint := ""
		kubeconfig := s.NodeKubeconfig(n.Name)
		if m, ok := s.EtcdMemberOf(n.Name); ok {
			etcdEndpoint = m.ClientURL()
			kubeconfig = filepath.Join(dir, "kubeconfig")
		}
		// Each agent answers /status and its proof of life on its
		// node's address, and checks the others' with the site's token.
		statusAddr := net.JoinHostPort(n.IP, strconv.Itoa(config.StatusPort))
		var appLogs []string
		if s.AgentAppLogsDir != "" {
			appLogs = []string{"--app-logs-dir", filepath.Join(s.AgentAppLogsDir, n.Name)}
		}
		err := s.StartProcess("agent-"+n.Name, sitecon, append([]string{"agent", "--no-bootstrap", "--etcd-endpoint=" + etcdEndpoint,
			"--cluster-id", s.ClusterID, "--cluster-token-file", s.ClusterTokenFile(), "--status-addr", statusAddr,
			"--node-name", n.Name, "--kubeconfig", kubeconfig,
			// The VM consoles on the node's own address, as on 127.0.0.1
			// of a device: the simulated nodes share this machine's.
			"--vnc-address", n.IP, "--node-kubeconfig", s.NodeKubeconfig(n.Name), "--node-client-ca", s.NodeClientCA(n.Name),
			"--apps-dir", appsDir, "--state-dir", filepath.Join(dir, "state", n.Name),
			"--socket", filepath.Join(dir, "run", "agent-"+n.Name+".sock"), "--metrics-addr", n.MetricsAddr(),
			"--move-after", timings.MoveAfter.String(), "--failover-timeout", timings.FailoverTimeout.String(),
			// The fence is on, as on a device: the leader lets a lost
			// node's pods go only when that node fences (kwok's pods
			// run no process here, so it stops nothing).
			"--log-file", filepath.Join(dir, "logs", "agent-"+n.Name+".log")}, appLogs...)...)
		if err != nil {
			return err
		}
	}
	return nil
}

// StopAgents stops the agents StartAgents started; a later Recover does not
// start them again. On a bootstrap-mode site each agent stops its k3s, and
// with it the node's etcd member: the site loses its quorum.
func (s *Site) StopAgents() error {
	var errs []error
	for _, n := range s.Nodes {
		errs = append(errs, s.stop(agentProcess(n.Name)))
		if err := os.Remove(s.cmdFile(agentProcess(n.Name))); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// AgentSocket is the local API socket of a node's agent started by StartAgents.
func (s *Site) AgentSocket(node string) string {
	return filepath.Join(s.Dir, "run", "agent-"+node+".sock")
}
