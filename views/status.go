// Package views holds what sitecon shows: the plain-text status of
// `sitecon status` and the console's screens.
package views

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/ui"
)

// Format is an output format of `sitecon status`.
type Format string

// Output formats.
const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
	FormatYAML  Format = "yaml"
)

// ParseFormat checks an -o value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case FormatTable, FormatJSON, FormatYAML:
		return f, nil
	case "wide", "":
		return FormatTable, nil
	}
	return "", fmt.Errorf("unknown output format %q: use table, json or yaml", s)
}

// AgentSummary is this node's agent as `sitecon status` shows it: its
// bootstrap phase, or why it cannot be asked.
type AgentSummary struct {
	Running        bool      `json:"running"`
	Socket         string    `json:"socket"`
	Problem        string    `json:"problem,omitempty"`
	Node           string    `json:"node,omitempty"`
	Role           string    `json:"role,omitempty"`
	Phase          string    `json:"phase,omitempty"`
	Since          time.Time `json:"since,omitzero"`
	Attempts       int       `json:"attempts,omitempty"`
	LastError      string    `json:"lastError,omitempty"`
	ClusterIP      string    `json:"clusterIP,omitempty"`
	ClusterIPReady bool      `json:"clusterIPReady,omitempty"`
	ConfigError    string    `json:"configError,omitempty"`
	// Failovers are the agent's last failover verdicts, per app: which
	// evidence from the lost node holds a failover back or let it go.
	Failovers []AgentFailover `json:"failovers,omitempty"`
	// AppProblems are the configured apps the agent could not lay out or
	// follow as configured (a host port in use by another app, an unusable
	// override), with its reason: the apps screen notes them, and lists an
	// app that has nothing in the cluster.
	AppProblems []AgentAppProblem `json:"appProblems,omitempty"`
	// Events is the agent's timeline (moves, failovers, refusals, node and
	// leader changes) and the actions taken here, newest first.
	Events []AgentEvent `json:"-"`
}

// AgentFailover is an app's last failover verdict, as its agent reports it.
type AgentFailover struct {
	App     string `json:"app"`
	Verdict string `json:"verdict"`
}

// AgentAppProblem is one configured app and what its agent finds wrong
// with it.
type AgentAppProblem struct {
	App  string `json:"app"`
	UUID string `json:"uuid"`
	Kind string `json:"kind"`
	// Mode is auto or pinned, as the cluster rows say it; Designated is
	// its designated node's name ("" when not in the cluster).
	Mode       string `json:"mode,omitempty"`
	Designated string `json:"designated,omitempty"`
	Problem    string `json:"problem"`
}

// AgentEvent is one entry of the agent's timeline, or of the audit log of
// actions taken on this device (Source "audit").
type AgentEvent struct {
	Source  string // "agent" (default) or "audit"
	Time    time.Time
	Kind    string
	Subject string
	Message string
	Warning bool
	// UnderWay: an action recorded as intended with no outcome yet (it
	// runs, or was cut off before it could say).
	UnderWay bool
}

// StatusReport is what `sitecon status` prints: the cluster, and this node's
// agent when there is one to ask.
type StatusReport struct {
	kube.ClusterStatus
	Agent *AgentSummary `json:"agent,omitempty"`
	// Problems is what needs attention: the console overview's alerts, each
	// with its why, next step and finding id (Alert.Line),
	// the same rule. `sitecon status` exits 1 when there is any.
	Problems []string `json:"problems"`
	// NodeReports is what each node's agent reported, asked directly,
	// when the cluster was read but then stopped answering (Stale).
	NodeReports *nodestate.NodeReports `json:"nodeReports,omitempty"`
}

// NewStatusReport is the report of a cluster status and this node's agent,
// with what needs attention as of now.
func NewStatusReport(st kube.ClusterStatus, agent *AgentSummary, now time.Time) StatusReport {
	r := StatusReport{ClusterStatus: st, Agent: agent, Problems: []string{}}
	for _, a := range Alerts(&Frame{Status: st, Synced: true}, now) {
		r.Problems = append(r.Problems, a.CLILine())
	}
	return r
}

// WriteStatus prints the status in the given format. Times in the table are
// ages relative to now.
//
// Nothing raw from the cluster reaches the terminal (safety rule 7): JSON
// carries every string whole, with its control characters escaped; YAML
// cannot hold them (the encoder refuses them) and the table must not, so
// for both they are stripped first.
func WriteStatus(w io.Writer, r StatusReport, now time.Time, f Format) error {
	if r.Problems == nil {
		r = NewStatusReport(r.ClusterStatus, r.Agent, now)
	}
	switch f {
	case FormatJSON:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
		_, err := w.Write(escapeControls(buf.Bytes()))
		return err
	case FormatYAML:
		data, err := yaml.Marshal(ui.CleanStrings(r))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	return writeTable(w, ui.CleanStrings(r), now)
}

// escapeControls escapes the control characters encoding/json leaves as
// they are (DEL and the C1 range, U+0080 to U+009F, which some terminals
// read as 8-bit escapes) as \u00XX. JSON's own syntax is printable ASCII, so
// any of them is inside a string, where the escape means the same.
func escapeControls(data []byte) []byte {
	if !bytes.ContainsFunc(data, func(r rune) bool { return r >= 0x7f && r <= 0x9f }) {
		return data
	}
	var out bytes.Buffer
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r >= 0x7f && r <= 0x9f {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.Write(data[:size])
		}
		data = data[size:]
	}
	return out.Bytes()
}

func writeAgent(p func(string, ...any), a *AgentSummary, now time.Time) {
	if a == nil {
		return
	}
	if !a.Running {
		p("Agent:\tnot running on this node (%s)\n", a.Problem)
		return
	}
	line := fmt.Sprintf("%s, %s for %s", orNA(a.Role), a.Phase, Age(a.Since, now, true))
	if a.Attempts > 1 {
		line += fmt.Sprintf(", %d attempts", a.Attempts)
	}
	p("Agent:\t%s\n", line)
	if a.ClusterIP != "" {
		ready := "not configured yet"
		if a.ClusterIPReady {
			ready = "on the interface, firewall in place"
		}
		p("Cluster IP:\t%s (%s)\n", a.ClusterIP, ready)
	}
	if a.LastError != "" {
		p("Last error:\t%s\n", a.LastError)
	}
	if a.ConfigError != "" {
		p("Config rejected:\t%s\n", strings.ReplaceAll(a.ConfigError, "\n", " "))
	}
	for _, f := range a.Failovers {
		p("Last failover:\t%s: %s\n", f.App, f.Verdict)
	}
	for _, ap := range a.AppProblems {
		p("App problem:\t%s: %s\n", ap.App, ap.Problem)
	}
}

// Age formats how long ago t was, the way kubectl does ("5m", "3d4h"); a
// lower bound is marked with ">". A lower bound under minLowerBound says
// nothing worth a figure (a one-shot `sitecon status` began watching a
// moment ago, so every healthy volume would read ">0s"): AgeUnknown.
func Age(t time.Time, now time.Time, exact bool) string {
	if t.IsZero() {
		return "n/a"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	if !exact && d < minLowerBound {
		return AgeUnknown
	}
	s := duration.HumanDuration(d)
	if !exact {
		s = ">" + s
	}
	return s
}

// heldFor is how long a state has held, for a sentence: " for 5m", " for
// over 5m" (a lower bound), or nothing when that is unknown.
func heldFor(since, now time.Time, exact bool) string {
	a := Age(since, now, exact)
	switch {
	case a == AgeUnknown || a == "n/a":
		return ""
	case strings.HasPrefix(a, ">"):
		return " for over " + a[1:]
	}
	return " for " + a
}

// AgeUnknown is an age sitecon cannot tell, as kubectl prints one.
const AgeUnknown = "<unknown>"

// minLowerBound is the shortest lower bound Age shows as a figure.
const minLowerBound = time.Minute

// Bytes formats a byte count in binary units ("10Gi").
func Bytes(n int64) string {
	if n == 0 {
		return "0"
	}
	// Round to a readable unit: 10.5Gi reads better than 11274289152.
	units := []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}}
	for _, u := range units {
		if n >= u.size {
			v := float64(n) / float64(u.size)
			if v == float64(int64(v)) {
				return fmt.Sprintf("%d%s", int64(v), u.suffix)
			}
			return fmt.Sprintf("%.1f%s", v, u.suffix)
		}
	}
	return fmt.Sprint(n)
}

// SeedText names the seed server and its address, or n/a.
func SeedText(c kube.ClusterIdentity) string {
	if c.SeedAddress == "" {
		return "n/a"
	}
	return orNA(c.SeedNode) + " (" + c.SeedAddress + ")"
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func writeTable(out io.Writer, r StatusReport, now time.Time) error {
	st := r.ClusterStatus
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	if s := st.Stale; s != nil {
		p("STALE: the cluster API has not answered for %s: %s\nThis is the cluster as of %s ago, not as it is now.\n\n", Age(s.Since, now, true), s.Reason, Age(s.AsOf, now, true))
	}
	stale := ""
	if s := st.Stale; s != nil {
		stale = " (as of " + Age(s.AsOf, now, true) + " ago)"
	}

	name := orNA(st.Cluster.Name)
	if st.Cluster.UUID != "" {
		name += " (" + st.Cluster.UUID + ")"
	}
	p("Cluster:\t%s\n", name)
	p("Seed server:\t%s\n", SeedText(st.Cluster))
	vip := orNA(st.VIP.Address)
	if st.VIP.Owner != "" {
		vip += " on " + st.VIP.Owner
		if st.VIP.Since != nil {
			vip += " for " + Age(*st.VIP.Since, now, true)
		}
	} else {
		vip += ", no owner"
	}
	p("VIP:\t%s\n", vip)
	p("Nodes ready:\t%d/%d%s\n", st.NodesReady, st.NodesTotal, stale)
	if l := st.StatsLeader; l.Holder != "" {
		p("Stats leader:\t%s\n", l.Holder)
	}
	writeAgent(p, r.Agent, now)
	p("Memory:\t%s allocatable of %s\n", Bytes(st.Resources.MemoryAllocatable), Bytes(st.Resources.MemoryCapacity))
	p("Storage:\t%s in volumes (%s used), %s node storage\n", Bytes(st.Resources.VolumeSize), Bytes(st.Resources.VolumeActualSize), Bytes(st.Resources.StorageAllocatable))
	switch {
	case len(r.Problems) > 0:
		p("Problems%s:\n", stale)
		for _, problem := range r.Problems {
			p("  %s\n", problem)
		}
	case stale != "":
		p("Problems:\tnone seen%s; what changed since is unknown\n", stale)
	default:
		p("Problems:\tnone: every node ready, every volume healthy, every app running\n")
	}
	p("\n")

	p("NODE\tSTATUS\tSINCE\tROLES\tSCHEDULABLE\tVERSION\tINTERNAL-IP\tPODS\n")
	for _, n := range st.Nodes {
		roles := strings.Join(n.Roles, ",")
		if n.Seed {
			roles += " (seed)"
		}
		sched := "yes"
		if !n.Schedulable {
			sched = "cordoned"
		}
		version := orNA(n.KubeletVersion)
		if n.VersionSkew != "" {
			version += " (skew!)"
		}
		p("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", n.Name, n.Status, Age(n.Since, now, true), roles, sched, version, orNA(n.InternalIP), n.Pods)
	}
	for _, n := range st.Nodes {
		if n.VersionSkew != "" {
			p("Version skew on %s:\t%s\n", n.Name, n.VersionSkew)
		}
	}
	p("\n")

	p("NAMESPACE\tREADY\tNOT-READY\tFAILED\n")
	for _, ns := range st.Namespaces {
		p("%s\t%d\t%d\t%d\n", ns.Name, ns.Ready, ns.NotReady, ns.Failed)
	}
	p("\n")

	if !st.Longhorn {
		p("Volumes:\tLonghorn is not installed\n")
	} else {
		p("VOLUME\tSTATE\tROBUSTNESS\tSINCE\tSIZE\tNODE\tREPLICAS\n")
		for _, v := range st.Volumes {
			replicas := replicasInStatus.list(v)
			p("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Label(), orNA(v.State), v.Robustness, Age(v.Since, now, v.SinceExact), Bytes(v.Size), orNA(v.Node), orNA(replicas))
		}
		if len(st.Volumes) == 0 {
			p("(no volumes)\n")
		}
	}
	p("\n")

	p("APP\tKIND\tNODE\tPHASE\tREADY\n")
	for _, a := range st.Apps {
		ready := "no"
		if a.Ready {
			ready = "yes"
		}
		p("%s\t%s\t%s\t%s\t%s\n", a.Name, a.Kind, orNA(a.Node), orNA(a.PhaseText()), ready)
	}
	if len(st.Apps) == 0 {
		p("(no apps)\n")
	}
	return w.Flush()
}
