package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
)

// The agent's config file, as a device's boot and a technician's editor treat
// it: a config naming an interface that EVE has not created yet is retried
// until the interface exists (no file change needed); the file absent for a
// few seconds (an editor's rename-save, a remount) or unreadable for any
// other reason leaves k3s, the address and the firewall alone; only absence
// for the whole grace period takes the node out.
func TestBootstrapConfigFileHolds(t *testing.T) {
	netns.Skip(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	standin := buildStandin(t)
	host := netns.NewLAN(t, "a")[0]
	const lateIface = "late0"
	plan, err := formation.Plan(formation.FormRequest{
		ClusterName: "site1", Interface: lateIface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	const grace = 4 * time.Second
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// No API server (a kubeconfig that is not there): this test is about
	// the node's own bring-up.
	noKubeconfig := filepath.Join(t.TempDir(), "no-kubeconfig")
	n := startNodeAgent(t, ctx, &wg, noKubeconfig, standin, host, plan.Nodes[0], nil, func(o *agent.Options) {
		o.SocketPath = ""
		o.ConfigAbsentGrace = grace
		o.LeaderDurations = apps.LeaderDurations{}
	})
	configPath := n.config

	// The interface does not exist yet: the config is rejected, and k3s
	// does not start.
	waitState(t, n, 10*time.Second, "config rejected for the missing interface", func(st agent.State) bool {
		return st.Phase == agent.PhaseError && strings.Contains(st.ConfigError, lateIface)
	})
	// A veth pair (this kernel has no dummy driver), as EVE makes a port.
	if out, err := host.Exec("ip", "link", "add", lateIface, "type", "veth", "peer", "name", lateIface+"p"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, name := range []string{lateIface, lateIface + "p"} {
		if out, err := host.Exec("ip", "link", "set", name, "up"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	// EVE created the port: the agent gets there by itself.
	waitState(t, n, 15*time.Second, "brought up once the interface exists", func(st agent.State) bool {
		return st.ClusterIPReady && st.K3sStarts == 1 && st.ConfigError == ""
	})
	n.waitK3sStarted(t) // untouched, below, wants it once
	clusterPrefix := netip.MustParsePrefix(plan.Nodes[0].ClusterIPPrefix)
	untouched := func(what string) {
		t.Helper()
		st := n.agent.State()
		if st.Phase == agent.PhaseLeft || !st.ClusterIPReady || st.K3sStarts != 1 || len(n.starts(t)) != 1 {
			t.Fatalf("%s disturbed the node: phase %s, address ready %v, k3s starts %d (stand-in saw %d)",
				what, st.Phase, st.ClusterIPReady, st.K3sStarts, len(n.starts(t)))
		}
		var have []netip.Prefix
		if err := host.Do(func() (err error) { have, err = netcfg.InterfacePrefixes(lateIface); return err }); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(have, clusterPrefix) {
			t.Fatalf("%s took the cluster address off: %v", what, have)
		}
		if out, err := host.Exec("nft", "list", "table", "inet", netcfg.TableName); err != nil {
			t.Fatalf("%s took the firewall table away: %v %s", what, err, out)
		}
	}
	untouched("bring-up")

	// An editor's rename-save: the file is away for a moment, then back.
	away := configPath + ".away"
	if err := os.Rename(configPath, away); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, n, 5*time.Second, "says the config is missing", func(st agent.State) bool {
		return strings.Contains(st.ConfigNote, "config missing for") || st.Phase == agent.PhaseLeft
	})
	if !strings.Contains(st.ConfigNote, "leaving in") {
		t.Errorf("the state does not say when the node would leave: %q", st.ConfigNote)
	}
	untouched("a config absent for a moment")
	if err := os.Rename(away, configPath); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 5*time.Second, "config back", func(st agent.State) bool { return st.ConfigNote == "" })
	untouched("a config absent for a moment")

	// A stat that fails for another reason (here a symlink loop, ELOOP) is
	// unknown: held past the grace period, never taken for absence.
	if err := os.Rename(configPath, away); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(configPath), configPath); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 5*time.Second, "says the config cannot be read", func(st agent.State) bool {
		return strings.Contains(st.ConfigNote, "cannot be read")
	})
	// Longer than the grace period: a node that took this for absence
	// would have left by now.
	holds(t, grace+2*time.Second, "an unreadable config leaves the node in the cluster", func() error {
		if st := n.agent.State(); st.Phase == agent.PhaseLeft {
			return fmt.Errorf("the node left: %q", st.ConfigNote)
		}
		return nil
	})
	untouched("an unreadable config")
	if err := os.Remove(configPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, configPath); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 5*time.Second, "config readable again", func(st agent.State) bool { return st.ConfigNote == "" })
	untouched("an unreadable config")

	// A leave request planted beside the config (whoever can write the
	// config's directory) is not the agent's: nothing happens. The agent's
	// note about another cluster's request, put in its state directory at
	// the same time, shows it polled since.
	records := deviceRecords(configPath)
	forged := formation.LeaveRequest{ClusterID: plan.ClusterID, NodeName: plan.Nodes[0].NodeName, At: time.Now(), By: "intruder"}
	if err := formation.WriteLeaveRequest(filepath.Join(filepath.Dir(configPath), "leave.json"), forged); err != nil {
		t.Fatal(err)
	}
	if err := formation.WriteLeaveRequest(records.LeaveRequestFile(), formation.LeaveRequest{ClusterID: "2b1c3d4e-5f60-4a7f-8e9a-55aa7f3e2a10",
		NodeName: plan.Nodes[0].NodeName, At: time.Now(), By: "another cluster's technician"}); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 5*time.Second, "another cluster's request noted", func(st agent.State) bool {
		return strings.Contains(st.ConfigNote, "a leave request is ignored")
	})
	untouched("a leave request beside the config")
	if err := os.Remove(records.LeaveRequestFile()); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 5*time.Second, "the note gone", func(st agent.State) bool { return st.ConfigNote == "" })
	untouched("a leave request beside the config")

	// A leave request (sitecon agent leave) takes the node out at once,
	// the config still there; removed, the node comes back from its config.
	request := records.LeaveRequestFile()
	if err := formation.WriteLeaveRequest(request, formation.LeaveRequest{ClusterID: plan.ClusterID, NodeName: plan.Nodes[0].NodeName, At: time.Now(), By: "e2e"}); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, n, 10*time.Second, "left on request", func(st agent.State) bool { return st.Phase == agent.PhaseLeft && !st.ClusterIPReady })
	if !strings.Contains(st.ConfigNote, "left the cluster on request") || !strings.Contains(st.ConfigNote, request) {
		t.Errorf("the state does not say the node left on request, nor how to come back: %q", st.ConfigNote)
	}
	var have []netip.Prefix
	if err := host.Do(func() (err error) { have, err = netcfg.InterfacePrefixes(lateIface); return err }); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(have, clusterPrefix) {
		t.Errorf("after leaving on request, the cluster address is still there: %v", have)
	}
	if err := os.Remove(request); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 15*time.Second, "back once the request is removed", func(st agent.State) bool {
		return st.Phase != agent.PhaseLeft && st.ClusterIPReady && st.ConfigNote == ""
	})

	// Absent for the whole grace period: the node leaves.
	if err := os.Remove(configPath); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, grace+10*time.Second, "left", func(st agent.State) bool { return st.Phase == agent.PhaseLeft && !st.ClusterIPReady })
	if err := host.Do(func() (err error) { have, err = netcfg.InterfacePrefixes(lateIface); return err }); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(have, clusterPrefix) {
		t.Errorf("after leaving, the cluster address is still there: %v", have)
	}
}
