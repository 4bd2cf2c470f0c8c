package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
)

func newVNCCmd(g *globalFlags) *cobra.Command {
	var port int
	var address string
	var expose bool
	cmd := &cobra.Command{
		Use:   "vnc APP",
		Short: "Bridge a local port to a VM app's console (VNC) through the API server",
		Long: `Serve a VM app's console on a local TCP port, for a VNC viewer: each
viewer is bridged to the VM through the API server and KubeVirt (the vnc
subresource). The app must be a VM with enable_vnc in its config, running.
One viewer at a time: a second one is turned away with the reason, and so
is this bridge while another holds the VM's console. Stops on Ctrl-C, and
when the VM stops.

The console has no password of its own: whoever reaches the port gets the
VM's screen and keyboard. It listens on loopback; any other --address needs
--expose, and says what it exposes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.readOnly {
				// A viewer types into the VM: that is acting on it.
				return errors.New("read-only mode (--readonly or SITECON_READONLY): a VNC viewer types into the VM; vnc not run")
			}
			if !loopbackAddress(address) && !expose {
				return fmt.Errorf("--address %s would serve the VM's screen and keyboard, with no password, to anyone who reaches this machine there; give --expose as well to do so, or leave --address at 127.0.0.1", address)
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
			app, err := streams.VNCTargetFor(snap.Status().Apps, args[0])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("listen for viewers: %w", err)
			}
			out := cleanWriter{cmd.OutOrStdout()}
			bridge := &streams.VNCBridge{Config: cfg, Namespace: app.Namespace, VMI: app.Object,
				Events: func(e streams.VNCEvent) { fmt.Fprintln(out, e.String()) }}
			fmt.Fprintf(out, "%s: console of VM %s on %s\npoint a VNC viewer at %s (Ctrl-C to stop)\n",
				app.Name, app.Object, app.Node, ln.Addr())
			if !loopbackAddress(address) {
				fmt.Fprintf(out, "EXPOSED: anyone who reaches %s gets this VM's screen and keyboard, with no password\n", ln.Addr())
			}
			stopped := make(chan string, 1)
			go func() {
				what, err := streams.WaitVMIStops(ctx, snap.Clients().KubeVirt, app.Namespace, app.Object)
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
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "local address to listen on (off loopback only with --expose)")
	cmd.Flags().BoolVar(&expose, "expose", false, "let --address be off loopback: the VM's screen and keyboard, with no password, to whoever reaches it")
	return cmd
}

// loopbackAddress: address is this machine's own, reachable from it alone.
func loopbackAddress(address string) bool {
	if address == "localhost" {
		return true
	}
	ip := net.ParseIP(address)
	return ip != nil && ip.IsLoopback()
}
