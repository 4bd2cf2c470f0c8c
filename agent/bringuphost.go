package agent

import (
	"context"
	"net"
	"net/netip"

	"github.com/sitecon/sitecon/agent/bringup"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
)

// bringUpHost is the Agent as its bring-ups see it (bringup.Host): what
// they report lands in the published State, the cluster address they put
// on is kept for the next one and for leaving, and the work they start
// once the cluster answers is the Agent's.
type bringUpHost struct{ a *Agent }

var _ bringup.Host = bringUpHost{}

func (h bringUpHost) SetPhase(p Phase, err error) { h.a.setPhase(p, err) }

func (h bringUpHost) Attempt(err error) { h.a.attempt(err) }

func (h bringUpHost) Phase() Phase {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.a.state.Phase
}

func (h bringUpHost) SetRole(role k3s.Role) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	h.a.state.Role = role
}

func (h bringUpHost) SetSeedAddress(ip string) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	h.a.state.SeedAddress = ip
}

func (h bringUpHost) ClusterAddress() netip.Prefix {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.a.prefix
}

func (h bringUpHost) SetClusterAddress(p netip.Prefix) (previous netip.Prefix) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	previous = h.a.prefix
	h.a.prefix, h.a.state.ClusterIPReady = p, p.IsValid()
	return previous
}

func (h bringUpHost) SetSupervisor(super *k3s.Supervisor) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	h.a.super = super
}

func (h bringUpHost) Retry(ctx context.Context, try func() (done bool)) bool {
	return h.a.retry(ctx, try)
}

func (h bringUpHost) StartClusterWork(ctx context.Context, snap *kube.Snapshot, node, nodeUUID string, role k3s.Role, lifeKey config.LifeKey) {
	h.a.startClusterWork(ctx, snap, node, nodeUUID, role, lifeKey)
}

func (h bringUpHost) StartFence(ctx context.Context, node string, lifeKey config.LifeKey) {
	h.a.startFence(ctx, node, lifeKey)
}

// dialer dials from this node's network (its namespace in tests).
func (a *Agent) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return bringup.NetNSDialer(a.opts.InNetNS)
}
