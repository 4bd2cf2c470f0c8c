package views

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/ui"
)

// FormInput is what the formation wizard asks for.
type FormInput struct {
	ClusterName, Interface, Prefix, Seed string
	// Servers and Workers are comma-separated node names (NAME or NAME=UUID).
	Servers, Workers string
}

// Form field keys, as the checker names them.
const (
	FieldClusterName = "cluster name"
	FieldInterface   = "interface"
	FieldPrefix      = "prefix"
	FieldNodes       = "nodes"
	FieldSeed        = "seed"
)

// FormResult is what forming wrote and the lines for the other nodes.
type FormResult struct {
	Summary []string
	Written string
	Joins   []string
	// JoinsFile is the directory the bundles are saved in, one file per
	// node, for copying after the screen is gone.
	JoinsFile string
}

// FormWizard forms a cluster offline: text inputs checked as you type (the
// checker is the same Plan the CLI uses), then this node's config written
// and the other nodes' join lines shown.
type FormWizard struct {
	ctx    *ui.Context
	fields []formField
	focus  int
	// Check returns, per field key, what is wrong with the input (none: ok).
	Check func(FormInput) map[string][]string
	// Submit forms the cluster.
	Submit func(FormInput) (*FormResult, error)
	// Audit records forming (an intent before Submit, its outcome after);
	// without it nothing is formed. Via marks the records ("console").
	Audit *audit.Log
	Via   string
	// Interfaces are the device's interfaces, offered as completions.
	problems map[string][]string
	result   *FormResult
	err      string
	done     bool
	closed   bool
}

// Closed reports whether the user left the wizard.
func (w *FormWizard) Closed() bool { return w.closed }

type formField struct {
	label, key, hint string
	input            textinput.Model
}

// NewFormWizard builds the wizard; interfaces are this device's, in order.
func NewFormWizard(ctx *ui.Context, interfaces []string, defaults FormInput) *FormWizard {
	mk := func(label, key, hint, value string, suggestions []string) formField {
		in := textinput.New()
		in.Prompt = ""
		in.SetValue(value)
		if len(suggestions) > 0 {
			in.SetSuggestions(suggestions)
			in.ShowSuggestions = true
		}
		return formField{label: label, key: key, hint: hint, input: in}
	}
	w := &FormWizard{ctx: ctx}
	w.fields = []formField{
		mk("Cluster name", FieldClusterName, "e.g. site1", defaults.ClusterName, nil),
		mk("Cluster interface", FieldInterface, "this device's: "+strings.Join(interfaces, ", ")+" (→ completes)", defaults.Interface, interfaces),
		mk("Cluster prefix", FieldPrefix, "must not overlap the interface's subnets", defaults.Prefix, nil),
		mk("Server nodes", FieldNodes, "comma-separated, NAME or NAME=UUID; three or more", defaults.Servers, nil),
		mk("Worker nodes", FieldNodes, "optional, comma-separated", defaults.Workers, nil),
		mk("Seed server", FieldSeed, "one of the servers (default: the first)", defaults.Seed, nil),
	}
	w.fields[0].input.Focus()
	return w
}

// Input is what the fields hold now.
func (w *FormWizard) Input() FormInput {
	v := func(i int) string { return strings.TrimSpace(w.fields[i].input.Value()) }
	return FormInput{ClusterName: v(0), Interface: v(1), Prefix: v(2), Servers: v(3), Workers: v(4), Seed: v(5)}
}

// Result is the formed cluster once submitted.
func (w *FormWizard) Result() *FormResult { return w.result }

// Init starts the cursor blinking and checks the defaults.
func (w *FormWizard) Init() tea.Cmd {
	w.recheck()
	return textinput.Blink
}

func (w *FormWizard) recheck() {
	if w.Check != nil {
		w.problems = w.Check(w.Input())
	}
}

func (w *FormWizard) move(step int) tea.Cmd {
	w.fields[w.focus].input.Blur()
	w.focus = (w.focus + step + len(w.fields)) % len(w.fields)
	return w.fields[w.focus].input.Focus()
}

// Update handles keys: tab/shift+tab or ↑/↓ move between fields, → takes the
// suggestion, enter on the last field (or ctrl+s) forms, esc quits.
func (w *FormWizard) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		w.ctx.Width, w.ctx.Height = msg.Width, msg.Height
		return w, nil
	case tea.KeyMsg:
		k := w.ctx.Keys
		if w.done {
			w.closed = true
			return w, tea.Quit
		}
		switch {
		case key.Matches(msg, k.Back), key.Matches(msg, k.ForceQuit):
			w.closed = true
			return w, tea.Quit
		case key.Matches(msg, k.NextScreen), key.Matches(msg, k.FieldDown):
			return w, w.move(1)
		case key.Matches(msg, k.PrevScreen), key.Matches(msg, k.FieldUp):
			return w, w.move(-1)
		case key.Matches(msg, k.Enter) && w.focus < len(w.fields)-1:
			return w, w.move(1)
		case key.Matches(msg, k.Enter), key.Matches(msg, k.Submit):
			return w, w.submit()
		case key.Matches(msg, k.TakeSuggestion) && w.fields[w.focus].input.Position() == len(w.fields[w.focus].input.Value()):
			if s := w.fields[w.focus].input.CurrentSuggestion(); s != "" {
				w.fields[w.focus].input.SetValue(s)
				w.fields[w.focus].input.CursorEnd()
				w.recheck()
				return w, nil
			}
		}
	}
	var cmd tea.Cmd
	w.fields[w.focus].input, cmd = w.fields[w.focus].input.Update(msg)
	w.err = ""
	w.recheck()
	return w, cmd
}

func (w *FormWizard) submit() tea.Cmd {
	w.recheck()
	if len(w.problems) > 0 {
		w.err = "fix the fields marked ✗ first"
		return nil
	}
	in := w.Input()
	// Forming writes this node's cluster config and token: recorded before
	// and after, or not done (safety rule 5).
	if w.Audit == nil {
		w.err = "not formed: there is no audit log to record it in"
		return nil
	}
	e, err := w.Audit.Begin(audit.Record{Action: "form", Target: in.ClusterName, Via: w.Via,
		Detail: fmt.Sprintf("interface %s, prefix %s, servers %s, workers %s, seed %s", in.Interface, in.Prefix, in.Servers, in.Workers, in.Seed)})
	if err != nil {
		w.err = "not formed: the audit log cannot record it: " + err.Error()
		return nil
	}
	res, err := w.Submit(in)
	if err != nil {
		if werr := e.End(audit.OutcomeFailed, err); werr != nil {
			err = fmt.Errorf("%w (and the audit log could not record it: %v)", err, werr)
		}
		w.err = err.Error()
		return nil
	}
	e.Rec.Detail += "; wrote " + res.Written
	if werr := e.End(audit.OutcomeDone, nil); werr != nil {
		// Formed all the same: the files are written. Said on screen.
		res.Summary = append(res.Summary, "", "the audit log could not record this: "+werr.Error())
	}
	w.result, w.done = res, true
	return nil
}

// View draws the form, or the result.
func (w *FormWizard) View() string {
	st := w.ctx.Styles
	out := []string{st.Title.Render("sitecon — form a cluster (no controller needed)"), ""}
	// What forming reports and its errors quote files and the device's
	// interfaces: cleaned before they are drawn (safety rule 7).
	clean := ui.Clean
	if w.result != nil {
		for _, l := range w.result.Summary {
			out = append(out, clean(l))
		}
		out = append(out, "", st.OK.Render("wrote "+clean(w.result.Written)), "",
			"Join each other node with its bundle (they carry the cluster token; keep them private).",
			"Line breaks inside a bundle do not matter: sitecon form --join ignores them.")
		if w.result.JoinsFile != "" {
			out = append(out, "Also saved in "+clean(w.result.JoinsFile)+" (readable by root only; each removed once its node joined).")
		}
		out = append(out, "")
		width := w.ctx.Width
		if width < 20 {
			width = 80
		}
		for _, j := range w.result.Joins {
			// Bundles are long and unbroken: wrap them rather than let the
			// edge of the screen cut them.
			out = append(out, ui.Wrap(clean(j), width)...)
		}
		out = append(out, "", st.Muted.Render("any key to leave"))
		return strings.Join(out, "\n")
	}
	shown := map[string]bool{}
	for i, f := range w.fields {
		label := fmt.Sprintf("%-18s", f.label)
		mark := st.OK.Render("✓")
		problems := w.problems[f.key]
		// Node problems show once, under the server list.
		if f.key == FieldNodes && shown[f.key] {
			problems = nil
		}
		shown[f.key] = true
		if len(problems) > 0 {
			mark = st.Bad.Render("✗")
		}
		cursor := "  "
		if i == w.focus {
			cursor = st.Key.Render("> ")
			label = st.Section.Render(label)
		}
		out = append(out, cursor+mark+" "+label+" "+f.input.View())
		out = append(out, "      "+st.Muted.Render(f.hint))
		for _, p := range problems {
			out = append(out, "      "+st.Bad.Render(clean(p)))
		}
	}
	out = append(out, "")
	if w.err != "" {
		out = append(out, st.Bad.Render(clean(w.err)))
	}
	out = append(out, st.Muted.Render("tab/↑/↓ move · → completes · enter on the last field forms · esc quits"))
	return strings.Join(out, "\n")
}

// Guarded runs the wizard on its own (sitecon form --wizard) behind the
// same key guard as the console's prompts (safety rule 5): no key answers
// the form, or leaves its result, before it has been on screen a moment,
// and a burst typed before it was drawn is dropped. Ctrl-C always leaves.
func Guarded(w *FormWizard) tea.Model {
	return &guardedWizard{w: w, guard: ui.NewAnswerGuard(w.ctx)}
}

type guardedWizard struct {
	w     *FormWizard
	guard *ui.AnswerGuard
}

func (g *guardedWizard) Init() tea.Cmd {
	return tea.Batch(g.w.Init(), g.guard.Show(wizardPrompt{g.w, g.w.done}))
}

func (g *guardedWizard) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if k, ok := msg.(tea.KeyMsg); ok && k.String() != "ctrl+c" {
		entry := ui.EntryText
		if g.w.done {
			entry = ui.EntryKeys
		}
		if !g.guard.Admits(k, entry) {
			return g, nil
		}
	}
	_, cmd := g.w.Update(msg)
	return g, tea.Batch(cmd, g.guard.Show(wizardPrompt{g.w, g.w.done}))
}

func (g *guardedWizard) View() string { return g.w.View() }
