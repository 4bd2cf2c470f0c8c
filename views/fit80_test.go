package views

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/kube"
)

// siteAt80 is a site as a device's console shows it: nodes named for the
// press lines they stand by, apps named as the plant names them, one app
// failed over with its old pod still terminating on the lost node, and
// volumes with three replicas each.
func siteAt80() Frame {
	f := sampleFrame()
	f.Status.Apps = []kube.AppStatus{
		{Name: "plc-gateway-modbus", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, DesignatedNode: "press-line-a", Node: "press-line-a",
			Phase: "Running", Ready: true, Object: "plc-gateway-modbus-7d9f8"},
		{Name: "historian-database", Kind: kube.AppKindVM, Mode: kube.AppModeAuto, DesignatedNode: "press-line-b", Node: "press-line-c",
			Phase: "Running", Ready: true, Object: "historian-database", VNCPort: 5902,
			LastMove:    &kube.AppMove{At: now.Add(-75 * time.Second), From: "press-line-b", To: "press-line-c"},
			Terminating: []kube.AppObject{{Object: "virt-launcher-historian-database-x2kq9", Node: "press-line-b"}}},
		{Name: "operator-hmi-panel", Kind: kube.AppKindVM, Mode: kube.AppModePinned, DesignatedNode: "press-line-b", Node: "press-line-b",
			Phase: "Scheduled", Object: "operator-hmi-panel"},
	}
	replicas := func(states ...string) []kube.ReplicaStatus {
		var rs []kube.ReplicaStatus
		for i, s := range states {
			r := kube.ReplicaStatus{Node: "press-line-" + string(rune('a'+i)), State: s}
			if s == kube.ReplicaRebuilding {
				r.Progress = 42
			}
			rs = append(rs, r)
		}
		return rs
	}
	f.Status.Volumes = []kube.VolumeStatus{
		{Name: "pvc-3f2a9c1e-historian", PVC: "historian-db-data", State: "attached", Robustness: kube.RobustnessDegraded, Since: now.Add(-70 * time.Second),
			SinceExact: true, Size: 40 << 30, ActualSize: 12 << 30, Node: "press-line-c", WantReplicas: 3,
			Replicas: replicas(kube.ReplicaHealthy, kube.ReplicaFailed, kube.ReplicaRebuilding)},
		{Name: "pvc-77b1d0aa-plc", PVC: "plc-gateway-state", State: "attached", Robustness: kube.RobustnessHealthy, Since: now.Add(-3 * time.Hour),
			Size: 2 << 30, ActualSize: 1 << 29, Node: "press-line-a", WantReplicas: 3,
			Replicas: replicas(kube.ReplicaHealthy, kube.ReplicaHealthy, kube.ReplicaHealthy)},
	}
	return f
}

// at80 opens screen (its number key) on siteAt80 in the device console's
// 80x24, after keys, and checks that no line runs past the screen.
func at80(t *testing.T, screen string, keys ...string) string {
	t.Helper()
	a := NewApp(testContext(80, 24))
	a.Update(FrameMsg(siteAt80()))
	press(a, append([]string{screen}, keys...)...)
	v := a.View()
	lines := strings.Split(v, "\n")
	if len(lines) > 24 {
		t.Errorf("%d lines on a 24-line console:\n%s", len(lines), v)
	}
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("a line %d cells wide on an 80-column console: %q", w, l)
		}
	}
	return v
}

// At 80x24 the apps screen keeps on each row what the technician acts on:
// the app's whole name, where it runs and its state. The note that
// explains a failover (the old pod still going on the lost node) is read
// in full for the row under the cursor.
func TestAppsFitAt80(t *testing.T) {
	v := at80(t, "5", "down") // the cursor on historian-database
	for _, app := range siteAt80().Status.Apps {
		row := lineOf(v, app.Name)
		if row == "" {
			t.Errorf("%s's whole name is not on the screen:\n%s", app.Name, v)
			continue
		}
		for _, want := range []string{app.Node, app.Phase} {
			if !strings.Contains(row, want) {
				t.Errorf("%s's row does not show %q:\n%s", app.Name, want, row)
			}
		}
	}
	if note := "old VMI terminating on press-line-b"; !strings.Contains(v, note) {
		t.Errorf("the failover's note %q is not on the screen:\n%s", note, v)
	}
}

// At 80x24 the volumes screen keeps each volume's name, robustness and
// every replica, node and state, whole: the replica in trouble is what
// the technician looks for.
func TestVolumesFitAt80(t *testing.T) {
	v := at80(t, "4")
	for _, vol := range siteAt80().Status.Volumes {
		row := lineOf(v, vol.PVC)
		if row == "" {
			t.Errorf("%s's whole name is not on the screen:\n%s", vol.PVC, v)
			continue
		}
		if !strings.Contains(row, vol.Robustness) {
			t.Errorf("%s's row does not show its robustness %q:\n%s", vol.PVC, vol.Robustness, row)
		}
		for _, r := range vol.Replicas {
			want := r.Node + replicaMark(r.State)
			if !strings.Contains(row, want) {
				t.Errorf("%s's row does not show the replica %q:\n%s", vol.PVC, want, row)
			}
		}
	}
	if row := lineOf(v, "historian-db-data"); !strings.Contains(row, "press-line-c↻42%") {
		t.Errorf("the rebuild's progress is cut:\n%s", row)
	}
}

// At 80x24 the logs view of a VM app keeps its pod and container, the
// disconnection with its reason, and lines cut or wrapped to the width,
// timestamps on; nothing runs past the screen.
func TestLogsFitAt80(t *testing.T) {
	target := LogTarget{Namespace: "eve-kube-app", Pod: "virt-launcher-historian-database-x2kq9", Containers: []string{"compute", "guest-console-log"}, Container: "guest-console-log"}
	src := newPipeSource(target)
	a := NewApp(testContext(80, 24))
	a.SetLogSource(t.Context(), src.source())
	a.logsFrame, a.logsRetry = 0, time.Hour
	l := newLoop(t, a)
	l.send(FrameMsg(siteAt80()))
	l.keys("5", "down", "l")
	t.Cleanup(a.closeLogs)
	body := l.body(src)
	writeLines(t, body, 0, 40, func(i int) string {
		return fmt.Sprintf("[%6d.%06d] historian: checkpoint %d of the archive written, %s", i, i, i, strings.Repeat("0123456789", 8))
	})
	l.screenHas("checkpoint 39")
	body.CloseWithError(errors.New("unexpected EOF reading from the kubelet at press-line-c:10250"))
	l.screenHas("DISCONNECTED")
	for _, keys := range [][]string{nil, {"t"}, {"w"}, {"up", "up"}, {"c"}, {"esc", "?"}} {
		l.keys(keys...)
		v := l.a.View()
		lines := strings.Split(v, "\n")
		if len(lines) > 24 {
			t.Errorf("after %v: %d lines on a 24-line console:\n%s", keys, len(lines), v)
		}
		for _, line := range lines {
			if w := ansi.StringWidth(line); w > 80 {
				t.Errorf("after %v: a line %d cells wide: %q", keys, w, line)
			}
		}
		if keys == nil {
			for _, want := range []string{"DISCONNECTED: unexpected EOF reading from the kubelet at press-line-c:10250", "virt-launcher-historian-database-x2kq9/guest-console-log"} {
				if !strings.Contains(v, want) {
					t.Errorf("%q is not on the screen:\n%s", want, v)
				}
			}
		}
	}
}
