package agent

import (
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/netcfg"
)

// The network section of this node's report (kube.NetworkReport): its
// cluster interface and MTU, read when the report is made (a netlink
// question answered in microseconds), so sitecon doctor can compare the
// nodes' MTUs.

// networkReport is this node's cluster interface now.
func (a *Agent) networkReport() *kube.NetworkReport {
	a.mu.Lock()
	v := a.applied
	a.mu.Unlock()
	r := &kube.NetworkReport{}
	if v == nil {
		r.Problem = "no cluster interface: no cluster config applied (or the agent runs with --no-bootstrap)"
		return r
	}
	r.Interface = v.ClusterInterface
	err := a.opts.InNetNS(func() (err error) {
		r.MTU, err = netcfg.InterfaceMTU(v.ClusterInterface)
		return err
	})
	if err != nil {
		r.Problem = err.Error()
	}
	return r
}
