package views

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// docs/DESIGN.md, "Nothing raw reaches the terminal": strings from the cluster or from files are
// stripped of control characters before they are drawn or printed. These
// are the sequences a hostile Event or object name would carry.
const (
	setTitle  = "\x1b]0;x\x07"                    // OSC 0: the window title
	clipboard = "\x1b]52;c;cm0gLXJmIH4K\x07"      // OSC 52: writes the clipboard
	clearHome = "\x1b[2J\x1b[H"                   // CSI: clear the screen, cursor home
	c1CSI     = "\u009b31m"                       // the 8-bit CSI, as UTF-8
	stTitle   = "\x1b]2;forged\x1b\\"             // OSC ended by ST
	controls  = "a\x08b\x7fc\rd\ne\tf\x00g\u0085" // backspace, DEL, CR, LF, tab, NUL, NEL
)

var hostile = setTitle + "evil" + clipboard + clearHome + c1CSI + stTitle + controls

// rawIn reports what of a control sequence reached out: any C0 or C1
// control byte other than a line break, or a sequence's payload.
func rawIn(out string) []string {
	var found []string
	for _, r := range out {
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) {
			found = append(found, strings.ToValidUTF8(string(r), "?"))
		}
	}
	for _, payload := range []string{"52;c;", "]0;", "2;forged", "[2J", "31m"} {
		if strings.Contains(out, payload) {
			found = append(found, payload)
		}
	}
	return found
}

// The console draws no control character from the cluster: an Event's
// message on the events screen, names in the tables and the overview, a
// refusal in a dialog. The test renderer draws no colour, so any escape
// byte in the frame came from the data.
func TestConsoleDrawsNoRawText(t *testing.T) {
	f := sampleFrame()
	f.Events = append(f.Events, kube.EventRow{Time: now, Type: "Warning", Reason: "Hostile" + setTitle, Object: "Pod/x" + clipboard, Namespace: "default", Message: hostile})
	f.Status.Cluster.Name = "site1" + setTitle
	f.Status.Nodes[0].Name = "node-a" + clipboard
	f.Status.Apps[1].Phase = "Pending" + clearHome
	f.Status.Volumes[0].PVC = "plc-data" + c1CSI
	f.Status.Namespaces[0].Name = "kube-system" + stTitle
	f.Agent.LastError = "boom" + hostile
	a := NewApp(testContext(200, 40))
	a.Update(FrameMsg(f))
	for _, screen := range []string{"1", "2", "3", "4", "5", "6"} {
		a.Update(runes(screen))
		v := a.View()
		if raw := rawIn(v); len(raw) > 0 {
			t.Errorf("screen %s draws %q:\n%s", a.Screen(), raw, v)
		}
	}
	a.Update(runes("6"))
	if v := a.View(); !strings.Contains(v, "evil") || !strings.Contains(v, "evilabc d e fg") {
		t.Errorf("the message's text should stay, its controls gone (tab and line breaks as spaces):\n%s", v)
	}

	p := refusedDrain()
	p.Refusals = append(p.Refusals, "volume"+hostile)
	p.Evict = append(p.Evict, "default/pod"+clipboard)
	d := drainDialogApp(t, testContext(200, 40), p)
	d.dialog.progress = append(d.dialog.progress, "evicting"+setTitle)
	if raw := rawIn(d.View()); len(raw) > 0 {
		t.Errorf("the drain dialog draws %q:\n%s", raw, d.View())
	}
	d.dialog = nil
	d.message = "cannot read /persist/x" + clipboard
	if raw := rawIn(d.View()); len(raw) > 0 {
		t.Errorf("the message line draws %q:\n%s", raw, d.View())
	}
}

// sitecon status prints no control character from the cluster in its
// table; JSON carries the text whole, escaped, YAML cleaned, and neither a
// raw control byte.
func TestWriteStatusPrintsNoRawText(t *testing.T) {
	st := sample()
	st.Cluster.Name = "site1" + setTitle
	st.Nodes[0].Name = "node-a" + clipboard
	st.Apps[0].Name = "hmi" + hostile
	st.Volumes[0].Robustness = "degraded" + c1CSI
	st.API = kube.Health{Since: now, LastError: "refused" + clearHome}
	r := StatusReport{ClusterStatus: st, Agent: &AgentSummary{Running: true, Phase: "joined" + stTitle, LastError: "x" + controls}}
	var buf bytes.Buffer
	if err := WriteStatus(&buf, r, now, FormatTable); err != nil {
		t.Fatal(err)
	}
	if raw := rawIn(buf.String()); len(raw) > 0 {
		t.Errorf("the status table prints %q:\n%s", raw, buf.String())
	}
	for _, f := range []Format{FormatJSON, FormatYAML} {
		buf.Reset()
		if err := WriteStatus(&buf, r, now, f); err != nil {
			t.Fatal(err)
		}
		for _, r := range buf.String() {
			if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) {
				t.Errorf("%s output carries the raw control %U:\n%q", f, r, buf.String())
				break
			}
		}
		data := buf.Bytes()
		if f == FormatYAML {
			var err error
			if data, err = yaml.YAMLToJSON(data); err != nil {
				t.Fatal(err)
			}
		}
		var got StatusReport
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		// JSON escapes what it carries; YAML cannot hold control
		// characters at all, so it carries the name cleaned.
		want := map[Format]string{FormatJSON: "hmi" + hostile, FormatYAML: "hmievilabc d e fg"}[f]
		if got.Apps[0].Name != want {
			t.Errorf("%s: app name %q, want %q", f, got.Apps[0].Name, want)
		}
	}
}

// BenchmarkCleanFrame is what cleaning costs a large, clean frame (1,000
// pods): a scan, no copy.
func BenchmarkCleanFrame(b *testing.B) {
	f := sampleFrame()
	for i := range 1000 {
		f.Pods = append(f.Pods, kube.PodRow{Namespace: kube.Namespaces[i%5], Name: fmt.Sprintf("pod-%04d", i), Phase: "Running", Ready: "1/1", Node: "node-a", Created: now, Healthy: true})
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = ui.CleanStrings(f)
	}
}

// The frames the console's feed builds are cleaned as they are built,
// their rows once for as long as they do not change: a hostile volume,
// pod, Event or node name reaches no screen, in the frame that first
// carries it nor in the frames after it that reuse its rows.
func TestBuiltFramesDrawNoRawText(t *testing.T) {
	d := siteDataOf(0, 20)
	d.Volumes[0] = d.Volumes[0].DeepCopy()
	d.Volumes[0].Status.KubernetesStatus.PVCName = "plc-data" + c1CSI
	d.Pods[0] = d.Pods[0].DeepCopy()
	d.Pods[0].Name = "pod" + clipboard
	d.Events[0] = d.Events[0].DeepCopy()
	d.Events[0].Message = hostile
	d.Nodes[0] = d.Nodes[0].DeepCopy()
	d.Nodes[0].Name = "node-a" + setTitle
	var frames frameBuilder
	a := NewApp(testContext(200, 40))
	for read := range 3 {
		if read > 0 {
			// Another pod changed, to a hostile name: its row is made
			// again, the others' kept; the event rows are the last
			// read's.
			d.Pods = slices.Clone(d.Pods)
			p := d.Pods[len(d.Pods)-1].DeepCopy()
			p.Status.Phase = corev1.PodPending
			p.Name = fmt.Sprintf("late-%d%s", read, clipboard)
			d.Pods[len(d.Pods)-1] = p
		}
		if read == 2 {
			// An event changed, to another hostile message: its row is
			// made again.
			d.Events = slices.Clone(d.Events)
			e := d.Events[len(d.Events)-1].DeepCopy()
			e.Message = "late" + hostile
			d.Events[len(d.Events)-1] = e
			// Another volume changed, to a hostile claim: its status is
			// derived again, the others' kept.
			d.Volumes = slices.Clone(d.Volumes)
			v := d.Volumes[len(d.Volumes)-1].DeepCopy()
			v.Status.KubernetesStatus.PVCName = "late" + c1CSI
			d.Volumes[len(d.Volumes)-1] = v
		}
		f := frames.build(d, true, nil, "", now)
		if !f.cleaned {
			t.Fatal("a built frame is not marked cleaned: the console would clean it whole again")
		}
		// The rows themselves, drawn or not (a namespace's pods are drawn
		// only once it is opened).
		for what, rows := range map[string]any{"pod": f.Pods, "event": f.Events, "volume": f.Status.Volumes} {
			if raw := rawIn(fmt.Sprintf("%+v", rows)); len(raw) > 0 {
				t.Fatalf("read %d: the frame's %s rows hold %q", read, what, raw)
			}
		}
		a.Update(FrameMsg(f))
		for _, screen := range []string{"1", "2", "3", "4", "5", "6"} {
			a.Update(runes(screen))
			if raw := rawIn(a.View()); len(raw) > 0 {
				t.Fatalf("read %d: screen %s draws %q:\n%s", read, a.Screen(), raw, a.View())
			}
		}
	}
}
