package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/test/syncbuf"
	"golang.org/x/sys/unix"
)

// The records' file names as agents before the state directory kept them
// beside the config: fixed by those releases, whatever the records are
// called now.
const (
	seedRecordName    = "seed.json"
	formedMarkerName  = "formed.json"
	leaveRequestName  = "leave.json"
	removedMarkerName = "removed.json"
)

// errNoHostNetwork is what these tests' agents get for any work on the
// host's network: the bring-up gets that far, and no farther.
var errNoHostNetwork = errors.New("no host network in this test")

// runRecordsAgent runs a device's agent on the config at configPath, its
// records in stateDir, until the test ends or stop is called: its host
// network refuses everything, so a bring-up that is not held stops at the
// cluster address.
func runRecordsAgent(t *testing.T, configPath, stateDir string, log *syncbuf.Buffer) (a *Agent, stop func()) {
	t.Helper()
	a = New(Options{ConfigPath: configPath, StateDir: stateDir, Env: agenttest.Env(agenttest.GoodToken),
		InNetNS:            func(func() error) error { return errNoHostNetwork },
		ConfigPollInterval: 20 * time.Millisecond, SeedBackoffMin: 20 * time.Millisecond, SeedBackoffMax: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(log, nil))})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// waitAgent waits until the agent's state satisfies cond.
func waitAgent(t *testing.T, a *Agent, log *syncbuf.Buffer, what string, cond func(State) bool) State {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := a.State()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s; state %+v\nlog:\n%s", what, st, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reachedAddress waits until the agent's bring-up has gone past every
// record and reached the cluster address.
func reachedAddress(t *testing.T, a *Agent, log *syncbuf.Buffer) {
	t.Helper()
	waitAgent(t, a, log, "the bring-up reaches the cluster address", func(st State) bool {
		return st.Phase == PhaseError && strings.Contains(st.LastError, errNoHostNetwork.Error())
	})
}

// A cluster config whose file name is one of the agent's records is a
// config, never read as the record: not as a seed record (`json: unknown
// field "cluster_name"`; the seed follower would have written over it),
// a leave request (held for ever), a removed marker (held for ever) or a
// formed marker (initialising refused); nor taken into the state
// directory by the upgrade.
func TestConfigNamedLikeARecordIsNotReadAsOne(t *testing.T) {
	for _, name := range []string{"seed.json", "leave.json", "removed.json", "formed.json"} {
		t.Run(name, func(t *testing.T) {
			configPath := filepath.Join(t.TempDir(), name)
			agenttest.WriteConfig(t, configPath)
			before, err := os.ReadFile(configPath)
			if err != nil {
				t.Fatal(err)
			}
			records := formation.Records{Dir: filepath.Join(t.TempDir(), "state")}
			var log syncbuf.Buffer
			a, stop := runRecordsAgent(t, configPath, records.Dir, &log)
			reachedAddress(t, a, &log)
			stop()
			if st := a.State(); st.ConfigNote != "" {
				t.Errorf("config note %q, want none", st.ConfigNote)
			}
			if strings.Contains(log.String(), "unknown field") {
				t.Errorf("the config was read as a record:\n%s", log.String())
			}
			if after, err := os.ReadFile(configPath); err != nil || !bytes.Equal(after, before) {
				t.Errorf("the config after the run: %v\n%s", err, after)
			}
			if _, err := os.Stat(filepath.Join(records.Dir, name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s in the state directory: %v, want none (the config is not a record)", name, err)
			}
			if member, why := formation.HasBeenMember(agenttest.Validated(t, nil), false, records.FormedMarkerFile()); member || strings.Contains(why, "unreadable") {
				t.Errorf("formed marker: member %v (%s), want never joined", member, why)
			}
		})
	}
}

// Whoever can write the config's directory cannot speak for the agent: a
// leave request, a removed or formed marker or a seed record planted beside
// the config after the upgrade is not acted on, nor moved; the same leave
// request in the state directory is.
func TestRecordsPlantedBesideTheConfigAreIgnored(t *testing.T) {
	dir := t.TempDir()
	configPath := filepath.Join(dir, "cluster.json")
	agenttest.WriteConfig(t, configPath)
	records := formation.Records{Dir: filepath.Join(t.TempDir(), "state")}
	var log syncbuf.Buffer
	a, stop := runRecordsAgent(t, configPath, records.Dir, &log)
	reachedAddress(t, a, &log)
	stop()

	v := agenttest.Validated(t, nil)
	leave := formation.LeaveRequest{ClusterID: v.ClusterID, NodeName: v.NodeName, By: "intruder", At: time.Now()}
	if err := formation.WriteLeaveRequest(filepath.Join(dir, leaveRequestName), leave); err != nil {
		t.Fatal(err)
	}
	if err := formation.MarkRemoved(filepath.Join(dir, removedMarkerName), formation.RemovedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, Evidence: "forged"}); err != nil {
		t.Fatal(err)
	}
	if err := formation.MarkFormed(filepath.Join(dir, formedMarkerName), formation.FormedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, How: "forged", Joined: true}); err != nil {
		t.Fatal(err)
	}
	if err := formation.WriteSeedRecord(filepath.Join(dir, seedRecordName), formation.SeedRecord{ClusterID: v.ClusterID, ConfigJoinIP: v.JoinIP.String(), JoinServerIP: "10.244.244.9"}); err != nil {
		t.Fatal(err)
	}
	a, stop = runRecordsAgent(t, configPath, records.Dir, &log)
	reachedAddress(t, a, &log)
	stop()
	if st := a.State(); st.ConfigNote != "" || st.SeedAddress != "" {
		t.Errorf("planted records acted on: %+v", st)
	}
	for _, name := range []string{leaveRequestName, removedMarkerName, formedMarkerName, seedRecordName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the planted %s: %v, want it left where it was", name, err)
		}
		if _, err := os.Stat(filepath.Join(records.Dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in the state directory: %v, want none", name, err)
		}
	}
	if member, why := formation.HasBeenMember(v, false, records.FormedMarkerFile()); member {
		t.Errorf("the planted formed marker counts: %s", why)
	}

	// The same request where `sitecon agent leave` writes it is acted on.
	if err := formation.WriteLeaveRequest(records.LeaveRequestFile(), leave); err != nil {
		t.Fatal(err)
	}
	a, _ = runRecordsAgent(t, configPath, records.Dir, &log)
	waitAgent(t, a, &log, "the agent leaves on the request in its state directory", func(st State) bool {
		return strings.Contains(st.ConfigNote, "left the cluster on request") && strings.Contains(st.ConfigNote, records.LeaveRequestFile())
	})
}

// An agent upgraded from one that kept its records beside the config moves
// them into its state directory, once, and acts on them as before: a device
// upgraded after a power cut still knows it was a member, a removed one
// still holds, one that left stays out.
func TestUpgradeMovesTheRecordsFromBesideTheConfig(t *testing.T) {
	v := agenttest.Validated(t, nil)
	member := formation.FormedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, How: "joined the cluster", Joined: true, At: time.Now().UTC()}
	cases := []struct {
		name  string
		write map[string]any
		// held: what the agent's state says after the upgrade.
		held func(State) bool
	}{
		{name: "power cut: a member", write: map[string]any{formedMarkerName: member,
			seedRecordName: formation.SeedRecord{ClusterID: v.ClusterID, ConfigJoinIP: v.JoinIP.String(), JoinServerIP: "10.244.244.3"}},
			held: func(st State) bool {
				return st.SeedAddress == "10.244.244.3" && strings.Contains(st.LastError, errNoHostNetwork.Error())
			}},
		{name: "removed", write: map[string]any{formedMarkerName: member,
			removedMarkerName: formation.RemovedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, Evidence: "its Node was deleted"}},
			held: func(st State) bool { return strings.Contains(st.LastError, formation.ErrRemoved.Error()) }},
		{name: "left", write: map[string]any{leaveRequestName: formation.LeaveRequest{ClusterID: v.ClusterID, NodeName: v.NodeName, By: "tech", At: time.Now().UTC()}},
			held: func(st State) bool { return strings.Contains(st.ConfigNote, "left the cluster on request") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			configPath := filepath.Join(dir, "cluster.json")
			agenttest.WriteConfig(t, configPath)
			written := map[string][]byte{}
			for name, rec := range tc.write {
				data, err := json.MarshalIndent(rec, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
				written[name] = data
			}
			records := formation.Records{Dir: filepath.Join(t.TempDir(), "state")}
			var log syncbuf.Buffer
			a, stop := runRecordsAgent(t, configPath, records.Dir, &log)
			waitAgent(t, a, &log, "the agent acts on the moved records", tc.held)
			stop()
			for name, data := range written {
				if orig, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(orig, data) {
					t.Errorf("%s beside the config: %v, want the original left for the previous release", name, err)
				}
				got, err := os.ReadFile(filepath.Join(records.Dir, name))
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s in the state directory: %v\n%s", name, err, got)
				}
				if st, err := os.Stat(filepath.Join(records.Dir, name)); err == nil && st.Mode().Perm() != 0o600 {
					t.Errorf("%s mode %v, want 0600", name, st.Mode().Perm())
				}
				if !strings.Contains(log.String(), filepath.Join(dir, name)) {
					t.Errorf("the move of %s is not in the log:\n%s", name, log.String())
				}
			}
			if _, ok := tc.write[formedMarkerName]; ok {
				if ok, why := formation.HasBeenMember(v, false, records.FormedMarkerFile()); !ok {
					t.Errorf("after the upgrade: not a member (%s)", why)
				}
			}
		})
	}
}

// A state directory others may write is no place for records: the agent
// holds before reading any (nothing is brought up) and says why; made the
// agent's alone, it goes on.
func TestAgentHoldsOnAStateDirectoryOthersMayWrite(t *testing.T) {
	dir := t.TempDir()
	configPath := filepath.Join(dir, "cluster.json")
	agenttest.WriteConfig(t, configPath)
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	a, _ := runRecordsAgent(t, configPath, state, &log)
	st := waitAgent(t, a, &log, "holds on the state directory", func(st State) bool {
		return st.Phase == PhaseError && strings.Contains(st.LastError, "may be written by others")
	})
	if st.Node != "" || st.ConfigError != "" {
		t.Errorf("the config was loaded while the records were unusable: %+v", st)
	}
	// Made the agent's alone, the hold clears and the bring-up goes on.
	if err := os.Chmod(state, 0o700); err != nil {
		t.Fatal(err)
	}
	reachedAddress(t, a, &log)
	if st := a.State(); strings.Contains(st.LastError, "state directory") {
		t.Errorf("the hold is still reported: %+v", st)
	}
}

// A state directory in memory (tmpfs, ramfs: an old --state-dir /run/...
// that held status files only) would lose the removed and formed markers
// and the leave request at the next reboot: refused, nothing made there;
// the agent holds and says why.
func TestRecordsPrepareRefusesAStateDirectoryInMemory(t *testing.T) {
	for _, fstype := range []string{"tmpfs", "ramfs"} {
		t.Run(fstype, func(t *testing.T) {
			mnt := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(mnt, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount(fstype, mnt, fstype, 0, ""); err != nil {
				t.Skipf("cannot mount a %s (not root?): %v", fstype, err)
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			configPath := filepath.Join(t.TempDir(), "cluster.json")
			for _, r := range []formation.Records{{Dir: mnt}, {Dir: filepath.Join(mnt, "sitecon")}} {
				err := r.Prepare(configPath)
				if err == nil || !strings.Contains(err.Error(), "in memory") || !strings.Contains(err.Error(), "reboot") {
					t.Errorf("state directory %s on %s: %v, want refused", r.Dir, fstype, err)
				}
			}
			if _, err := os.Stat(filepath.Join(mnt, "sitecon")); !os.IsNotExist(err) {
				t.Errorf("the refused state directory was made: %v", err)
			}
			var log syncbuf.Buffer
			agenttest.WriteConfig(t, configPath)
			a, _ := runRecordsAgent(t, configPath, mnt, &log)
			waitAgent(t, a, &log, "holds on a state directory in memory", func(st State) bool {
				return st.Phase == PhaseError && strings.Contains(st.LastError, "in memory") && st.Node == ""
			})
		})
	}
}
