package views

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// podsScreen lists namespaces; enter opens one namespace's pods, esc goes back.
type podsScreen struct {
	ctx        *ui.Context
	namespaces *ui.Table
	pods       *ui.Table
	open       string // namespace drilled into, "" for the list
	frame      *Frame
	now        time.Time
	// detail is the pod open (enter on a pod), by namespace/name.
	detail *detailView
}

func newPods(ctx *ui.Context) screen {
	s := &podsScreen{
		ctx: ctx,
		namespaces: ui.NewTable(ctx, []ui.Column{{Title: "NAMESPACE", Width: 16}, {Title: "READY", Width: 6},
			{Title: "NOT-READY", Width: 10}, {Title: "FAILED", Width: 7}}),
		pods: ui.NewTable(ctx, []ui.Column{{Title: "NAME", Width: 20}, {Title: "PHASE", Width: 11}, {Title: "READY", Width: 6},
			{Title: "RESTARTS", Width: 9}, {Title: "NODE", Width: 7}, {Title: "AGE", Width: 5}}),
	}
	s.detail = &detailView{ctx: ctx, of: "pod", draw: podDetail(ctx), label: func(_ *Frame, id string) string { return id }}
	return s
}

// selectedPod is the namespace/name of the pod under the cursor, "" when
// no namespace is open or it has no pods.
func (s *podsScreen) selectedPod() string {
	if s.open == "" || s.pods.SelectedID() == "" {
		return ""
	}
	return s.open + "/" + s.pods.SelectedID()
}

func (s *podsScreen) setFrame(f *Frame, now time.Time) {
	s.frame, s.now = f, now
	st := &s.ctx.Styles
	var rows []ui.Row
	for _, ns := range f.Status.Namespaces {
		notReady := plain(fmt.Sprint(ns.NotReady))
		if ns.NotReady > 0 {
			notReady = styled(fmt.Sprint(ns.NotReady), &st.Warn)
		}
		failed := plain(fmt.Sprint(ns.Failed))
		if ns.Failed > 0 {
			failed = styled(fmt.Sprint(ns.Failed), &st.Bad)
		}
		rows = append(rows, ui.Row{ID: ns.Name, Cells: []ui.Cell{plain(ns.Name), plain(fmt.Sprint(ns.Ready)), notReady, failed}})
	}
	s.namespaces.SetRows(rows)
	s.buildPods()
	s.detail.setFrame(f, now)
}

func (s *podsScreen) buildPods() {
	if s.frame == nil {
		return
	}
	st := &s.ctx.Styles
	n := 0
	for _, p := range s.frame.Pods {
		if p.Namespace == s.open {
			n++
		}
	}
	lost := map[string]bool{}
	for _, n := range s.frame.Status.Nodes {
		lost[n.Name] = !n.Ready
	}
	// One allocation for the rows and one for their cells, not one a row.
	const columns = 6
	rows := make([]ui.Row, 0, n)
	cells := make([]ui.Cell, 0, n*columns)
	for _, p := range s.frame.Pods {
		if p.Namespace != s.open {
			continue
		}
		phase := styled(stateText(s.frame, p.Phase), okStyle(s.ctx, s.frame))
		switch {
		case p.Phase == "Running" && lost[p.Node]:
			// As for apps: on a lost node a pod is not known to run.
			phase = styled(stateText(s.frame, kube.AppPhaseUnknown), &st.Bad)
		case !p.Healthy:
			phase = styled(stateText(s.frame, p.Phase), &st.Bad)
		}
		cells = append(cells,
			plain(p.Name), phase, plain(p.Ready), ui.Cell{Text: strconv.Itoa(int(p.Restarts)), Key: numberKey(int64(p.Restarts))},
			plain(orNA(p.Node)), ui.Cell{Text: Age(p.Created, s.now, true), Key: durationKey(p.Created, s.now)})
		rows = append(rows, ui.Row{ID: p.Name, Cells: cells[len(cells)-columns : len(cells) : len(cells)]})
	}
	s.pods.SetRows(rows)
}

func (s *podsScreen) table() *ui.Table {
	if s.detail.isOpen() {
		return nil
	}
	if s.open != "" {
		return s.pods
	}
	return s.namespaces
}

func (s *podsScreen) help() screenHelp {
	k := s.ctx.Keys
	return screenHelp{
		about:  "Pod health per namespace; enter shows a namespace's pods, enter on a pod its detail (conditions, containers, the scheduler's reason, events), l the log of the pod under the cursor.",
		logsOf: "selected pod",
		logs: func() (logRequest, bool) {
			id := s.pods.SelectedID()
			if s.open == "" || id == "" {
				return logRequest{}, false
			}
			return logRequest{namespace: s.open, name: id, label: "pod " + s.open + "/" + id}, true
		},
		keys: append(s.detail.bindings("the pod's detail", "back to the pods", s.selectedPod), []binding{
			{key: k.Enter, long: "open the namespace's pods", section: sectionScreen, footer: footerScreen,
				applies: func() bool { return s.open == "" && s.namespaces.SelectedID() != "" },
				run: func(tea.KeyMsg) tea.Cmd {
					s.open = s.namespaces.SelectedID()
					s.buildPods()
					return nil
				}},
			{key: k.Back, long: "back to the namespaces", section: sectionScreen, footer: footerScreen,
				applies: func() bool { return s.open != "" && !s.detail.isOpen() },
				run:     func(tea.KeyMsg) tea.Cmd { s.open = ""; return nil }},
		}...),
	}
}

func (s *podsScreen) title() string {
	if s.detail.isOpen() {
		return s.detail.title()
	}
	if s.open != "" {
		return "pods in " + s.open + " (esc: back)"
	}
	return ""
}

func (s *podsScreen) view(w, h int) string {
	if s.detail.isOpen() {
		return s.detail.view(w, h)
	}
	return s.table().View(w, h)
}

// podDetail is the detail of the pod id (namespace/name): its phase and
// readiness, its node or the scheduler's reason for none, its conditions,
// each container's state, restarts and last termination, and its recent
// events, all from the frame.
func podDetail(ctx *ui.Context) func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
	return func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
		ns, name, _ := strings.Cut(id, "/")
		i := slices.IndexFunc(f.Pods, func(p kube.PodRow) bool { return p.Namespace == ns && p.Name == name })
		if i < 0 {
			return nil, false
		}
		p := f.Pods[i]
		t := &detailText{ctx: ctx, width: width}
		phase := stateText(f, p.Phase)
		if p.Phase == "Running" && f.Status.NodeLost(p.Node) {
			// As the table says: on a lost node a pod is not known to run.
			phase = stateText(f, kube.AppPhaseUnknown) + " (it last reported Running; " + p.Node + " is lost)"
		}
		t.row("Status", phase+" · ready "+p.Ready+" · created "+Age(p.Created, now, true)+" ago")
		node := orNA(p.Node)
		if p.Node == "" {
			node = "none: not scheduled"
		}
		t.row("Node", node)
		if c := p.Unscheduled; c != nil {
			t.row("Scheduler", c.Reason+" for "+Age(c.Since, now, true)+": "+c.Message)
		}
		t.row("Restarts", strconv.Itoa(int(p.Restarts)))
		t.section("Conditions")
		if len(p.Conditions) == 0 {
			t.item("none reported")
		}
		for _, text := range conditionLines(p.Conditions, now) {
			t.item(text)
		}
		t.section("Containers")
		if len(p.Containers) == 0 {
			t.item("none reported")
		}
		for _, c := range p.Containers {
			t.item(containerLine(c, now))
		}
		t.events(f, now, []string{p.Namespace + ":Pod/" + p.Name}, nil, detailEvents)
		return t.lines, true
	}
}

// containerLine says one container: its state and why, ready or not,
// its restarts and why it last ended.
func containerLine(c kube.ContainerState, now time.Time) string {
	text := c.Name
	if c.Init {
		text += " (init)"
	}
	text += ": " + c.State
	if c.Reason != "" {
		text += " (" + c.Reason + ")"
	}
	if c.State == "running" && !c.Ready {
		text += ", not ready"
	}
	text += fmt.Sprintf(" · %d restart(s)", c.Restarts)
	if c.LastTermination != "" {
		text += " · last ended " + c.LastTermination
		if !c.LastEnded.IsZero() {
			text += ", " + Age(c.LastEnded, now, true) + " ago"
		}
	}
	if c.Message != "" {
		text += " · " + c.Message
	}
	return text
}
