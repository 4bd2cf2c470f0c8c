package nodestate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
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

// RemoveEtcdMember removes node's member from etcd's member list. It
// reads the list through access (a node that leaves: its own endpoint)
// and asks the members that stay to make the change, as etcd's own
// operators do: a member asked to remove itself stops once it learns it is
// gone, sometimes before it answers ("etcdserver: server stopped"), and
// the removal then looks failed though it took. A reply lost any other way
// is settled by reading the list again from a member that stays. The
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
	client, err := etcdClient([]string{access.Endpoint}, tlsCfg)
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
	var leavingMembers []*etcdserverpb.Member
	var staying []string
	for _, m := range list.Members {
		st := EtcdMemberStatus{ID: strconv.FormatUint(m.ID, 16), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs}
		switch {
		case EtcdMemberNode(st, nodes) == node:
			leavingMembers = append(leavingMembers, m)
		case !m.IsLearner:
			// A learner (a server still joining) refuses a removal and
			// a linearizable read: only voting members are asked.
			staying = append(staying, m.ClientURLs...)
		}
	}
	switch len(leavingMembers) {
	case 0:
		return "", nil
	case 1:
	default:
		var names []string
		for _, m := range leavingMembers {
			names = append(names, m.Name)
		}
		return "", fmt.Errorf("%d etcd members are %s's (%s): nothing removed; remove the stale one by hand (etcdctl member remove) and leave again", len(names), node, strings.Join(names, ", "))
	}
	leaving := leavingMembers[0]
	id := strconv.FormatUint(leaving.ID, 16)
	through := client
	if len(staying) > 0 {
		// The same client certificate serves every member: one CA signs
		// all of a k3s cluster's etcd certificates.
		others, err := etcdClient(staying, tlsCfg)
		if err != nil {
			return "", fmt.Errorf("etcd client for the members that stay (%s): %w", strings.Join(staying, ", "), err)
		}
		defer others.Close()
		through = others
	}
	for {
		_, err := through.MemberRemove(ctx, leaving.ID)
		switch {
		case err == nil, errors.Is(err, rpctypes.ErrMemberNotFound):
			return leaving.Name, nil
		case errors.Is(err, rpctypes.ErrUnhealthy) && sleepCtx(ctx, time.Second):
			// etcd refuses a removal that would leave fewer members
			// connected (for its health interval, 5 s) than quorum: a
			// member that just came back counts once it has been
			// connected that long.
			continue
		}
		if gone, listErr := memberGone(ctx, through, leaving.ID); listErr == nil && gone {
			return leaving.Name, nil
		}
		return "", fmt.Errorf("removing %s's etcd member %s (%s): %w", node, leaving.Name, id, err)
	}
}

// memberGone reads the member list again (linearizable) to settle a
// removal whose reply was lost.
func memberGone(ctx context.Context, client *clientv3.Client, id uint64) (bool, error) {
	list, err := client.MemberList(ctx)
	if err != nil {
		return false, err
	}
	return !slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return m.ID == id }), nil
}

func etcdClient(endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}
