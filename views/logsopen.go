package views

// The console's way to a pod's log through the API server. This file is
// the one seam between the logs view and the cluster: the view takes a
// LogSource and knows nothing else of how the lines are fetched; the real
// one is kube's, which `sitecon logs` reads with too.

import (
	"context"
	"io"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
)

// LogOptions are the options of one log request.
type LogOptions struct {
	Follow     bool
	Timestamps bool
	// TailLines, when > 0, starts with the last lines only.
	TailLines int64
	// SinceTime, when set, starts at that time (the API server reads it to
	// the second: lines of that second already seen come again).
	SinceTime time.Time
}

// LogOpener opens a container's log: the reader is the API server's
// response body, closed by the caller.
type LogOpener func(ctx context.Context, namespace, pod, container string, opts LogOptions) (io.ReadCloser, error)

// LogTarget is the pod whose log is shown and its containers.
type LogTarget struct {
	Namespace, Pod string
	Containers     []string
	// Container is the one shown first.
	Container string
}

// LogSource is what the logs view reads with.
type LogSource struct {
	// Resolve finds the pod of an app (app true: name is the app's object,
	// the pod or the VMI) or a pod by name, and its containers.
	Resolve func(ctx context.Context, namespace, name string, app bool) (LogTarget, error)
	Open    LogOpener
}

// PodLogSource reads logs through clients, as `sitecon logs` does
// (kube.ResolveLogTarget, kube.OpenLogStream): a pod by name, else an
// app's running pod by its name or UUID, on the container a reader means.
func PodLogSource(clients *kube.Clients) *LogSource {
	cs := clients.Core
	return &LogSource{
		Resolve: func(ctx context.Context, namespace, name string, _ bool) (LogTarget, error) {
			t, err := streams.ResolveLogTarget(ctx, cs, namespace, name, "")
			if err != nil {
				return LogTarget{}, err
			}
			return LogTarget{Namespace: t.Namespace, Pod: t.Pod, Containers: t.Containers, Container: t.Container}, nil
		},
		Open: func(ctx context.Context, namespace, pod, container string, opts LogOptions) (io.ReadCloser, error) {
			o := streams.LogOptions{Follow: opts.Follow, Timestamps: opts.Timestamps}
			if opts.TailLines > 0 {
				o.Tail = &opts.TailLines
			}
			if !opts.SinceTime.IsZero() {
				o.SinceTime = &opts.SinceTime
			}
			return streams.OpenLogStream(ctx, cs, streams.LogTarget{Namespace: namespace, Pod: pod, Container: container}, o)
		},
	}
}
