package views

import (
	"fmt"
	"strconv"
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
}

func newPods(ctx *ui.Context) screen {
	return &podsScreen{
		ctx: ctx,
		namespaces: ui.NewTable(ctx, []ui.Column{{Title: "NAMESPACE", Width: 16}, {Title: "READY", Width: 6},
			{Title: "NOT-READY", Width: 10}, {Title: "FAILED", Width: 7}}),
		pods: ui.NewTable(ctx, []ui.Column{{Title: "NAME", Width: 20}, {Title: "PHASE", Width: 11}, {Title: "READY", Width: 6},
			{Title: "RESTARTS", Width: 9}, {Title: "NODE", Width: 7}, {Title: "AGE", Width: 5}}),
	}
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
	if s.open != "" {
		return s.pods
	}
	return s.namespaces
}

func (s *podsScreen) help() screenHelp {
	k := s.ctx.Keys
	return screenHelp{
		about:  "Pod health per namespace; enter shows a namespace's pods, l the log of the pod under the cursor.",
		logsOf: "selected pod",
		logs: func() (logRequest, bool) {
			id := s.pods.SelectedID()
			if s.open == "" || id == "" {
				return logRequest{}, false
			}
			return logRequest{namespace: s.open, name: id, label: "pod " + s.open + "/" + id}, true
		},
		keys: []binding{
			{key: k.Enter, long: "open the namespace's pods", section: sectionScreen, footer: footerScreen,
				applies: func() bool { return s.open == "" && s.namespaces.SelectedID() != "" },
				run: func(tea.KeyMsg) tea.Cmd {
					s.open = s.namespaces.SelectedID()
					s.buildPods()
					return nil
				}},
			{key: k.Back, long: "back to the namespaces", section: sectionScreen, footer: footerScreen,
				applies: func() bool { return s.open != "" },
				run:     func(tea.KeyMsg) tea.Cmd { s.open = ""; return nil }},
		},
	}
}

func (s *podsScreen) title() string {
	if s.open != "" {
		return "pods in " + s.open + " (esc: back)"
	}
	return ""
}

func (s *podsScreen) view(w, h int) string { return s.table().View(w, h) }
