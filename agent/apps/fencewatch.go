package apps

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
)

// FenceOptions configure the fence watch (see DeriveFenceTimings).
type FenceOptions struct {
	// Disabled: no fence watch, and the failover timeout is used as
	// given, not raised to MinFailoverTimeout. For nodes whose pods have
	// no processes here (simulated nodes); every real node fences.
	Disabled bool
	// APIReady checks that the API server answers ready (default: GET
	// /readyz, which fails while its etcd has no quorum).
	APIReady func(ctx context.Context) error
	// Stop stops the processes of the pods with these UIDs (default:
	// workloads.StopPods).
	Stop func(ctx context.Context, podUIDs []string) (workloads.Report, error)
}

// fenceWatch checks every fenceCheckEvery whether this node still reaches
// the API server or, failing that, any peer's agent (Options.NodeProbe,
// the failover guard's own sign of life); cut off past the fence bound, it
// stops this node's auto-migration apps' pods, again at every check while
// cut off (a kubelet that still runs starts them again), and says so in
// the node's status.
func (c *Controller) fenceWatch(ctx context.Context) {
	bound := DeriveFenceTimings(c.opts.FailoverTimeout).FenceAfter
	start := time.Now()
	var st FenceState
	tick := time.NewTicker(fenceCheckEvery)
	defer tick.Stop()
	for {
		check := c.fenceCheck(ctx)
		check.Mono, check.Wall = time.Since(start), time.Now()
		wasFenced := st.Fenced()
		v := st.Observe(check, bound)
		switch v.Action {
		case FenceStop:
			// Said before it is done: whoever sees the pods gone finds
			// the reason already in the node's status.
			c.setFence(v.Reason)
			pods := c.autoPodsHere()
			stopCtx, cancel := context.WithTimeout(ctx, fenceStopBudget)
			rep, err := c.opts.Fence.Stop(stopCtx, pods)
			cancel()
			if !wasFenced {
				c.timeline.Add(TimelineEvent{Time: check.Wall, Kind: EventRefusal, Node: c.opts.NodeName, Message: v.Reason, Warning: true})
			}
			if !wasFenced || len(rep.Killed) > 0 || err != nil {
				c.log.Warn("fenced: cut off from the cluster", "reason", v.Reason, "pods", len(pods), "killed", len(rep.Killed), "err", err)
			}
		case FenceLift:
			c.log.Info("fence lifted", "reason", v.Reason)
			c.timeline.Add(TimelineEvent{Time: check.Wall, Kind: EventRefusal, Node: c.opts.NodeName, Message: v.Reason})
			c.setFence("")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (c *Controller) setFence(why string) {
	c.mu.Lock()
	changed := c.fence != why
	c.fence = why
	c.mu.Unlock()
	if changed {
		c.notify()
	}
}

// fenceCheck asks the API server, and only when it does not answer, the
// peers, all at once, each bounded by probeTimeout.
func (c *Controller) fenceCheck(ctx context.Context) FenceCheck {
	var peers []*corev1.Node
	for _, n := range c.snap.Data().Nodes {
		if n.Name != c.opts.NodeName {
			peers = append(peers, n)
		}
	}
	return fenceCheckWith(ctx, c.opts.Fence.APIReady, peers, c.opts.NodeProbe)
}

// fenceCheckWith is one check: the API server first, then, only when it is
// not ready, every peer at once, each bounded by probeTimeout.
func fenceCheckWith(ctx context.Context, apiReady func(context.Context) error, peers []*corev1.Node, probe NodeProbe) FenceCheck {
	apiCtx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if apiReady(apiCtx) == nil {
		return FenceCheck{APIReachable: true}
	}
	answered := make(chan bool, len(peers))
	var wg sync.WaitGroup
	for _, n := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			answered <- probe(pctx, n).Alive
		}()
	}
	wg.Wait()
	close(answered)
	for ok := range answered {
		if ok {
			return FenceCheck{PeerAnswered: true}
		}
	}
	return FenceCheck{}
}

// autoPodsHere are the UIDs of the pods on this node, as last seen, of
// apps that migrate (pinned apps' pods stay: nobody else will run them).
// An app pod whose app this node has no config for is stopped too: it
// cannot be shown pinned, and the majority side may move it.
func (c *Controller) autoPodsHere() []string {
	c.mu.Lock()
	set := c.set
	c.mu.Unlock()
	var out []string
	for _, p := range c.snap.Data().Pods {
		if p.Namespace != kube.AppNamespace || p.Spec.NodeName != c.opts.NodeName {
			continue
		}
		uuid := p.Labels[kube.LabelAppUUID]
		if uuid == "" {
			continue
		}
		if app, ok := set.Apps[uuid]; ok && app.Pinned() {
			continue
		}
		out = append(out, string(p.UID))
	}
	return out
}

// apiReady is the default FenceOptions.APIReady.
func apiReady(snap *kube.Snapshot) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return snap.Clients().Core.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}
}
