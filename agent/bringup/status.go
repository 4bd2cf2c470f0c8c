package bringup

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/agent/statusserver"
)

// The /status server on the cluster address: what a joiner, a peer's
// failover guard and a returning server ask this node.

// statusMembership is what /status answers from: the live Node object while
// the cluster can be read, and this node's durable record (its etcd member
// data, its formed marker) while it cannot (an API without quorum after a
// power cut, k3s still starting). A device looking for members must find
// them even then, or it would initialise a second cluster.
func (r *Runner) statusMembership(v *config.Validated, link *clusterLink) statusserver.Membership {
	return func() bool {
		if member, known := link.membership(); known {
			return member
		}
		return formation.DurableServerMember(v, r.opts.K3sPaths.EtcdMemberDataPresent(), r.opts.Records.FormedMarkerFile())
	}
}

func (r *Runner) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return NetNSDialer(r.opts.InNetNS)
}

// NetNSDialer dials from inside inNetNS (this node's network; its
// namespace in tests), giving up a connection after 5 s.
func NetNSDialer(inNetNS func(func() error) error) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		err = inNetNS(func() error {
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// serveStatus serves GET /status on the cluster address, with the proof
// of life and the membership answers (judged by judge) beside it.
func (r *Runner) serveStatus(ctx context.Context, v *config.Validated, member statusserver.Membership, judge statusserver.MembershipJudge) error {
	var l net.Listener
	addr := net.JoinHostPort(v.NodeIP.String(), strconv.Itoa(config.StatusPort))
	err := r.opts.InNetNS(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("/status server on %s: %w", addr, err)
	}
	key := LifeKey(v.ClusterID, v.Token, r.opts.NodeWord, r.log)
	// Beside /status and the proof of life, this node vouches for the
	// cluster's CA its k3s holds (a joiner whose token pins none checks the
	// server it joins against it) and answers whether a node is still a
	// member (a server that was off asks before starting k3s).
	mux := http.NewServeMux()
	mux.Handle(config.MembershipPath, statusserver.MembershipHandler(func() (config.MembershipKey, error) {
		return statusserver.LoadMembershipKey(v.ClusterID, r.opts.K3sPaths)
	}, v.NodeName, judge))
	// And it tells the console and sitecon status, when the cluster API
	// does not answer, what it knows of itself.
	mux.Handle(config.NodeReportPath, statusserver.NodeReportHandler(key, v.NodeName, r.opts.Report))
	mux.Handle("/", statusserver.WithCAProof(statusserver.WithLifeProof(statusserver.Handler(v.ClusterID, member), key, v.NodeName, r.opts.Life), key, v.NodeName, r.opts.K3sPaths))
	srv := localapi.NewServer(mux)
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	r.log.Info("serving /status", "addr", addr)
	return nil
}

// LifeKey is the proof-of-life key of a cluster, this node's answers
// signed with its own credential and its peers' checked against theirs
// (word; nil: the token's MAC alone); none (every proof refused, no node
// shown dead) when there is no token, which validation does not let
// through: said in log.
func LifeKey(clusterID string, token config.Secret, word config.NodeWord, log *slog.Logger) config.LifeKey {
	key, err := config.NewLifeKey(clusterID, token)
	if err != nil {
		log.Error("no proof of life: lost nodes cannot be shown dead, and this node cannot prove it runs", "err", err)
		return key
	}
	if word != nil {
		key = key.WithNodeWord(word)
	}
	return key
}
