package cmd

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/views"
)

// readAgentSummary asks this node's agent for its state and timeline over
// its socket, and says plainly why when it cannot. It waits at most a
// second: the console and `status --watch` ask every second.
func readAgentSummary(ctx context.Context, socket string) *views.AgentSummary {
	sum := &views.AgentSummary{Socket: socket}
	if _, err := os.Stat(socket); err != nil {
		sum.Problem = "no agent socket at " + socket
		return sum
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := localapi.Get[agent.State](ctx, socket, localapi.PathAgent)
	if err != nil {
		sum.Problem = fmt.Sprintf("its socket %s does not answer: %v", socket, err)
		return sum
	}
	sum.Running = true
	sum.Node, sum.Role, sum.Phase, sum.Since = st.Node, string(st.Role), string(st.Phase), st.Since
	sum.Attempts, sum.LastError, sum.ConfigError = st.Attempts, st.LastError, st.ConfigError
	sum.ClusterIP, sum.ClusterIPReady = st.ClusterIP, st.ClusterIPReady
	// Why each app's failover was held or let go, from the lost node's
	// evidence (an agent without the apps part lists no apps).
	if states, err := localapi.Get[[]apps.PublishedApp](ctx, socket, localapi.PathApps); err == nil {
		for _, a := range states {
			if a.Failover != "" {
				sum.Failovers = append(sum.Failovers, views.AgentFailover{App: a.Name, Verdict: a.Failover})
			}
			if a.Error != "" {
				mode := kube.AppModeAuto
				if a.Pinned {
					mode = kube.AppModePinned
				}
				sum.AppProblems = append(sum.AppProblems, views.AgentAppProblem{App: a.Name, UUID: a.UUID, Kind: a.Kind,
					Mode: mode, Designated: a.DNIdNode, Problem: a.Error})
			}
		}
	}
	// An agent without the apps part answers an empty timeline.
	if events, err := localapi.Get[[]apps.TimelineEvent](ctx, socket, localapi.PathEvents); err == nil {
		for _, e := range events {
			sum.Events = append(sum.Events, views.AgentEvent{Time: e.Time, Kind: e.Kind, Subject: cmp.Or(e.App, e.Node), Message: e.Message, Warning: e.Warning})
		}
	}
	return sum
}

// agentSource reads the agent at socket, for views.
func agentSource(socket string) views.AgentSource {
	return func(ctx context.Context) *views.AgentSummary { return readAgentSummary(ctx, socket) }
}
