package views

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/ui"
)

// The doctor screen (7): what `sitecon doctor` finds, from the same
// doctor.Diagnose the command runs (the command line gives the function,
// with the command's deadlines), run in the background once the cluster
// is read whole (or the first time the screen is shown, if sooner) and
// again on r. It needs no live cluster: with the
// API down the doctor says so (SC-API-UNREACHABLE) and still runs the
// checks of this node and of each node's own report. It only reads, so
// read-only consoles have it too.

// doctorRunner runs the doctor, one run at a time, and keeps its last
// report.
type doctorRunner struct {
	ctx context.Context
	// run is the doctor; nil: not available here (SetDoctor not called).
	run func(context.Context) doctor.Report
	// asked: the screen's first showing has had its run (it starts one,
	// or finds one under way); r starts the next.
	asked bool
	// auto: the run the console starts by itself once the cluster has
	// been read whole has started.
	auto    bool
	running bool
	started time.Time
	report  *doctor.Report
	// ranAt is when the last report came.
	ranAt time.Time
}

// doctorMsg is a finished run's report.
type doctorMsg struct{ report doctor.Report }

// SetDoctor lets the console run the doctor with run, under ctx (the
// console's: a run under way stops with it).
func (a *App) SetDoctor(ctx context.Context, run func(context.Context) doctor.Report) {
	a.doctor.ctx, a.doctor.run = ctx, run
}

// start begins a run off the UI goroutine; nil when one is under way or
// there is no doctor.
func (d *doctorRunner) start(now time.Time) tea.Cmd {
	if d.run == nil || d.running {
		return nil
	}
	d.running, d.started = true, now
	ctx, run := d.ctx, d.run
	if ctx == nil {
		ctx = context.Background()
	}
	return func() tea.Msg { return doctorMsg{report: run(ctx)} }
}

// onDoctor keeps a finished run's report, its strings cleaned (they come
// from the cluster and from files).
func (a *App) onDoctor(msg doctorMsg) {
	r := ui.CleanStrings(msg.report)
	a.doctor.report, a.doctor.running, a.doctor.ranAt = &r, false, a.ctx.Now()
	a.refresh()
}

// doctorStart starts the first run when the doctor screen is shown, or
// by itself once the cluster has been read whole: the quiet overview
// points at what it finds (it said "none" while the doctor, never run,
// would have found errors).
func (a *App) doctorStart() tea.Cmd {
	if a.logs != nil || a.doctor.run == nil {
		return nil
	}
	if _, shown := a.screens[a.current].(*doctorScreen); shown {
		// A fresh run for the screen, once the automatic one (which may
		// have begun before what the technician came to look at) is over;
		// the screen says it runs meanwhile. It stands for the automatic
		// one too.
		if a.doctor.asked || a.doctor.running {
			return nil
		}
		a.doctor.asked, a.doctor.auto = true, true
		return a.doctor.start(a.ctx.Now())
	}
	if a.doctor.auto || !a.frame.Synced {
		return nil
	}
	a.doctor.auto = true
	return a.doctor.start(a.ctx.Now())
}

// doctorScreen is the findings table under a line that says when the
// doctor last ran (or that it runs now).
type doctorScreen struct {
	*tableScreen
	runner *doctorRunner
	now    time.Time
}

// doctorRowIDs names each finding's row: its id and subject, and its
// place among findings with both the same.
func doctorRowIDs(fs []doctor.Finding) []string {
	seen := map[string]int{}
	out := make([]string, len(fs))
	for i, f := range fs {
		id := f.ID + " " + f.Subject
		if n := seen[id]; n > 0 {
			out[i] = fmt.Sprintf("%s #%d", id, n+1)
		} else {
			out[i] = id
		}
		seen[id]++
	}
	return out
}

// doctorFindings are the report's findings worst first (within a
// severity, in the doctor's own order: by area).
func doctorFindings(r *doctor.Report) []doctor.Finding {
	if r == nil {
		return nil
	}
	fs := slices.Clone(r.Findings)
	slices.SortStableFunc(fs, func(x, y doctor.Finding) int { return cmp.Compare(y.Severity, x.Severity) })
	return fs
}

func newDoctor(ctx *ui.Context, runner *doctorRunner) screen {
	// At 80 columns a row keeps the severity, the id and the subject
	// whole; the summary takes the room left and is read whole under the
	// table for the row under the cursor, and in its detail (enter).
	cols := []ui.Column{{Title: "SEV", Width: 5}, {Title: "ID", Width: 24}, {Title: "SUBJECT", Width: 14, GivesWay: true},
		{Title: "FINDING", Width: 20, Flex: true}}
	about := screenHelp{
		about: "What sitecon doctor finds, worst first: each finding's id (docs/DOCTOR.md's Findings table explains it), severity, subject and summary; enter shows its evidence and next step. " +
			"It runs the doctor's read-only checks in the background, each within its own deadline, when the screen is first shown and again on r; with the cluster API down it says so and still checks this node and what each node reports.",
	}
	s := &doctorScreen{tableScreen: &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), about: about}, runner: runner}
	st := &ctx.Styles
	s.build = func(_ *Frame, now time.Time) []ui.Row {
		s.now = now
		fs := doctorFindings(runner.report)
		ids := doctorRowIDs(fs)
		rows := make([]ui.Row, 0, len(fs))
		for i, f := range fs {
			sev := plain(f.Severity.String())
			switch f.Severity {
			case doctor.Error:
				sev = styled(sev.Text, &st.Bad)
			case doctor.Warn:
				sev = styled(sev.Text, &st.Warn)
			case doctor.OK:
				sev = styled(sev.Text, &st.OK)
			}
			sev.Key = fmt.Sprint(int(doctor.Error - f.Severity))
			rows = append(rows, ui.Row{ID: ids[i], Cells: []ui.Cell{sev, plain(f.ID), plain(orDash(f.Subject)), plain(f.Summary)}})
		}
		return rows
	}
	s.about.keys = append(s.about.keys, binding{key: ctx.Keys.Rerun, long: "run the doctor again (reads only)", section: sectionScreen, footer: footerAction,
		applies: func() bool { return runner.run != nil && !runner.running },
		run:     func(tea.KeyMsg) tea.Cmd { return runner.start(ctx.Now()) }})
	withDetail(s.tableScreen, "finding", "the finding's evidence and next step",
		func(_ *Frame, id string) string { return id },
		func(_ *Frame, id string, now time.Time, width int) ([]string, bool) {
			fs := doctorFindings(runner.report)
			i := slices.Index(doctorRowIDs(fs), id)
			if i < 0 {
				return nil, false
			}
			return findingLines(ctx, fs[i], now, width), true
		})
	return s
}

// findingLines is a finding's detail: what, how bad, since when, all its
// evidence and its next step, wrapped.
func findingLines(ctx *ui.Context, f doctor.Finding, now time.Time, width int) []string {
	t := &detailText{ctx: ctx, width: width}
	t.row("Finding", f.ID)
	t.row("Severity", f.Severity.String()+" · "+f.Area)
	if f.Subject != "" {
		t.row("Subject", f.Subject)
	}
	if f.Since != nil {
		t.row("Since", f.Since.In(now.Location()).Format("2006-01-02 15:04:05")+", "+Age(*f.Since, now, true)+" ago")
	}
	t.row("Summary", f.Summary)
	t.section("Evidence")
	if len(f.Evidence) == 0 {
		t.item("none given")
	}
	for _, e := range f.Evidence {
		t.item(e)
	}
	t.section("Next step")
	switch {
	case f.Next != "":
		t.item(f.Next)
	case f.Severity < doctor.Warn:
		t.item("none needed")
	default:
		t.item("none given: see docs/DOCTOR.md's Findings table for " + f.ID)
	}
	return t.lines
}

// status is the line above the findings: running, when the doctor last
// ran and what it found, or why it cannot run.
func (s *doctorScreen) status() string {
	st := s.ctx.Styles
	r := s.runner
	var parts []string
	switch {
	case r.run == nil:
		return st.Muted.Render("The doctor is not available here (sitecon doctor runs it from a shell).")
	case r.running:
		parts = append(parts, st.Warn.Render(fmt.Sprintf("running… (started %s, %s ago; each check within its deadline)",
			clock(r.started, s.now), Age(r.started, s.now, true))))
	case r.report == nil:
		return st.Muted.Render("not run yet")
	}
	if r.report != nil {
		counts := map[doctor.Severity]int{}
		unchecked := 0
		for _, f := range r.report.Findings {
			counts[f.Severity]++
			if f.NotChecked {
				unchecked++
			}
		}
		last := fmt.Sprintf("last ran %s, %s ago: %d error, %d warn, %d info, %d ok", clock(r.ranAt, s.now), Age(r.ranAt, s.now, true),
			counts[doctor.Error], counts[doctor.Warn], counts[doctor.Info], counts[doctor.OK])
		if unchecked > 0 {
			// As sitecon doctor's summary says it.
			last += fmt.Sprintf(", %d not checked", unchecked)
		}
		parts = append(parts, last)
	}
	return strings.Join(parts, " · ")
}

// table is the findings' once there is a report: before it there are no
// rows to move over, filter or sort.
func (s *doctorScreen) table() *ui.Table {
	if s.runner.report == nil {
		return nil
	}
	return s.tableScreen.table()
}

func (s *doctorScreen) view(w, h int) string {
	head := ui.Fit(s.status(), w)
	if h < 2 {
		return head
	}
	if s.runner.report == nil {
		return head
	}
	return head + "\n" + s.tableScreen.view(w, h-1)
}
