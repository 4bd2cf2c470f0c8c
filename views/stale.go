package views

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/ui"
)

// What a screen draws from a stale cache (the API server not answering:
// kube.ClusterStatus.Stale) is decided here, once, for every screen: stale
// data is never drawn as healthy. A figure says how old it is, a state
// carries a "?" (the last state seen, not known to hold now), and nothing
// is green.

// stale is the frame's staleness, nil while the cluster answers (or
// before it was read at all: then there is nothing to draw).
func stale(f *Frame) *kube.Staleness {
	if f == nil || !f.Synced {
		return nil
	}
	return f.Status.Stale
}

// asOf is " (as of 2m ago)" after a figure read from a stale cache, ""
// while the cluster answers.
func asOf(f *Frame, now time.Time) string {
	s := stale(f)
	if s == nil {
		return ""
	}
	return " (as of " + Age(s.AsOf, now, true) + " ago)"
}

// okStyle is the style of a healthy state: green while the cluster
// answers, muted from a stale cache.
func okStyle(ctx *ui.Context, f *Frame) *lipgloss.Style {
	if stale(f) != nil {
		return &ctx.Styles.Muted
	}
	return &ctx.Styles.OK
}

// stateText is a state as a cell shows it: "Ready", or "Ready?" from a
// stale cache (the last state seen, not known to hold now).
func stateText(f *Frame, state string) string {
	if stale(f) != nil && state != "" {
		return state + "?"
	}
	return state
}

// staleBanner is the line above every screen while the cache is stale: how
// long the API has not answered and how old the data is. It fits 80
// columns; the overview says why, whole.
func staleBanner(s *kube.Staleness, now time.Time, onOverview bool) string {
	line := "Cluster API down " + Age(s.Since, now, true) + ": the data is as of " + Age(s.AsOf, now, true) + " ago, not live"
	if !onOverview {
		line += " · why: 1 overview"
	}
	return line
}

// apiDownLines are the overview's words on a stale cache: that the
// cluster API is down, why, and what to check, wrapped to width. reports
// are the nodes' own reports: once some node answered, they are what to
// check (whether k3s runs, whether etcd has quorum), and the hint goes.
func apiDownLines(s *kube.Staleness, reports *nodestate.NodeReports, now time.Time, width int) []string {
	text := "The cluster API is down (no answer for " + Age(s.Since, now, true) + "): this is the site as of " +
		Age(s.AsOf, now, true) + " ago, and what changed since is unknown."
	lines := wrap(text, width)
	if s.Reason != "" {
		lines = append(lines, wrap("Why: "+s.Reason, width)...)
	}
	if hint := kube.APIDownHint(s.Reason); hint != "" && (reports == nil || len(reports.Answers) == 0) {
		lines = append(lines, wrap("Check: "+hint, width)...)
	}
	return lines
}

// wrap breaks text into lines of at most width cells, at spaces where it
// can, within a word where it must (a URL longer than the line).
func wrap(text string, width int) []string {
	width = max(width, 10)
	return strings.Split(ansi.Wrap(text, width, ""), "\n")
}

// NodeReportsTitle is said above what each node reports while the cluster
// API is down, by the overview and by `sitecon status`.
const NodeReportsTitle = "the cluster API is down; this is what each node reports:"

// nodeReportHeader names the report table's columns.
var nodeReportHeader = []string{"NODE", "ANSWERED", "PHASE", "K3S", "ETCD", "CLOCK", "ADDRESS", "LAST ERROR"}

// Column indexes of the report table, in nodeReportHeader's order.
const (
	colNode = iota
	colAnswered
	colPhase
	colK3s
	colEtcd
	colClock
	colAddress
	colLastError
)

// nodeReportCells are one answer's cells, cleaned (a report is a peer's
// words: nothing raw reaches the terminal). A node that gave no report
// has its name, "no" and why: the problem spans the rest of the row.
func nodeReportCells(a nodestate.NodeAnswer, now time.Time) (cells []string, problem string) {
	if !a.Answered || a.Report == nil {
		return []string{ui.Clean(a.Name()), "no"}, ui.Clean(a.Problem + " (" + a.Address + ")")
	}
	r := a.Report
	lastErr := r.LastError
	for _, s := range []string{r.ConfigError, r.ConfigNote} {
		if s != "" {
			lastErr = strings.TrimPrefix(lastErr+"; "+s, "; ")
		}
	}
	phase := r.Phase
	if !r.Since.IsZero() {
		phase += " " + Age(r.Since, r.Clock, true)
	}
	cells = []string{a.Name(), "yes", phase, r.K3s.Text(r.Clock), r.Etcd.Text(), skewText(a.ClockSkew), a.Address, orNone(lastErr)}
	for i := range cells {
		cells[i] = ui.Clean(cells[i])
	}
	return cells, ""
}

// skewText is a node's clock against the reader's: "+0s", "-7m12s".
func skewText(d time.Duration) string {
	d = d.Round(time.Second)
	if d < 0 {
		return "-" + (-d).String()
	}
	return "+" + d.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// NodeReportLines is the report table, a header and a line per node,
// at most width cells wide (0: as wide as it takes). When it does not
// fit, the address goes first, then the last error and etcd's view are
// cut, each with "…"; a node that did not answer says why on its row.
func NodeReportLines(r nodestate.NodeReports, now time.Time, width int) []string {
	if r.Problem != "" {
		return []string{ui.Clean(r.Problem)}
	}
	if len(r.Answers) == 0 {
		return []string{"no node answered, and no node is known to ask"}
	}
	rows := make([][]string, len(r.Answers))
	problems := make([]string, len(r.Answers))
	for i, a := range r.Answers {
		rows[i], problems[i] = nodeReportCells(a, now)
	}
	widths := make([]int, len(nodeReportHeader))
	measure := func(cells []string) {
		for i, c := range cells {
			widths[i] = max(widths[i], ansi.StringWidth(c))
		}
	}
	measure(nodeReportHeader)
	for i, cells := range rows {
		if problems[i] == "" {
			measure(cells)
		}
	}
	shown := []int{colNode, colAnswered, colPhase, colK3s, colEtcd, colClock, colAddress, colLastError}
	total := func() int {
		n := 0
		for _, c := range shown {
			n += widths[c] + 2
		}
		return n - 2
	}
	header := slices.Clone(nodeReportHeader)
	if width > 0 {
		if total() > width {
			shown = slices.DeleteFunc(shown, func(c int) bool { return c == colAddress })
		}
		if total() > width {
			// "yes" and "no" need no wider a column.
			header[colAnswered], widths[colAnswered] = "ANS", 3
		}
		if total() > width {
			// The phase without its age.
			widths[colPhase] = len(header[colPhase])
			for i, cells := range rows {
				if problems[i] == "" {
					cells[colPhase], _, _ = strings.Cut(cells[colPhase], " ")
					widths[colPhase] = max(widths[colPhase], ansi.StringWidth(cells[colPhase]))
				}
			}
		}
		// The last error, then etcd, give way, down to their headers'
		// width and a few cells.
		for _, c := range []int{colLastError, colEtcd} {
			if over := total() - width; over > 0 {
				widths[c] = max(widths[c]-over, len(header[c]), 6)
			}
		}
	}
	line := func(cells []string, problem string) string {
		var b strings.Builder
		for k, c := range shown {
			if problem != "" && k >= 2 {
				b.WriteString(problem)
				break
			}
			cell := cells[c]
			if k == len(shown)-1 {
				if width > 0 && ansi.StringWidth(cell) > widths[c] {
					cell = ansi.Truncate(cell, widths[c], "…")
				}
				b.WriteString(cell)
				break
			}
			b.WriteString(ui.Fit(cell, widths[c]) + "  ")
		}
		s := strings.TrimRight(b.String(), " ")
		if width > 0 && ansi.StringWidth(s) > width {
			s = ansi.Truncate(s, width, "…")
		}
		return s
	}
	out := []string{line(header, "")}
	for i := range rows {
		out = append(out, line(rows[i], problems[i]))
	}
	return out
}

// NodeReportsOutput is `sitecon status -o json|yaml` while the cluster
// API does not answer: why, and what each node reports.
type NodeReportsOutput struct {
	APIDown     string                `json:"apiDown"`
	NodeReports nodestate.NodeReports `json:"nodeReports"`
}

// WriteNodeReports prints what each node reports while the cluster API
// is down, in the given format: for a table, the title and the table.
func WriteNodeReports(w io.Writer, r nodestate.NodeReports, apiDown string, now time.Time, f Format) error {
	switch f {
	case FormatJSON:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(NodeReportsOutput{APIDown: apiDown, NodeReports: r}); err != nil {
			return err
		}
		_, err := w.Write(escapeControls(buf.Bytes()))
		return err
	case FormatYAML:
		data, err := yaml.Marshal(ui.CleanStrings(NodeReportsOutput{APIDown: apiDown, NodeReports: r}))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	if _, err := fmt.Fprintln(w, NodeReportsTitle); err != nil {
		return err
	}
	for _, l := range NodeReportLines(r, now, 0) {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// NodeReportsMsg is a round of node reports, asked in the background.
type NodeReportsMsg nodestate.NodeReports

// nodeReportsEvery is how often the nodes are asked again while the
// cluster API does not answer.
const nodeReportsEvery = 5 * time.Second

// nodeReportsAsker asks every node for its own report while the frame is
// stale, a round at a time, each round a tea.Cmd off the UI's goroutine;
// it stops asking, and forgets the reports, once the cluster answers.
type nodeReportsAsker struct {
	ctx    context.Context
	gather func(ctx context.Context, known []kube.NodeStatus) nodestate.NodeReports
	// asking: a round is out; next is when the next may start.
	asking bool
	next   time.Time
	last   *nodestate.NodeReports
}

// SetNodeReports lets the console ask every node's agent for its report
// while the cluster API does not answer (nil: it cannot: no cluster
// config; the overview says so).
func (a *App) SetNodeReports(ctx context.Context, gather func(ctx context.Context, known []kube.NodeStatus) nodestate.NodeReports) {
	a.reports = nodeReportsAsker{ctx: ctx, gather: gather}
}

// current is the reports to draw with f: the last round's while f is
// stale, none once the cluster answers.
func (r *nodeReportsAsker) current(f *Frame) *nodestate.NodeReports {
	if stale(f) == nil {
		r.last, r.next = nil, time.Time{}
		return nil
	}
	if r.gather == nil {
		return &nodestate.NodeReports{Problem: "what each node reports needs this node's cluster config: start the console on a device with --config FILE"}
	}
	return r.last
}

// ask starts a round when f is stale, none is out, and the last is old.
func (r *nodeReportsAsker) ask(f *Frame, now time.Time) tea.Cmd {
	if r.gather == nil || stale(f) == nil || r.asking || now.Before(r.next) {
		return nil
	}
	r.asking = true
	ctx, gather, known := r.ctx, r.gather, slices.Clone(f.Status.Nodes)
	if ctx == nil {
		ctx = context.Background()
	}
	return func() tea.Msg { return NodeReportsMsg(gather(ctx, known)) }
}

// got takes a round's reports.
func (r *nodeReportsAsker) got(reports nodestate.NodeReports, now time.Time) {
	r.asking, r.next = false, now.Add(nodeReportsEvery)
	r.last = &reports
}

// nodeReportsLines are the overview's lines on what each node reports
// while the cluster API is down, at most room lines of width cells: the
// title, then the table (or why there is none yet).
func nodeReportsLines(r *nodestate.NodeReports, now time.Time, width, room int) []string {
	out := []string{NodeReportsTitle}
	switch {
	case r == nil:
		out = append(out, "asking each node…")
	case r.Problem != "":
		out = append(out, wrap(ui.Clean(r.Problem), width)...)
	default:
		out = append(out, NodeReportLines(*r, now, width)...)
	}
	if len(out) > room {
		more := len(out) - room + 1
		out = append(out[:room-1], fmt.Sprintf("… %d more", more))
	}
	for i, l := range out {
		if ansi.StringWidth(l) > width {
			out[i] = ansi.Truncate(l, width, "…")
		}
	}
	return out
}
