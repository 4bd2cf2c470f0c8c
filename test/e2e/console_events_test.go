package e2e

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/ui"
	"github.com/sitecon/sitecon/views"
)

// kubectlEvent is a Warning Event as `kubectl create -f` makes it from a
// hand-written manifest: no firstTimestamp, lastTimestamp or eventTime, only
// what the API server fills in (metadata.creationTimestamp).
func kubectlEvent(name, reason string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: kube.AppNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "by-hand", Namespace: kube.AppNamespace},
		Reason:         reason,
		Type:           corev1.EventTypeWarning,
		Message:        "created by hand while the console runs",
	}
}

// Events created just before the console starts and while it runs reach the
// events screen through the real informer, in time order with the site's own.
// A hand-made Event has none of firstTimestamp, lastTimestamp or eventTime:
// its time is its creationTimestamp.
func TestConsoleShowsNewEvents(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	stamp := time.Now().UnixNano()
	create := func(name, reason string) {
		t.Helper()
		if _, err := cs.CoreV1().Events(kube.AppNamespace).Create(t.Context(), kubectlEvent(name, reason), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Events(kube.AppNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	create(fmt.Sprintf("before-%d", stamp), "ByHandBefore")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	snap, err := kube.NewSnapshot(site.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(ctx)
	if err := snap.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	create(fmt.Sprintf("while-%d", stamp), "ByHandWhile")

	// Wait until the informer's cache holds both, so what follows tests the
	// console's derivation, not the watch's latency.
	until(t, 20*time.Second, "the snapshot's informer holds both events", func() ([]string, bool) {
		var reasons []string
		for _, e := range snap.Data().Events {
			reasons = append(reasons, e.Reason)
		}
		return reasons, slices.Contains(reasons, "ByHandBefore") && slices.Contains(reasons, "ByHandWhile")
	}, func(reasons []string) string {
		mine := slices.DeleteFunc(slices.Clone(reasons), func(r string) bool { return !strings.HasPrefix(r, "ByHand") })
		return fmt.Sprintf("%d events held, of them by hand: %v", len(reasons), mine)
	})

	f := views.BuildFrame(snap, nil, "", time.Now())
	at := map[string]int{}
	for i, e := range f.Events {
		if strings.HasPrefix(e.Reason, "ByHand") {
			at[e.Reason] = i
		}
	}
	if len(at) != 2 {
		t.Fatalf("the frame's %d events lack the ones created by hand (found %v)", len(f.Events), at)
	}
	// Newest first: nothing above an event is older than it (the site may
	// well log its own events in the same second).
	for reason, i := range at {
		for _, above := range f.Events[:i] {
			if above.Time.Before(f.Events[i].Time) {
				t.Errorf("%s (%v) is below an older event %s (%v)", reason, f.Events[i].Time, above.Reason, above.Time)
			}
		}
	}

	uiCtx := ui.NewContext(lipgloss.NewRenderer(io.Discard), time.Now, nil)
	uiCtx.Width, uiCtx.Height = 120, 30
	app := views.NewApp(uiCtx)
	app.Update(views.FrameMsg(f))
	// The site logs dozens of events in the seconds around these: the
	// screen's filter finds them wherever they sort.
	for _, k := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("6")}, {Type: tea.KeyRunes, Runes: []rune("/")},
		{Type: tea.KeyRunes, Runes: []rune("ByHand")}, {Type: tea.KeyEnter}} {
		app.Update(k)
	}
	screen := app.View()
	for _, reason := range []string{"ByHandBefore", "ByHandWhile"} {
		if !strings.Contains(screen, reason) {
			t.Errorf("the events screen lacks %s:\n%s", reason, screen)
		}
	}
}

// The events screen through the real console: with an old record in the
// audit log (the first row the screen had), a Warning Event created while
// the console runs is on top of the screen when the technician presses 6,
// without filtering for it.
func TestConsoleNewEventOnTopPastOldAuditRecord(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Write(audit.Record{Time: time.Now().Add(-3 * time.Hour), Action: "drain", Target: "node-b", Outcome: audit.OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log", "--audit-log", auditPath)
	c.waitScreen(30*time.Second, "the console's overview", func(s string) bool { return strings.Contains(s, "Seed server") })
	c.keys("6")
	// The record is hours old: it sorts last, below the site's events.
	c.waitScreen(30*time.Second, "the events screen", func(s string) bool { return strings.Contains(s, "REASON") })
	name := fmt.Sprintf("on-top-%d", time.Now().UnixNano())
	if _, err := cs.CoreV1().Events(kube.AppNamespace).Create(t.Context(), kubectlEvent(name, "ByHandOnTop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Events(kube.AppNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	c.waitScreen(30*time.Second, "the new event on the events screen", func(s string) bool { return strings.Contains(s, "ByHandOnTop") })
}
