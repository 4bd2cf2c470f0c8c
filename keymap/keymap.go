// Package keymap holds every key binding of the console and its help text.
// Views match keys only through these bindings, never by raw strings.
package keymap

import "github.com/charmbracelet/bubbles/key"

// KeyMap is the console's key bindings.
type KeyMap struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	NextScreen, PrevScreen                  key.Binding
	Screens                                 []key.Binding
	Command, Filter, Sort, Enter, Back      key.Binding
	Help, Quit                              key.Binding
	// ForceQuit leaves from anywhere: a dialog, an input line, the wizard.
	ForceQuit key.Binding
	// Actions, on the nodes and apps screens; disabled (and so gone from
	// the help) in read-only mode.
	Cordon, Uncordon, Drain, Remove, Seed, Migrate, AddNode, VNC key.Binding
	// ReturnHome moves an app away from its designated node back there;
	// ReturnHomeAll walks every app away from home, one at a time.
	ReturnHome, ReturnHomeAll key.Binding
	// Maintenance walks a node through its service (drain, power-off, return, rebuilds, uncordon).
	Maintenance key.Binding
	// Bundle takes a support bundle (the overview). It changes nothing in
	// the cluster, so read-only mode keeps it.
	Bundle key.Binding
	// Rerun runs the doctor again (the doctor screen); it only reads, so
	// read-only mode keeps it.
	Rerun key.Binding
	// Logs opens the logs view of an app or a pod; in that view Follow
	// resumes (or pauses) the autoscroll, Timestamps and Wrap toggle how
	// lines are drawn, Container picks another container of the pod.
	Logs, Follow, Timestamps, Wrap, Container key.Binding
	// Confirm and Cancel answer a dialog.
	Confirm, Cancel key.Binding
	// The formation form: arrows move between fields (letters are typed
	// into them, so k and j are not moves there), right arrow at the end of
	// a field takes the suggestion, ctrl+s forms from any field.
	FieldUp, FieldDown, TakeSuggestion, Submit key.Binding
}

// ScreenNames are the screens in tab order; number keys 1..7 jump to them.
var ScreenNames = []string{"overview", "nodes", "pods", "volumes", "apps", "events", "doctor"}

// Default is the console's key map.
func Default() KeyMap {
	km := KeyMap{
		Up:         key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:       key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:     key.NewBinding(key.WithKeys("pgup", "ctrl+b"), key.WithHelp("pgup", "page up")),
		PageDown:   key.NewBinding(key.WithKeys("pgdown", "ctrl+f"), key.WithHelp("pgdn", "page down")),
		Top:        key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g", "top")),
		Bottom:     key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G", "bottom")),
		NextScreen: key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next screen")),
		PrevScreen: key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous screen")),
		Command:    key.NewBinding(key.WithKeys(":"), key.WithHelp(":", "command (:nodes, :volumes ...)")),
		Filter:     key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Sort:       key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "sort column")),
		Enter:      key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open")),
		Back:       key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "back")),
		Help:       key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:       key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		ForceQuit:  key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "quit from anywhere")),
		// The footer shows these short words; each screen's help says
		// what they do in full.
		Cordon:         key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "cordon")),
		Uncordon:       key.NewBinding(key.WithKeys("u"), key.WithHelp("u", "uncordon")),
		Drain:          key.NewBinding(key.WithKeys("d"), key.WithHelp("d", "drain")),
		Remove:         key.NewBinding(key.WithKeys("X"), key.WithHelp("X", "remove")),
		Seed:           key.NewBinding(key.WithKeys("S"), key.WithHelp("S", "seed")),
		Migrate:        key.NewBinding(key.WithKeys("m"), key.WithHelp("m", "migrate")),
		ReturnHome:     key.NewBinding(key.WithKeys("h"), key.WithHelp("h", "home")),
		ReturnHomeAll:  key.NewBinding(key.WithKeys("H"), key.WithHelp("H", "all home")),
		AddNode:        key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "add node")),
		Logs:           key.NewBinding(key.WithKeys("l"), key.WithHelp("l", "logs")),
		Follow:         key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "follow")),
		Timestamps:     key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "timestamps")),
		Wrap:           key.NewBinding(key.WithKeys("w"), key.WithHelp("w", "wrap")),
		Container:      key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "container")),
		VNC:            key.NewBinding(key.WithKeys("v"), key.WithHelp("v", "vnc")),
		Maintenance:    key.NewBinding(key.WithKeys("M"), key.WithHelp("M", "maintenance")),
		Bundle:         key.NewBinding(key.WithKeys("b"), key.WithHelp("b", "bundle")),
		Rerun:          key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "run again")),
		Confirm:        key.NewBinding(key.WithKeys("y", "enter"), key.WithHelp("y/enter", "confirm")),
		Cancel:         key.NewBinding(key.WithKeys("esc", "n"), key.WithHelp("esc", "cancel")),
		FieldUp:        key.NewBinding(key.WithKeys("up"), key.WithHelp("↑", "previous field")),
		FieldDown:      key.NewBinding(key.WithKeys("down"), key.WithHelp("↓", "next field")),
		TakeSuggestion: key.NewBinding(key.WithKeys("right"), key.WithHelp("→", "take the suggestion")),
		Submit:         key.NewBinding(key.WithKeys("ctrl+s"), key.WithHelp("ctrl+s", "form the cluster")),
	}
	for i, name := range ScreenNames {
		n := string(rune('1' + i))
		km.Screens = append(km.Screens, key.NewBinding(key.WithKeys(n), key.WithHelp(n, name)))
	}
	return km
}

// ReadOnly disables the action bindings: they no longer match a key and
// the help no longer shows them. The screens turn their actions off by
// themselves too (views: an action's section), so a key added to a
// screen's actions and missed here still does nothing read-only.
func (k *KeyMap) ReadOnly() {
	// VNC too: a viewer types into the VM.
	for _, b := range []*key.Binding{&k.Cordon, &k.Uncordon, &k.Drain, &k.Remove, &k.Seed, &k.Migrate, &k.ReturnHome, &k.ReturnHomeAll, &k.AddNode, &k.VNC, &k.Maintenance} {
		b.SetEnabled(false)
	}
}
