package sitebox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/test/sitebox/clockstep"
)

// The faults a fault explorer (and a person, through sitebox's commands)
// stages on a bootstrap-mode site, beside power (PowerOff, PowerOn) and an
// agent's crash (KillAgent, RestartAgent):
//
//   - Cut: groups of nodes each cut off from every node outside it and from
//     the API server, still reaching each other. Inside the group's
//     namespaces a firewall table drops the LAN traffic to and from the
//     rest and the node's own API and etcd ports (the k3s stand-in's relay
//     to the site's API server and etcd); outside them the node's kubelet
//     (kwok), its runtime simulator and its etcd member, which run on the
//     machine's side, are frozen (SIGSTOP): its heartbeats stop, its member
//     falls silent for the others, its containers run on.
//   - Drop: one-way loss, packets from one node to another dropped at the
//     receiver, the reverse direction untouched.
//   - Pause: a node's agent, kubelet or whole host frozen (SIGSTOP) while
//     its addresses still accept connections, as a device thrashing under
//     memory or I/O pressure; Resume lets it go on.
//   - FillDisk: a node's agent state disk full (Options.StateDisks), as a
//     full /persist: every write there fails with ENOSPC.
//   - StepClock: a node's clock stepped ahead or back, as a device whose
//     real-time clock lost its time or that an NTP server corrects; its
//     agent and k3s read the step (clockstep), the machine's other programs
//     do not. The step outlives a power cycle, as a wrong clock does.
//   - Heal: every cut, drop, pause and full disk undone, every clock set
//     right (a step back to the true time, as NTP makes).
//
// What is staged is recorded in DIR/run/chaos.json, so that each command
// applies the whole of it: a heal of a cut leaves a pause in place, and
// a later command sees what an earlier one did.

// Faults is the staged state.
type Faults struct {
	// Cut are the cut-off groups; nodes in none stay with the API server.
	Cut [][]string `json:"cut,omitempty"`
	// Drops are one-way losses.
	Drops []OneWay `json:"drops,omitempty"`
	// Paused are the frozen parts of each node.
	Paused map[string][]PausePart `json:"paused,omitempty"`
	// FullDisks are the nodes whose state disk is full (disk.go).
	FullDisks []string `json:"fullDisks,omitempty"`
	// Clocks are the nodes' clock steps.
	Clocks map[string]time.Duration `json:"clocks,omitempty"`
}

// OneWay is packets from From to To lost.
type OneWay struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// PausePart is what of a node Pause freezes.
type PausePart string

const (
	PauseAgent   PausePart = "agent"
	PauseKubelet PausePart = "kubelet"
	PauseHost    PausePart = "host"
)

// ParsePausePart reads a part's name.
func ParsePausePart(s string) (PausePart, error) {
	switch p := PausePart(s); p {
	case PauseAgent, PauseKubelet, PauseHost:
		return p, nil
	}
	return "", fmt.Errorf("unknown part %q to pause: agent, kubelet or host", s)
}

func (s *Site) faultsFile() string { return filepath.Join(s.Dir, "run", "chaos.json") }

// StagedFaults reads what is staged; nothing staged is the zero value.
func (s *Site) StagedFaults() (Faults, error) {
	var f Faults
	data, err := os.ReadFile(s.faultsFile())
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("%s: %w", s.faultsFile(), err)
	}
	return f, nil
}

// cutGroup is the group node is cut off in, nil when it is not.
func (f Faults) cutGroup(node string) []string {
	for _, g := range f.Cut {
		if slices.Contains(g, node) {
			return g
		}
	}
	return nil
}

func (f Faults) paused(node string, part PausePart) bool {
	return slices.Contains(f.Paused[node], part)
}

// Staged says whether node has any fault staged on it.
func (f Faults) Staged(node string) bool {
	if f.cutGroup(node) != nil || len(f.Paused[node]) > 0 || slices.Contains(f.FullDisks, node) || f.Clocks[node] != 0 {
		return true
	}
	return slices.ContainsFunc(f.Drops, func(d OneWay) bool { return d.From == node || d.To == node })
}

// Cut cuts each group off from every node outside it and from the API
// server (see Faults). A node may be in one group only.
func (s *Site) Cut(groups ...[]string) error {
	return s.stage(func(f *Faults) error {
		for _, g := range groups {
			if len(g) == 0 {
				return errors.New("an empty group to cut off")
			}
			for _, n := range g {
				if f.cutGroup(n) != nil {
					return fmt.Errorf("node %s is already cut off: heal first, then cut it off again", n)
				}
			}
			// Appended one by one: a node in two of these groups is
			// found already cut off by the second.
			f.Cut = append(f.Cut, slices.Clone(g))
		}
		return nil
	})
}

// Drop loses every packet from one node to another, the reverse untouched.
func (s *Site) Drop(from, to string) error {
	return s.stage(func(f *Faults) error {
		if from == to {
			return errors.New("a node's packets to itself stay")
		}
		if !slices.Contains(f.Drops, OneWay{from, to}) {
			f.Drops = append(f.Drops, OneWay{from, to})
		}
		return nil
	})
}

// Pause freezes part of node (see Faults).
func (s *Site) Pause(node string, part PausePart) error {
	return s.stage(func(f *Faults) error {
		if f.Paused == nil {
			f.Paused = map[string][]PausePart{}
		}
		if !f.paused(node, part) {
			f.Paused[node] = append(f.Paused[node], part)
		}
		return nil
	})
}

// Resume lets a paused part of node go on.
func (s *Site) Resume(node string, part PausePart) error {
	return s.stage(func(f *Faults) error {
		f.Paused[node] = slices.DeleteFunc(f.Paused[node], func(p PausePart) bool { return p == part })
		if len(f.Paused[node]) == 0 {
			delete(f.Paused, node)
		}
		return nil
	})
}

// FillDisk fills node's agent state disk (see Faults).
func (s *Site) FillDisk(node string) error {
	if !s.StateDisks {
		return errors.New("the site's agents have no state disks of their own to fill (sitebox up --state-disks)")
	}
	return s.stage(func(f *Faults) error {
		if !slices.Contains(f.FullDisks, node) {
			f.FullDisks = append(f.FullDisks, node)
		}
		return nil
	})
}

// maxClockStep bounds a step: far enough for any skew sitecon judges
// (its reports refuse 5 minutes), near enough that certificates a day old
// stay valid.
const maxClockStep = time.Hour

// StepClock steps node's clock by d from the true time (0: set right).
// Refused when the node's agent was not built to read a step
// (clockstep): a fault that changes nothing is not staged.
func (s *Site) StepClock(node string, d time.Duration) error {
	if d > maxClockStep || d < -maxClockStep {
		return fmt.Errorf("a clock step of %s: at most %s either way", d, maxClockStep)
	}
	if _, err := s.node(node); err != nil {
		return err
	}
	cmd, err := os.ReadFile(s.cmdFile(agentProcess(node)))
	if err != nil {
		return fmt.Errorf("node %s's agent: %w", node, err)
	}
	if !strings.Contains(string(cmd), clockstep.EnvVar+"=") {
		return fmt.Errorf("node %s's agent does not read a clock step: start the site with sitecon and the k3s stand-in built with the clock overlay (go build -overlay \"$(sitebox clock-overlay DIR)\")", node)
	}
	return s.stage(func(f *Faults) error {
		if f.Clocks == nil {
			f.Clocks = map[string]time.Duration{}
		}
		f.Clocks[node] = d
		if d == 0 {
			delete(f.Clocks, node)
		}
		return nil
	})
}

// clockStepFile is where node's processes read their clock step.
func (s *Site) clockStepFile(node string) string { return filepath.Join(s.BootDir(node), "clock_step") }

// applyClock writes node's clock step, or removes it when none.
func (s *Site) applyClock(node string, f Faults) error {
	d := f.Clocks[node]
	if d == 0 {
		if err := os.Remove(s.clockStepFile(node)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return config.WriteFileAtomic(s.clockStepFile(node), []byte(d.String()+"\n"), 0o644)
}

// Heal undoes every cut, drop, pause and full disk, and sets every clock
// right.
func (s *Site) Heal() error {
	return s.stage(func(f *Faults) error { *f = Faults{}; return nil })
}

// stage changes the staged faults and applies the whole of them; on a
// change it refuses (a node unknown or off), nothing is recorded.
func (s *Site) stage(change func(*Faults) error) error {
	if !s.Bootstrap {
		return errors.New("faults are staged on a bootstrap-mode site (sitebox up --bootstrap): its nodes have namespaces of their own")
	}
	f, err := s.StagedFaults()
	if err != nil {
		return err
	}
	if err := change(&f); err != nil {
		return err
	}
	for _, n := range s.faultNodes(f) {
		if _, err := s.node(n); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := config.WriteFileAtomic(s.faultsFile(), data, 0o644); err != nil {
		return err
	}
	return s.applyFaults(f)
}

func (s *Site) faultNodes(f Faults) []string {
	nodes := slices.Concat(f.Cut...)
	for _, d := range f.Drops {
		nodes = append(nodes, d.From, d.To)
	}
	for n := range f.Paused {
		nodes = append(nodes, n)
	}
	for n := range f.Clocks {
		nodes = append(nodes, n)
	}
	return append(nodes, f.FullDisks...)
}

// applyFaults makes every node's firewall table, frozen processes, state
// disk and clock what f says; a node that is off has no firewall or processes
// (its namespace is gone): those are left as they are, its disk is not.
func (s *Site) applyFaults(f Faults) error {
	var errs []error
	for _, n := range s.Nodes {
		if s.StateDisks {
			if slices.Contains(f.FullDisks, n.Name) {
				errs = append(errs, s.fillDisk(n.Name))
			} else {
				errs = append(errs, s.emptyDisk(n.Name))
			}
		}
		// A node off keeps its wrong clock for its next boot.
		errs = append(errs, s.applyClock(n.Name, f))
		if !netnsExists(s.Netns(n.Name)) {
			continue
		}
		errs = append(errs, s.applyFirewall(n.Name, f), s.applyFrozen(n.Name, f))
	}
	return errors.Join(errs...)
}

const chaosTable = "sitebox_chaos"

// applyFirewall writes node's chaos table: its drops before any other
// table's rules (priority -300), established connections included, so a
// cut hangs what was open, as a pulled cable does.
func (s *Site) applyFirewall(node string, f Faults) error {
	var in, out []string
	if group := f.cutGroup(node); group != nil {
		for _, m := range s.Nodes {
			if !slices.Contains(group, m.Name) {
				in = append(in, "ip saddr "+m.IP+" drop")
				out = append(out, "ip daddr "+m.IP+" drop")
			}
		}
		// The node's own k3s: its API port and etcd, and the members'
		// client ports, relayed by the stand-in to the site's, which the
		// cut leaves on the other side.
		ports := []string{"6443", "2379"}
		for _, m := range s.Etcd {
			ports = append(ports, strconv.Itoa(m.ClientPort))
		}
		out = append(out, "ip daddr 127.0.0.1 tcp dport { "+strings.Join(ports, ", ")+" } drop")
	}
	for _, d := range f.Drops {
		if d.To != node {
			continue
		}
		from, err := s.node(d.From)
		if err != nil {
			return err
		}
		in = append(in, "ip saddr "+from.IP+" drop")
	}
	script := "table inet " + chaosTable + "\ndelete table inet " + chaosTable + "\n"
	if len(in)+len(out) > 0 {
		script += "table inet " + chaosTable + " {\n" +
			"  chain in { type filter hook input priority -300; policy accept;\n    " + strings.Join(append(in, ""), "\n    ") + "}\n" +
			"  chain out { type filter hook output priority -300; policy accept;\n    " + strings.Join(append(out, ""), "\n    ") + "}\n}\n"
	}
	cmd := exec.Command("ip", "netns", "exec", s.Netns(node), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s's firewall: nft: %v: %s", node, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// applyFrozen stops (SIGSTOP) what f freezes of node and lets the rest go
// on (SIGCONT; nothing to a process that runs).
func (s *Site) applyFrozen(node string, f Faults) error {
	cut := f.cutGroup(node) != nil
	host := f.paused(node, PauseHost)
	kubelet := cut || host || f.paused(node, PauseKubelet)
	parts := []struct {
		pid    int
		frozen bool
	}{
		{s.pid("kwok-" + node), kubelet},
		{s.pid(RuntimeProcess(node)), kubelet},
		{s.pid(kubeletFrontProcess(node)), host},
		{s.pid(etcdProcess(node)), cut || host},
		{s.pid(agentProcess(node)), host || f.paused(node, PauseAgent)},
		{s.k3sPID(node), host},
	}
	var errs []error
	for _, p := range parts {
		if p.pid == 0 {
			continue
		}
		sig := syscall.SIGCONT
		if p.frozen {
			sig = syscall.SIGSTOP
		}
		if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("%s: pid %d: %w", node, p.pid, err))
		}
	}
	// The containers stall only with the whole host.
	sig := syscall.SIGCONT
	if host {
		sig = syscall.SIGSTOP
	}
	errs = append(errs, s.signalRuntimeCopies(node, sig))
	return errors.Join(errs...)
}
