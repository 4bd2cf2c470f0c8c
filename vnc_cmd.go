package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/kube"
)

func newVNCCmd(g *globalFlags) *cobra.Command {
	var port int
	var address string
	cmd := &cobra.Command{
		Use:   "vnc APP",
		Short: "Bridge a local port to a VM app's console (VNC) through the API server",
		Long: `Serve a VM app's console on a local TCP port, for a VNC viewer: each
viewer is bridged to the VM through the API server and KubeVirt (the vnc
subresource). The app must be a VM with enable_vnc in its config, running.
One viewer at a time: a second one is turned away with the reason, and so
is this bridge while another holds the VM's console. Stops on Ctrl-C, and
when the VM stops.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.readOnly {
				// A viewer types into the VM: that is acting on it.
				return errors.New("read-only mode (--readonly or SITECON_READONLY): a VNC viewer types into the VM; vnc not run")
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			snap, err := kube.NewSnapshot(cfg, nil)
			if err != nil {
				return err
			}
			snap.Start(ctx)
			syncCtx, syncCancel := context.WithTimeout(ctx, 15*time.Second)
			err = snap.WaitForSync(syncCtx)
			syncCancel()
			if err != nil {
				return err
			}
			app, err := kube.VNCTargetFor(snap.Status().Apps, args[0])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("listen for viewers: %w", err)
			}
			out := cleanWriter{cmd.OutOrStdout()}
			bridge := &kube.VNCBridge{Config: cfg, Namespace: app.Namespace, VMI: app.Object,
				Events: func(e kube.VNCEvent) { fmt.Fprintln(out, e.String()) }}
			fmt.Fprintf(out, "%s: console of VM %s on %s\npoint a VNC viewer at %s (Ctrl-C to stop)\n",
				app.Name, app.Object, app.Node, ln.Addr())
			stopped := make(chan string, 1)
			go func() {
				what, err := kube.WaitVMIStops(ctx, snap.Clients().KubeVirt, app.Namespace, app.Object)
				if err == nil {
					stopped <- what
					cancel()
				}
			}()
			if err := bridge.Serve(ctx, ln); err != nil {
				return err
			}
			select {
			case what := <-stopped:
				return fmt.Errorf("%s: the console bridge closed", what)
			default:
			}
			fmt.Fprintln(out, "console bridge closed")
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "local port for the viewer (0: any free port, printed)")
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "local address to listen on")
	return cmd
}
