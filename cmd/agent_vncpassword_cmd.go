package cmd

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/agent/vncbridge"
)

func newAgentVNCPasswordCmd() *cobra.Command {
	var socket string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "vnc-password PORT|APP|VMI",
		Short: "A one-time password for a VM console this node's agent serves (5900+vnc_display)",
		Long: `Ask this node's agent (its local API, --socket, root only) for a
one-time password to a VM console it serves: the consoles of the VM apps
with enable_vnc running on this node, at 127.0.0.1:5900+vnc_display. The
console asks every viewer for a password (VNC Authentication); each one
this prints opens one session, once, within ` + vncbridge.SessionTTL.String() + `. A process
that reaches the port without one is turned away and holds nothing, so
only who may open the agent's socket sees the VM.

The device's remote-console service asks the same socket (POST
` + localapi.PathVNCSession + ` {"console": PORT}) before it connects.`,
		Example: `  sitecon agent vnc-password 5901
  sitecon agent vnc-password hmi --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := localapi.PostJSON[vncbridge.Session](cmd.Context(), socket, localapi.PathVNCSession, vncbridge.SessionRequest{Console: args[0]})
			if err != nil {
				return fmt.Errorf("vnc-password: %w", localapi.URLErrorCause(err))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			what := s.VMI
			if s.App != "" {
				what = s.App + " (" + s.VMI + ")"
			}
			fmt.Fprintf(out, "console of %s at %s\npassword %s (one session, until %s)\n", what, s.Address, s.Password,
				s.Expires.Local().Format(time.TimeOnly))
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", DefaultAgentSocket, "this node's agent socket")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session as JSON (address, password, expires)")
	return cmd
}
