package sitebox

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MoveEtcdLeaderOff hands etcd's leadership to another member when the
// node's member leads, and returns once another member leads. A test that
// fails a node to watch what the cluster shows of it (not etcd's election)
// calls it first: on two busy cores, a killed leader's election stalls the
// API server for seconds, long enough for another node's lease to go stale
// and that node to be marked NotReady beside the one failed.
func (s *Site) MoveEtcdLeaderOff(node string) error {
	m, ok := s.EtcdMemberOf(node)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.EtcdEndpoints(), DialTimeout: 5 * time.Second, Context: ctx})
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		st, err := cli.Status(ctx, m.ClientURL())
		if err != nil {
			return fmt.Errorf("etcd status of %s: %w", node, err)
		}
		if st.Leader != st.Header.MemberId {
			return nil
		}
		members, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		for _, other := range members.Members {
			if other.ID != st.Header.MemberId {
				// MoveLeader goes to the leader itself.
				leaderCli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, DialTimeout: 5 * time.Second, Context: ctx})
				if err != nil {
					return err
				}
				_, err = leaderCli.MoveLeader(ctx, other.ID)
				leaderCli.Close()
				if err != nil {
					return fmt.Errorf("move etcd's leadership off %s: %w", node, err)
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd's leadership still on %s: %w", node, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
