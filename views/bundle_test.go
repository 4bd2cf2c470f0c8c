package views

import (
	"context"
	"errors"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
)

// runCmd runs cmd and every command it batches, feeding their messages to
// the app, as bubbletea would.
func runCmd(a *App, cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	switch msg := cmd().(type) {
	case tea.BatchMsg:
		for _, c := range msg {
			runCmd(a, c)
		}
	case nil:
	default:
		_, next := a.Update(msg)
		runCmd(a, next)
	}
}

// b on the overview takes a bundle with the function the command line
// gave, and the footer says where it went; a failure says why. Without
// the function the key is not offered; a read-only console keeps it (a
// bundle changes nothing in the cluster).
func TestOverviewTakesABundle(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		ctx := testContext(80, 24)
		ctx.ReadOnly = readOnly
		a := NewApp(ctx)
		a.Update(FrameMsg(sampleFrame()))
		if reacts(a, keyMsg("b")) {
			t.Fatalf("readonly %v: b acts with no bundle to take", readOnly)
		}
		took := 0
		a.SetBundle(context.Background(), func(context.Context) (string, error) {
			took++
			return "support bundle written: /root/sitecon-bundle-x.tar.gz; 1 part(s) missing", nil
		})
		if !strings.Contains(strings.Join(helpKeyLines(a), "\n"), "b  take a support bundle") {
			t.Errorf("readonly %v: the help does not list b:\n%s", readOnly, strings.Join(helpKeyLines(a), "\n"))
		}
		runCmd(a, press(a, "b"))
		if took != 1 || !strings.Contains(a.View(), "support bundle written: /root/sitecon-bundle-x.tar.gz") {
			t.Errorf("readonly %v: took %d bundle(s); the screen says:\n%s", readOnly, took, a.View())
		}
		a.SetBundle(context.Background(), func(context.Context) (string, error) { return "", errors.New("disk full") })
		runCmd(a, press(a, "b"))
		if !strings.Contains(a.View(), "no support bundle: disk full") {
			t.Errorf("readonly %v: a failed bundle is not said:\n%s", readOnly, a.View())
		}
	}
}
