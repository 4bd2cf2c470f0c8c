package agent

import (
	"net/http"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
)

// serveLocalAPI serves the agent's state, its apps part's state and its
// timeline on its unix socket, mode 0600, and takes the device's drain
// requests and its requests for a VM console's one-time password there.
func (a *Agent) serveLocalAPI() (*http.Server, error) {
	return localapi.ServeWith(a.opts.SocketPath, map[string]func() any{
		localapi.PathDrain:  func() any { return a.drains.Status() },
		localapi.PathAgent:  func() any { return a.State() },
		localapi.PathLeader: func() any { return a.LeaderState() },
		// The apps part's endpoints answer empty lists until it runs, so a
		// reader never has to tell "none" from "not yet" by an error.
		localapi.PathApps:    func() any { return orEmpty(a.Apps(), (*apps.Controller).Apps) },
		localapi.PathVolumes: func() any { return orEmpty(a.Apps(), (*apps.Controller).Volumes) },
		localapi.PathEvents:  func() any { return orEmpty(a.Apps(), (*apps.Controller).Timeline) },
		localapi.PathNode: func() any {
			if part := a.Apps(); part != nil {
				return part.Node()
			}
			return apps.PublishedNode{Node: a.State().Node, Status: apps.PublishedDown, Reason: "not connected to the cluster yet"}
		},
	}, map[string]localapi.Post{localapi.PathDrain: a.postDrain, localapi.PathDrainCancel: a.postDrainCancel,
		localapi.PathVNCSession: a.postVNCSession})
}

// orEmpty is list(part), or an empty list (JSON [], not null) while the
// apps part does not run.
func orEmpty[T any](part *apps.Controller, list func(*apps.Controller) []T) []T {
	if part == nil {
		return []T{}
	}
	if out := list(part); out != nil {
		return out
	}
	return []T{}
}
