// Package chaos makes the fault explorer's schedules: from a seed, a
// sequence of faults (cuts, one-way loss, pauses, power, agent restarts,
// full disks, clock steps) and operator actions (drain, uncordon, migrate, return
// home, a device's drain request and its reboot, the maintenance walk,
// node remove, leave), with a hold after each,
// that replays exactly; and shrinks a failing schedule to the fewest
// steps that still fail. It knows nothing of a site: the e2e explorer
// (test/e2e/chaos_test.go) stages the steps with sitebox and checks the
// invariants from outside the product.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is what a step does.
type Kind string

const (
	// Cut cuts Nodes off, as one group, from the rest and the API server.
	Cut Kind = "cut"
	// Drop loses the packets from Nodes[0] to Nodes[1].
	Drop Kind = "drop"
	// Pause freezes Part of Nodes[0]; Resume lets it go on.
	Pause  Kind = "pause"
	Resume Kind = "resume"
	// PowerOff cuts the power of Nodes at once; PowerOn boots Nodes[0].
	PowerOff Kind = "power-off"
	PowerOn  Kind = "power-on"
	// RestartAgent kills Nodes[0]'s agent and starts it again (a crash),
	// cut off or not.
	RestartAgent Kind = "restart-agent"
	// FillDisk fills Nodes[0]'s agent state disk.
	FillDisk Kind = "fill-disk"
	// StepClock steps Nodes[0]'s clock by Clock from the true time.
	StepClock Kind = "clock-step"
	// Heal undoes every cut, drop, pause and full disk, and sets every
	// clock right.
	Heal Kind = "heal"

	// The operator's actions, through sitecon's own commands.
	Drain    Kind = "drain"
	Uncordon Kind = "uncordon"
	// Migrate moves App to Nodes[0].
	Migrate Kind = "migrate"
	// ReturnHome moves App back to its designated node.
	ReturnHome Kind = "return-home"
	// DrainRequest is a device's drain request to Nodes[0]'s agent (as
	// EVE's base OS update makes before its reboot), then, drained, the
	// reboot: power off and on. A request that fails is called off.
	DrainRequest Kind = "drain-request"
	// Maintenance walks Nodes[0] (none: every node, --all) through
	// sitecon maintenance, the node rebooted when the walk asks for it.
	Maintenance Kind = "maintenance"
	// Remove is sitecon node remove of Nodes[0] from another node, without
	// --force: a live node, or one whose going leaves the cluster unable to
	// take a failure (one of three servers), is refused.
	Remove Kind = "remove"
	// Leave is sitecon agent leave run on Nodes[0] itself, in its
	// namespace as on the device, without --force.
	Leave Kind = "leave"
)

// Action says whether the step is an operator's action (sitecon's), not a fault.
func (k Kind) Action() bool {
	return k == Drain || k == Uncordon || k == Migrate || k == ReturnHome || k == DrainRequest || k == Maintenance || k == Remove || k == Leave
}

// Step is one step of a schedule.
type Step struct {
	Kind  Kind     `json:"kind"`
	Nodes []string `json:"nodes,omitempty"`
	// Part is what Pause and Resume freeze: agent, kubelet or host.
	Part string `json:"part,omitempty"`
	// App is what Migrate moves.
	App string `json:"app,omitempty"`
	// Flags are added to the agent's command by RestartAgent (its fence
	// settings changed while its node is cut off: a longer
	// --failover-timeout, or --no-fence), for good.
	Flags []string `json:"flags,omitempty"`
	// Clock is StepClock's step.
	Clock time.Duration `json:"clock,omitempty"`
	// Hold is how long the schedule waits after the step.
	Hold time.Duration `json:"hold"`
}

func (s Step) String() string {
	var b strings.Builder
	b.WriteString(string(s.Kind))
	switch s.Kind {
	case Drop:
		fmt.Fprintf(&b, " %s → %s", s.Nodes[0], s.Nodes[1])
	case Pause, Resume:
		fmt.Fprintf(&b, " %s's %s", s.Nodes[0], s.Part)
	case Migrate:
		fmt.Fprintf(&b, " %s to %s", s.App, s.Nodes[0])
	case ReturnHome:
		fmt.Fprintf(&b, " %s", s.App)
	case StepClock:
		fmt.Fprintf(&b, " %s by %+ds", s.Nodes[0], int(s.Clock.Seconds()))
	case RestartAgent:
		b.WriteString(" " + s.Nodes[0])
		if len(s.Flags) > 0 {
			b.WriteString(" with " + strings.Join(s.Flags, " "))
		}
	case Maintenance:
		if len(s.Nodes) == 0 {
			b.WriteString(" --all")
		} else {
			b.WriteString(" " + s.Nodes[0])
		}
	default:
		if len(s.Nodes) > 0 {
			b.WriteString(" " + strings.Join(s.Nodes, " "))
		}
	}
	fmt.Fprintf(&b, ", then %s", s.Hold)
	return b.String()
}

// Schedule is a seed's steps.
type Schedule struct {
	Seed  uint64 `json:"seed"`
	Steps []Step `json:"steps"`
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule of seed %d (CHAOS_SEED=%d), %d steps, %s:\n", s.Seed, s.Seed, len(s.Steps), s.Length())
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, st)
	}
	return b.String()
}

// Length is the sum of the holds.
func (s Schedule) Length() time.Duration {
	var d time.Duration
	for _, st := range s.Steps {
		d += st.Hold
	}
	return d
}

// Without is the schedule without its i-th step.
func (s Schedule) Without(i int) Schedule {
	return Schedule{Seed: s.Seed, Steps: slices.Delete(slices.Clone(s.Steps), i, i+1)}
}

// Prefix is the schedule's first n steps.
func (s Schedule) Prefix(n int) Schedule {
	return Schedule{Seed: s.Seed, Steps: slices.Clone(s.Steps[:n])}
}

// Site is what a schedule is made for.
type Site struct {
	Nodes []string
	// AutoApps are the apps the cluster may move (migrate's choice).
	AutoApps []string
	// Length is how long the faults last: steps are added until their
	// holds reach it.
	Length time.Duration
	// MinHold and MaxHold bound each step's hold.
	MinHold, MaxHold time.Duration
	// ClockSteps says the site's nodes can have their clocks stepped
	// (sitebox's clock overlay); without it no schedule steps one, and a
	// seed's schedule is what it was before clock steps existed.
	ClockSteps bool
}

// model is what the steps so far have done, so that each next step is one
// that can be taken: a node powered on is off, a part resumed is paused.
type model struct {
	off, cut, cordoned, full, clocked map[string]bool
	paused                            map[string][]string
	drops                             int
}

func (m *model) up(nodes []string) []string {
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return m.off[n] })
}

// Generate makes seed's schedule for site: the same seed and site give
// the same schedule.
func Generate(seed uint64, site Site) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x5173c0))
	m := &model{off: map[string]bool{}, cut: map[string]bool{}, cordoned: map[string]bool{}, full: map[string]bool{}, clocked: map[string]bool{}, paused: map[string][]string{}}
	pick := func(from []string) string { return from[rng.IntN(len(from))] }
	subset := func(from []string, max int) []string {
		s := slices.Clone(from)
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		return slices.Sorted(slices.Values(s[:1+rng.IntN(min(max, len(s)))]))
	}
	sched := Schedule{Seed: seed}
	for sched.Length() < site.Length {
		up := m.up(site.Nodes)
		// The steps that can be taken now, each with its weight.
		type choice struct {
			weight int
			make   func() Step
		}
		var choices []choice
		// Nodes neither cut nor paused: a cut or a power cut starts from them.
		free := slices.DeleteFunc(slices.Clone(up), func(n string) bool { return m.cut[n] || len(m.paused[n]) > 0 })
		if len(free) >= 1 && len(up) >= 2 {
			choices = append(choices, choice{6, func() Step {
				g := subset(free, len(up)-1)
				for _, n := range g {
					m.cut[n] = true
				}
				return Step{Kind: Cut, Nodes: g}
			}})
		}
		if len(up) >= 2 {
			choices = append(choices, choice{2, func() Step {
				from := pick(up)
				to := pick(slices.DeleteFunc(slices.Clone(up), func(n string) bool { return n == from }))
				m.drops++
				return Step{Kind: Drop, Nodes: []string{from, to}}
			}})
		}
		if len(free) >= 1 {
			choices = append(choices, choice{4, func() Step {
				n := pick(free)
				part := pick([]string{"agent", "kubelet", "host"})
				m.paused[n] = append(m.paused[n], part)
				return Step{Kind: Pause, Nodes: []string{n}, Part: part}
			}})
			choices = append(choices, choice{3, func() Step {
				off := subset(free, len(free))
				for _, n := range off {
					m.off[n] = true
				}
				return Step{Kind: PowerOff, Nodes: off}
			}})
		}
		var paused []string
		for n, parts := range m.paused {
			if len(parts) > 0 {
				paused = append(paused, n)
			}
		}
		slices.Sort(paused)
		if len(paused) > 0 {
			choices = append(choices, choice{4, func() Step {
				n := pick(paused)
				part := pick(m.paused[n])
				m.paused[n] = slices.DeleteFunc(m.paused[n], func(p string) bool { return p == part })
				return Step{Kind: Resume, Nodes: []string{n}, Part: part}
			}})
		}
		var offNow []string
		for _, n := range site.Nodes {
			if m.off[n] {
				offNow = append(offNow, n)
			}
		}
		if len(offNow) > 0 {
			// Not into a staged cut or pause: a node is powered on once
			// those are healed (sitebox refuses otherwise).
			bootable := slices.DeleteFunc(slices.Clone(offNow), func(n string) bool { return m.cut[n] || len(m.paused[n]) > 0 })
			if len(bootable) > 0 {
				choices = append(choices, choice{6, func() Step {
					n := pick(bootable)
					delete(m.off, n)
					return Step{Kind: PowerOn, Nodes: []string{n}}
				}})
			}
		}
		var cutUp []string
		for _, n := range up {
			if m.cut[n] && !slices.Contains(m.paused[n], "host") && !slices.Contains(m.paused[n], "agent") {
				cutUp = append(cutUp, n)
			}
		}
		if len(cutUp) > 0 {
			// An agent restarted while its node is cut off.
			// Now and then with other fence settings (a longer timeout,
			// or none), which it cannot publish while cut off.
			choices = append(choices, choice{3, func() Step {
				st := Step{Kind: RestartAgent, Nodes: []string{pick(cutUp)}}
				switch rng.IntN(4) {
				case 0:
					st.Flags = []string{"--failover-timeout", "1m0s"}
				case 1:
					st.Flags = []string{"--no-fence"}
				}
				return st
			}})
		}
		// A disk fills on a node that runs or not (it stays full across
		// a power cycle, until the heal).
		if notFull := slices.DeleteFunc(slices.Clone(site.Nodes), func(n string) bool { return m.full[n] }); len(notFull) > 0 {
			choices = append(choices, choice{2, func() Step {
				n := pick(notFull)
				m.full[n] = true
				return Step{Kind: FillDisk, Nodes: []string{n}}
			}})
		}
		// A clock stepped ahead or back by up to two minutes, on a node
		// that runs or not (it stays wrong across a power cycle, until
		// the heal).
		if site.ClockSteps {
			choices = append(choices, choice{3, func() Step {
				n := pick(site.Nodes)
				m.clocked[n] = true
				d := time.Duration(10+rng.IntN(111)) * time.Second
				if rng.IntN(2) == 0 {
					d = -d
				}
				return Step{Kind: StepClock, Nodes: []string{n}, Clock: d}
			}})
		}
		if len(m.cut) > 0 || len(paused) > 0 || m.drops > 0 || len(m.full) > 0 || len(m.clocked) > 0 {
			choices = append(choices, choice{4, func() Step {
				clear(m.cut)
				clear(m.full)
				clear(m.clocked)
				clear(m.paused)
				m.drops = 0
				return Step{Kind: Heal}
			}})
		}
		var uncordoned, cordoned []string
		for _, n := range up {
			if m.cordoned[n] {
				cordoned = append(cordoned, n)
			} else {
				uncordoned = append(uncordoned, n)
			}
		}
		if len(uncordoned) > 1 {
			choices = append(choices, choice{3, func() Step {
				n := pick(uncordoned)
				m.cordoned[n] = true
				return Step{Kind: Drain, Nodes: []string{n}}
			}})
		}
		if len(uncordoned) > 1 {
			// Its reboot is the action's own: the node is on again after.
			choices = append(choices, choice{2, func() Step { return Step{Kind: DrainRequest, Nodes: []string{pick(uncordoned)}} }})
			// The walk reboots the node itself and uncordons it at its end.
			choices = append(choices, choice{2, func() Step { return Step{Kind: Maintenance, Nodes: []string{pick(uncordoned)}} }})
			choices = append(choices, choice{1, func() Step { return Step{Kind: Maintenance} }})
		}
		if len(cordoned) > 0 {
			choices = append(choices, choice{3, func() Step {
				n := pick(cordoned)
				delete(m.cordoned, n)
				return Step{Kind: Uncordon, Nodes: []string{n}}
			}})
		}
		if len(site.AutoApps) > 0 && len(up) > 0 {
			choices = append(choices, choice{2, func() Step {
				return Step{Kind: Migrate, App: pick(site.AutoApps), Nodes: []string{pick(up)}}
			}})
		}
		if len(site.AutoApps) > 0 {
			choices = append(choices, choice{2, func() Step { return Step{Kind: ReturnHome, App: pick(site.AutoApps)} }})
		}
		// Any node, in whatever state: what the preflight lets through (a
		// node not Ready whose going keeps quorum and the copies) is out
		// until the last heal, which brings it back as a device joined
		// again; the rest must be refused and change nothing.
		choices = append(choices, choice{2, func() Step { return Step{Kind: Remove, Nodes: []string{pick(site.Nodes)}} }})
		if len(up) > 0 {
			choices = append(choices, choice{2, func() Step { return Step{Kind: Leave, Nodes: []string{pick(up)}} }})
		}
		total := 0
		for _, c := range choices {
			total += c.weight
		}
		r := rng.IntN(total)
		var step Step
		for _, c := range choices {
			if r < c.weight {
				step = c.make()
				break
			}
			r -= c.weight
		}
		step.Hold = site.MinHold + time.Duration(rng.Int64N(int64(site.MaxHold-site.MinHold)+1))
		step.Hold = step.Hold.Round(time.Second)
		sched.Steps = append(sched.Steps, step)
	}
	return sched
}

// Shrink makes a failing schedule as short as it can while it still
// fails. Give it the failing run's prefix: the steps up to the one during
// which the first violation was seen (those after it cannot have caused
// it). Each step is then dropped, last first, while the rest still fails.
// fails runs a schedule (minutes on a site); at most budget runs are
// spent. It returns the shortest failing schedule found and the runs spent.
func Shrink(s Schedule, fails func(Schedule) bool, budget int) (Schedule, int) {
	runs := 0
	// Last first: a later step more often only follows the cause.
	for i := len(s.Steps) - 1; i >= 0 && runs < budget && len(s.Steps) > 1; i-- {
		c := s.Without(i)
		runs++
		if fails(c) {
			s = c
		}
	}
	return s, runs
}
