package bringup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// judgeMembership reads, with the link's clients, what JudgeMembership
// needs: nothing from the caches, each object read now, so that a peer
// without quorum cannot answer from what it saw before.
func (m *clusterLink) judgeMembership(ctx context.Context, clusterID string, etcd nodestate.EtcdAccess, node, uuid string) (config.Verdict, string) {
	m.mu.Lock()
	snap := m.snap
	m.mu.Unlock()
	var in statusserver.MembershipEvidence
	if snap != nil && snap.Synced() && snap.Health().Connected {
		in.Synced = true
		cs := snap.Clients().Core
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			in.NodeErr = err
		default:
			in.Node = n
		}
		if in.NodeErr == nil && in.Node == nil {
			cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				in.RecordErr = err
			default:
				in.Record = cm
			}
			if etcd.Endpoint == "" {
				in.EtcdErr = errors.New("no etcd endpoint")
			} else if view, err := nodestate.ObserveEtcd(ctx, etcd, m.node, time.Now); err != nil {
				in.EtcdErr = err
			} else {
				for _, member := range view.Members {
					in.EtcdMembers = append(in.EtcdMembers, member.Name)
				}
			}
		}
	}
	return statusserver.JudgeMembership(clusterID, node, uuid, in)
}

// stillMember asks the peers whether this node is still a member of v's
// cluster, once, within the membership timeout, and holds it (true) on a
// proven "removed": the removed marker written, the cluster address this
// bring-up put on dropped, the reason on the state and in the log. It
// started nothing else, and stops nothing else.
func (r *Runner) stillMember(ctx context.Context, v *config.Validated, removedMarker string) (held bool) {
	r.host.SetPhase(PhaseCheckingMembership, nil)
	key, err := statusserver.LoadMembershipKey(v.ClusterID, r.opts.K3sPaths)
	if err != nil {
		// Without the servers' key no answer can be checked, and a removal
		// that cannot be checked holds nothing: k3s starts, as it would
		// with every peer silent.
		r.log.Warn("membership question not asked: this node cannot check a removal, starting k3s", "err", err)
		return false
	}
	q := statusserver.MembershipQuery{Key: key, Node: v.NodeName, UUID: v.NodeUUID,
		Dial: r.dialer(), Timeout: r.opts.MembershipTimeout}
	start := time.Now()
	answers := q.Ask(ctx, statusserver.MembershipAddresses(v))
	removed, evidence := statusserver.MembershipOutcome(answers)
	took := time.Since(start).Round(time.Millisecond)
	for _, ans := range answers {
		if ans.Err != nil && !errors.Is(ans.Err, context.Canceled) && !errors.Is(ans.Err, context.DeadlineExceeded) && !isNoPeer(ans.Err) {
			r.log.Info("membership question: an answer not counted", "addr", ans.Addr.String(), "err", ans.Err)
		}
	}
	if !removed {
		r.log.Info("membership question: no proven removal, starting k3s", "took", took, "answers", evidence)
		return false
	}
	if err := formation.MarkRemoved(removedMarker, formation.RemovedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, Evidence: evidence}); err != nil {
		// The hold stands now; a restart would ask again.
		r.log.Error("removed marker not written", "err", err)
	}
	hold := formation.RemovalHold(v, removedMarker)
	if hold == nil {
		hold = fmt.Errorf("%w: %s (%s); it starts neither k3s nor its cluster address", formation.ErrRemoved, v.NodeName, evidence)
	}
	if err := r.DropClusterAddress(v); err != nil {
		hold = errors.Join(hold, fmt.Errorf("dropping the cluster address: %w", err))
	}
	r.host.SetPhase(PhaseError, hold)
	r.log.Error("not starting k3s: this node was removed from its cluster while it was off", "took", took, "err", hold)
	return true
}

// isNoPeer says an address had nobody to answer (refused, unreachable):
// the common case on a LAN, not worth a log line each.
func isNoPeer(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
