package cmd

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent/drainrequest"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/ui"
)

func newAgentDrainRequestCmd() *cobra.Command {
	var socket, reason, requester string
	var wait, status, cancel, force bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "drain-request [--reason R] [--wait] | --cancel [--wait] | --status",
		Short: "Ask this node's agent to drain the node, as an on-device service does before a reboot",
		Long: `Ask this node's agent (its local API, --socket, root only) to drain the
node, as EVE's base OS update, reboot and shutdown do: the agent runs the
preflight sitecon drain runs, cordons the node and evicts its pods. A
preflight that refuses (the node holds the last healthy replica of a
volume, etcd would lose quorum) holds the request: the agent tries again
(its --drain-attempts, --drain-retry-interval) and says why. Once the
node has been down and is Ready again, the agent uncordons it, unless it
was cordoned before the request (by hand): that stays.

The states: not requested, requested, starting, cordoned, failed cordon,
drain retrying, failed drain, complete. --wait waits until complete (exit
0) or failed (exit 1); --status only reads where the request stands.

--cancel calls the request off (the update aborted, the reboot called
off): the agent stops evicting, takes back its own cordon (a node cordoned
by hand stays cordoned), and forgets the request; what it had evicted
stays where it went. --wait then waits until that is done. A cancel with
no request says so and changes nothing. Only the requester cancels
(--requester as it asked); another caller needs --force, since the
requester may be about to reboot on a complete drain.
Each attempt and each cancel is in the agent's audit log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if status && cancel {
				return errors.New("--status and --cancel: one or the other")
			}
			var st drainrequest.Status
			var err error
			switch {
			case status:
				st, err = localapi.Get[drainrequest.Status](ctx, socket, localapi.PathDrain)
			case cancel:
				st, err = localapi.PostJSON[drainrequest.Status](ctx, socket, localapi.PathDrainCancel, drainrequest.Cancel{Requester: requester, Force: force})
				if err != nil && st.State == drainrequest.NotRequested && strings.Contains(err.Error(), "404") {
					fmt.Fprintln(out, "drain request: "+drainrequest.ErrNothingToCancel.Error())
					return nil
				}
			default:
				st, err = localapi.PostJSON[drainrequest.Status](ctx, socket, localapi.PathDrain, drainrequest.Request{Requester: requester, Reason: reason})
			}
			if err != nil && st.State == "" {
				return fmt.Errorf("drain request: %w", localapi.URLErrorCause(err))
			}
			if err != nil {
				// Busy: another request runs; its status is said.
				printDrainStatus(out, st)
				return fmt.Errorf("drain request: %w", err)
			}
			printDrainStatus(out, st)
			if !wait {
				return nil
			}
			deadline := time.Now().Add(timeout)
			last := st.State
			over := func(st drainrequest.Status) bool {
				if cancel {
					return st.State == drainrequest.NotRequested
				}
				return st.State.Final()
			}
			for !over(st) {
				if timeout > 0 && time.Now().After(deadline) {
					return fmt.Errorf("drain request: still %s after %s", st.State, timeout)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(500 * time.Millisecond):
				}
				if st, err = localapi.Get[drainrequest.Status](ctx, socket, localapi.PathDrain); err != nil {
					return fmt.Errorf("drain request: %w", localapi.URLErrorCause(err))
				}
				if st.State != last {
					printDrainStatus(out, st)
					last = st.State
				}
			}
			if !cancel && st.State != drainrequest.Complete {
				return errors.New("drain request " + string(st.State))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", DefaultAgentSocket, "this node's agent socket")
	cmd.Flags().StringVar(&reason, "reason", "", "why the node is drained (published with the request)")
	cmd.Flags().StringVar(&requester, "requester", audit.CurrentUser()+" (sitecon agent drain-request)", "who asks")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the drain is complete or has failed")
	cmd.Flags().BoolVar(&status, "status", false, "only say where the drain request stands")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "call the drain request off: the agent takes back its own cordon")
	cmd.Flags().BoolVar(&force, "force", false, "with --cancel: call off a request another requester made (it may be about to reboot on it)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up waiting after this long (0: no limit)")
	return cmd
}

// printDrainStatus says where a drain request stands, each string from
// the agent cleaned for the terminal.
func printDrainStatus(w io.Writer, st drainrequest.Status) {
	line := "drain request: " + ui.Clean(string(st.State))
	if st.Requester != "" {
		line += " (requested by " + ui.Clean(st.Requester)
		if st.Reason != "" {
			line += ": " + ui.Clean(st.Reason)
		}
		line += ")"
	}
	if st.CancelledBy != "" {
		line += ", cancelled by " + ui.Clean(st.CancelledBy) + ": taking back the agent's cordon"
	}
	if st.Attempt > 0 && st.State != drainrequest.Complete {
		line += fmt.Sprintf(", attempt %d of %d", st.Attempt, st.Attempts)
	}
	if !st.NextAttempt.IsZero() && st.State == drainrequest.Retrying {
		line += ", next at " + st.NextAttempt.Format(time.TimeOnly)
	}
	fmt.Fprintln(w, line)
	for _, why := range st.Why {
		fmt.Fprintln(w, "  why: "+ui.Clean(why))
	}
	if st.State.Final() || st.State == drainrequest.NotRequested {
		for _, did := range st.Did {
			fmt.Fprintln(w, "  did: "+strings.TrimSpace(ui.Clean(did)))
		}
	}
}
