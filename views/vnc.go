package views

import (
	"context"
	"errors"
	"net"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/ui"
)

// The VM console (v on the apps screen): the selected VM's VNC bridged to
// a free port of this machine's loopback (kube.VNCBridge, as `sitecon vnc`
// does) for as long as the dialog is open; the dialog says where to point
// a viewer and what the viewers do. It changes nothing in the cluster, so
// it has no audit record; esc closes the bridge.

// openVNC starts the selected app's console bridge, or says why not.
func (a *App) openVNC(rowID string) tea.Cmd {
	var app kube.AppStatus
	for _, x := range a.frame.Status.Apps {
		if x.Namespace+"/"+x.Object == rowID {
			app = x
		}
	}
	d := a.openDialog("VNC console of "+app.Name, nil)
	if _, err := streams.VNCTargetFor([]kube.AppStatus{app}, app.Name); err != nil {
		d.state, d.failed = dialogDone, true
		d.lines = refusedLines(err.Error())
		d.result = "no console bridge opened"
		return nil
	}
	snap := a.actions.Snap
	d.lines = textLines("VM " + app.Object + " on " + app.Node)
	d.state = dialogRunning
	a.taskSeq++
	var cmd tea.Cmd
	d.task, cmd = ui.StartTask(a.taskSeq, func(ctx context.Context, progress func(string)) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		progress("point a VNC viewer at " + ln.Addr().String())
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopped := make(chan string, 1)
		go func() {
			if what, err := streams.WaitVMIStops(ctx, snap.Clients().KubeVirt, app.Namespace, app.Object); err == nil {
				stopped <- what
				cancel()
			}
		}()
		bridge := &streams.VNCBridge{Config: snap.Clients().Config, Namespace: app.Namespace, VMI: app.Object,
			Events: func(e streams.VNCEvent) { progress(e.String()) }}
		if err := bridge.Serve(ctx, ln); err != nil {
			return err
		}
		select {
		case what := <-stopped:
			return errors.New(what + ": the console bridge closed")
		default:
		}
		return nil
	})
	return cmd
}
