package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodecheck"
)

// This node's own report (kube.NodeReport), served behind the cluster key
// on its cluster address beside /status (agent/statusserver/nodereport.go):
// what the console and `sitecon status` show of this node when the
// cluster API does not answer. It is the published State with k3s's
// state, the etcd member's view, the agent's clock and the node-side
// checks of package nodecheck; it holds no secret
// (State holds none: the token lives only in the applied config).

// nodeReport is the report now. It never waits: the etcd view is the
// background observation's.
func (a *Agent) nodeReport() nodestate.NodeReport {
	st := a.State()
	r := nodestate.NodeReport{
		Node: st.Node, ClusterID: st.ClusterID, Role: string(st.Role), Phase: string(st.Phase), Since: st.Since,
		Attempts: st.Attempts, LastError: st.LastError, ClusterIP: st.ClusterIP, ClusterIPReady: st.ClusterIPReady,
		ConfigError: st.ConfigError, ConfigNote: st.ConfigNote, Version: a.opts.Version,
		K3s: nodestate.K3sReport{Starts: st.K3sStarts},
	}
	a.mu.Lock()
	super := a.super
	a.mu.Unlock()
	if super != nil {
		r.K3s.Supervised = true
		starts, lastExit := super.Stats()
		r.K3s.Starts = starts
		if lastExit != nil {
			r.K3s.LastExit = lastExit.Error()
		}
		if running, since := super.Running(); running {
			r.K3s.Running, r.K3s.RunningSince = true, &since
		}
	}
	r.Etcd = a.etcdSeen.report()
	r.Network = a.networkReport()
	a.mu.Lock()
	snap := a.snap
	if a.token != nil {
		token := *a.token
		r.Token = &token
	} else {
		// Said, so the doctor does not take it for an older agent.
		r.Token = &nodestate.TokenReport{Problem: "no cluster config applied (or the agent runs with --no-bootstrap)"}
	}
	a.mu.Unlock()
	if snap != nil {
		r.Peers = nodestate.NodePeers(snap.Nodes())
	}
	// The checks that need this node (sitecon doctor gathers them): a
	// few hundred small local reads and one syscall, no waiting; made
	// at most once per nodeChecksFresh however often the report is asked.
	a.nodeChecksSeen.fill(&r, a.opts.NodeChecks, time.Now())
	r.Credential = a.credentialReport(st.Node)
	return r
}

// credentialReport says whether this node signs its proof of life with
// its own credential so that a peer's check holds: a signature made and
// checked here as the peers check it.
func (a *Agent) credentialReport(node string) *nodestate.CredentialReport {
	if node == "" {
		return &nodestate.CredentialReport{Problem: "the node's name is not known yet"}
	}
	digest := sha256.Sum256([]byte("sitecon node credential self-check"))
	cert, sig, err := a.nodeWord.Sign(node, digest[:])
	if err == nil {
		err = a.nodeWord.Check(node, digest[:], cert, sig)
	}
	if err != nil {
		return &nodestate.CredentialReport{Problem: err.Error()}
	}
	return &nodestate.CredentialReport{}
}

// nodeChecksFresh is how long one round of the node checks serves the
// reports asked for: the console asks every node every few seconds while
// the API is down, and a doctor run asks once per check area; the
// checks' subjects (a daemon, a module, a certificate, the clock's
// sync) do not change faster than that matters.
const nodeChecksFresh = 5 * time.Second

// nodeChecksSeen is the last round of the node checks.
type nodeChecksSeen struct {
	mu sync.Mutex
	at time.Time
	r  nodestate.NodeReport // only its node-check sections
}

// fill copies the sections nodecheck.Checker.Fill sets (Storage, Time,
// Certs): a section added there must be copied here too. The checks run
// under the lock, so reports asked at once share one round.
func (c *nodeChecksSeen) fill(r *nodestate.NodeReport, checks nodecheck.Checker, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || now.Sub(c.at) >= nodeChecksFresh || now.Before(c.at) {
		c.r = nodestate.NodeReport{}
		checks.Fill(&c.r)
		c.at = now
	}
	// Each report gets its own copies: the caller may change them.
	if c.r.Storage != nil {
		v := *c.r.Storage
		r.Storage = &v
	}
	if c.r.Time != nil {
		v := *c.r.Time
		r.Time = &v
	}
	if c.r.Certs != nil {
		v := *c.r.Certs
		v.Files = append([]nodestate.CertFile(nil), c.r.Certs.Files...)
		r.Certs = &v
	}
}

// etcdSeen is the last observation of etcd through this node's member
// (kube.ObserveEtcd), kept for the report: a member without quorum still
// lists the members and says which answer, which is what a technician
// needs most exactly then.
type etcdSeen struct {
	mu   sync.Mutex
	view *nodestate.EtcdView
	err  error
}

// errNoEtcdObservation: the background observation has not been made yet.
var errNoEtcdObservation = errors.New("etcd not observed yet")

// last is the last observation, for the member list's publisher
// (clusterwork.go): etcd is asked once per interval, by observeEtcd. An
// observation that failed gives its error, not the view before it.
func (e *etcdSeen) last(context.Context) (nodestate.EtcdView, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.err != nil:
		return nodestate.EtcdView{}, e.err
	case e.view == nil:
		return nodestate.EtcdView{}, errNoEtcdObservation
	}
	return *e.view, nil
}

func (e *etcdSeen) report() nodestate.EtcdReport {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := nodestate.EtcdReport{View: e.view}
	switch {
	case errors.Is(e.err, nodestate.ErrNoEtcdCredentials):
		r.View, r.Error = nil, "no etcd member here (no etcd client certificate: a worker, or k3s has not run as a server yet)"
	case e.err != nil:
		r.Error = e.err.Error()
	}
	return r
}

// observeEtcd observes etcd every kube.EtcdObserveInterval until ctx ends,
// whatever the cluster API's state. A failed observation keeps the last
// view, with the failure beside it.
func (a *Agent) observeEtcd(ctx context.Context) {
	if a.opts.Etcd.Endpoint == "" {
		return
	}
	tick := time.NewTicker(nodestate.EtcdObserveInterval)
	defer tick.Stop()
	for {
		node := a.State().Node
		view, err := nodestate.ObserveEtcd(ctx, a.opts.Etcd, node, time.Now)
		a.etcdSeen.mu.Lock()
		if err == nil {
			a.etcdSeen.view = &view
		}
		a.etcdSeen.err = err
		a.etcdSeen.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
