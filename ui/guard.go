package ui

import (
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// AnswerDelay is how long a prompt (a dialog's question, its result, a
// form) must have been on screen before a key may answer it. Keys that come
// sooner were on their way before anyone could read the prompt: the rest of
// a scripted or pasted burst, keys queued on a slow SSH link, fast typing
// meant for the screen underneath.
const AnswerDelay = 300 * time.Millisecond

// Entry is what a prompt takes from the keyboard.
type Entry int

const (
	// EntryKeys is single keys: y/n, arrows, enter, esc. Several runes in
	// one message are a burst (keys typed faster than they were read, or a
	// script), never an answer.
	EntryKeys Entry = iota
	// EntryTyped is text typed to confirm, such as a node's name: several
	// runes at once are still typing (a slow link delivers them together),
	// but pasted text is not typed.
	EntryTyped
	// EntryText is free text, such as a form's field: typed or pasted.
	// Submitting it still takes a key of its own.
	EntryText
)

// PromptArmedMsg arrives once the prompt on screen takes keys, so it is
// drawn again with the keys that answer it.
type PromptArmedMsg struct{}

// AnswerGuard keeps keys that were not meant for a prompt from answering
// it (docs/DESIGN.md, "A human confirms": a dialog is confirmed only by a key that
// arrived after it was drawn). The root model tells it, after every
// update, which prompt is on screen; it admits a key only when that prompt
// has been shown for AnswerDelay, the key is no paste (unless the prompt
// takes free text) and, for single-key prompts, one key.
type AnswerGuard struct {
	ctx *Context
	// shown is the prompt on screen (nil: none), since when it is.
	shown any
	since time.Time
}

// NewAnswerGuard makes a guard timed by ctx's clock, so tests can move
// time instead of waiting for it.
func NewAnswerGuard(ctx *Context) *AnswerGuard { return &AnswerGuard{ctx: ctx} }

// Show records the prompt on screen after an update: prompt is any
// comparable value that changes whenever the prompt does (a new dialog, a
// dialog's new state), nil for none. A changed prompt is drawn right after
// this update, so keys are held from now; the command returned redraws it
// once they are taken.
func (g *AnswerGuard) Show(prompt any) tea.Cmd {
	if prompt == g.shown {
		return nil
	}
	g.shown, g.since = prompt, g.ctx.Now()
	if prompt == nil {
		return nil
	}
	return tea.Tick(AnswerDelay, func(time.Time) tea.Msg { return PromptArmedMsg{} })
}

// Armed reports whether the prompt on screen has been there long enough
// to be answered; the prompt shows its keys only then.
func (g *AnswerGuard) Armed() bool {
	return g.shown != nil && g.ctx.Now().Sub(g.since) >= AnswerDelay
}

// Admits reports whether msg may go to the prompt on screen, which takes
// entry. A key that may not is dropped, not kept for later: it was not an
// answer to this prompt.
func (g *AnswerGuard) Admits(msg tea.KeyMsg, entry Entry) bool {
	why := ""
	switch {
	case !g.Armed():
		why = "arrived before the prompt could be read"
	case msg.Paste && entry != EntryText:
		why = "pasted, not typed"
	case msg.Type == tea.KeyRunes && len(msg.Runes) > 1 && entry == EntryKeys:
		why = "several keys at once answer nothing"
	default:
		return true
	}
	g.ctx.Log.Debug("key dropped", "key", msg.String(), "why", why)
	return false
}
