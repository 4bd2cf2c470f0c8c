package nodestate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
)

// removeMemberTimeout bounds a member's removal, its retries included.
const removeMemberTimeout = 30 * time.Second

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RemoveEtcdMember removes node's member from etcd's member list, through
// access (a node that leaves: its own endpoint, which forwards the change
// to the leader; it needs quorum, as any membership change does). The
// member is found as the drain preflight finds it (EtcdMemberNode). It
// returns the member's name, "" when node runs none (a worker, or a member
// removed already). A k3s server whose member is gone exits and does not
// start again on that data (it is no longer a member of anything), so the
// node cannot rejoin by accident before its agent stops k3s.
func RemoveEtcdMember(ctx context.Context, access EtcdAccess, node string, nodes []*corev1.Node) (string, error) {
	tlsCfg, err := access.tls()
	if err != nil {
		return "", err
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{access.Endpoint}, TLS: tlsCfg,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", fmt.Errorf("etcd client for %s: %w", access.Endpoint, err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, removeMemberTimeout)
	defer cancel()
	// Linearizable: the list the removal acts on is the cluster's own, not
	// what a member behind the others remembers.
	list, err := client.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("etcd member list from %s: %w", access.Endpoint, err)
	}
	for _, m := range list.Members {
		st := EtcdMemberStatus{ID: strconv.FormatUint(m.ID, 16), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs}
		if EtcdMemberNode(st, nodes) != node {
			continue
		}
		for {
			_, err := client.MemberRemove(ctx, m.ID)
			switch {
			case err == nil:
				return m.Name, nil
			case errors.Is(err, rpctypes.ErrUnhealthy) && sleepCtx(ctx, time.Second):
				// etcd refuses a removal that would leave fewer members
				// connected (for its health interval, 5 s) than quorum:
				// a member that just came back counts once it has been
				// connected that long.
				continue
			}
			return "", fmt.Errorf("removing %s's etcd member %s (%s): %w", node, m.Name, st.ID, err)
		}
	}
	return "", nil
}
