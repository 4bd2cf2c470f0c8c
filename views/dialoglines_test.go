package views

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/sitecon/sitecon/ui"
)

// A dialog draws a line by what it is, not by what its text starts with:
// a message from the cluster that begins "REFUSED" or "WARNING" is drawn
// plain, a refusal in the refusal colour.
func TestDialogLinesDrawnByKind(t *testing.T) {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	ctx := ui.NewContext(r, func() time.Time { return now }, nil)
	ctx.Width, ctx.Height = 100, 24
	d := &dialog{ctx: ctx, title: "test"}
	d.lines = append(textLines("REFUSED by nobody: a message from the cluster", "WARNING: also just text"),
		dialogLine{lineRefused, "REFUSED  a real refusal"})
	v := d.view(100, 20, true)
	bad := ctx.Styles.Bad.Render("REFUSED  a real refusal")
	if !strings.Contains(v, bad) {
		t.Errorf("the refusal is not drawn in the refusal colour:\n%q", v)
	}
	for _, plain := range []string{"REFUSED by nobody: a message from the cluster", "WARNING: also just text"} {
		if strings.Contains(v, ctx.Styles.Bad.Render(plain)) || strings.Contains(v, ctx.Styles.Warn.Render(plain)) {
			t.Errorf("a plain line was coloured by its first word: %q", plain)
		}
		if !strings.Contains(v, plain) {
			t.Errorf("the plain line is missing: %q", plain)
		}
	}
}
