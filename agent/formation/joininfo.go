package formation

import (
	"fmt"
	"net/netip"

	"github.com/sitecon/sitecon/agent/config"
)

// NextFreeAddress is the first host address of the cluster prefix not in use.
func NextFreeAddress(network netip.Prefix, used []netip.Addr) (netip.Addr, error) {
	taken := map[netip.Addr]bool{}
	for _, a := range used {
		taken[a] = true
	}
	last := config.Broadcast(network)
	for a := network.Masked().Addr().Next(); a.IsValid() && a != last; a = a.Next() {
		if !taken[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in %s", network)
}
