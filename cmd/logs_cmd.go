package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/ui"
)

func newLogsCmd(g *globalFlags) *cobra.Command {
	var namespace, container string
	var opts streams.LogOptions
	var tail int64
	cmd := &cobra.Command{
		Use:   "logs APP|POD",
		Short: "Print an app's or a pod's log (-f follows it)",
		Long: `Print the log of an app's running pod, or of a pod named so, read through the
API server from the pod's node. A VM app's log is its serial console
(the guest-console-log container of its virt-launcher pod), or virt-launcher's
own log (compute) when the VM has no console log; the command says which.
Control characters in the log are removed before it is printed.`,
		Example: `  sitecon logs plc-gateway -f
  sitecon logs hmi --since 10m
  sitecon logs -n kube-system coredns-6799fbcd5-x2x9k --tail 50`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tail >= 0 {
				opts.Tail = &tail
			}
			if opts.Since < 0 {
				return fmt.Errorf("--since %s: must not be negative", opts.Since)
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			return printLogs(cmd.Context(), cs, cmd.OutOrStdout(), cmd.ErrOrStderr(), namespace, args[0], container, opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", kube.AppNamespace, "namespace of the app or pod")
	f.StringVarP(&container, "container", "c", "", "container to read (default: the only one, a VM's console log, or the pod's default)")
	f.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing lines as they come")
	f.DurationVar(&opts.Since, "since", 0, "only lines newer than this (e.g. 10m)")
	f.Int64Var(&tail, "tail", -1, "only the last N lines (default: all)")
	f.BoolVar(&opts.Timestamps, "timestamps", false, "begin each line with its time")
	f.BoolVarP(&opts.Previous, "previous", "p", false, "the log of the container's previous instance (before its last restart)")
	return cmd
}

// printLogs resolves the target, says what it reads when that was a
// choice, and copies the log line by line, each cleaned (safety rule 7).
func printLogs(ctx context.Context, cs kubernetes.Interface, out, errOut io.Writer, namespace, name, container string, opts streams.LogOptions) error {
	target, err := streams.ResolveLogTarget(ctx, cs, namespace, name, container)
	if err != nil {
		return err
	}
	if target.Why != "" || target.Pod != name {
		what := "pod " + target.Pod
		if target.App != "" && target.Pod != name {
			what = "app " + target.App + ", pod " + target.Pod
		}
		why := ""
		if target.Why != "" {
			why = ": " + target.Why
		}
		fmt.Fprintln(errOut, ui.Clean(fmt.Sprintf("sitecon: %s, container %s%s", what, target.Container, why)))
	}
	stream, err := streams.OpenLogStream(ctx, cs, target, opts)
	if err != nil {
		return err
	}
	defer stream.Close()
	w := bufio.NewWriter(out)
	// Each line bounded, the rest of a longer one dropped and said: an
	// app's endless line must not grow sitecon.
	r := streams.NewLogLineReader(stream, streams.MaxLogLineBytes)
	for {
		line, err := r.Next()
		if len(line.Text) > 0 || line.Dropped > 0 || line.Complete {
			if _, werr := fmt.Fprintln(w, ui.Clean(line.String())); werr != nil {
				return werr
			}
		}
		// Flush whenever nothing more is buffered: a followed line shows
		// at once, a long read is written in blocks.
		if r.Buffered() == 0 {
			if ferr := w.Flush(); ferr != nil {
				return ferr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return w.Flush()
		case ctx.Err() != nil:
			// Ctrl-C ends a follow: what was read is printed.
			_ = w.Flush()
			if opts.Follow {
				return nil
			}
			return context.Cause(ctx)
		default:
			_ = w.Flush()
			return fmt.Errorf("reading the log of %s/%s: %w", target.Namespace, target.Pod, err)
		}
	}
}
