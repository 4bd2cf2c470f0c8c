package views

import (
	"context"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// The support bundle from the console: b on the overview takes what
// `sitecon bundle` takes (the command line gives the function), in the
// background, and the footer says where it went and what is missing. It
// needs no live cluster (a bundle is most needed when the API is down)
// and changes nothing in it, so read-only consoles have it too.

// bundleTaker takes bundles, one at a time; without take (SetBundle) the
// key is not offered.
type bundleTaker struct {
	ctx     context.Context
	take    func(context.Context) (string, error)
	running bool
}

// bundleMsg is a line to say about the bundle; done: it was taken (or
// failed, with err).
type bundleMsg struct {
	line string
	err  error
	done bool
}

// SetBundle lets the console take support bundles with take, under ctx
// (the console's: a bundle under way stops with it).
func (a *App) SetBundle(ctx context.Context, take func(context.Context) (string, error)) {
	a.bundle.ctx, a.bundle.take = ctx, take
}

// binding is the overview's b.
func (b *bundleTaker) binding(k key.Binding) binding {
	say := func(line string) tea.Cmd { return func() tea.Msg { return bundleMsg{line: line} } }
	return binding{key: k, long: "take a support bundle: what sitecon bundle takes, written to the current directory (reads only)",
		// The screen's own key, not an action: it changes nothing, so a
		// read-only console (whose actions are off) keeps it.
		section: sectionScreen, footer: footerAction,
		applies: func() bool { return b.take != nil },
		run: func(tea.KeyMsg) tea.Cmd {
			if b.running {
				return say("a support bundle is being taken already")
			}
			b.running = true
			ctx, take := b.ctx, b.take
			return tea.Batch(say("taking a support bundle (reads only)..."), func() tea.Msg {
				line, err := take(ctx)
				return bundleMsg{line: line, err: err, done: true}
			})
		}}
}

// onBundle says where the bundle went, or why it was not written.
func (a *App) onBundle(msg bundleMsg) {
	if msg.done {
		a.bundle.running = false
	}
	if msg.err != nil {
		a.message = "no support bundle: " + msg.err.Error()
		return
	}
	a.message = msg.line
}
