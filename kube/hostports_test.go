package kube

import (
	"slices"
	"testing"
)

// The host ports an app's pod or VMI asks Multus for, read from its
// networks annotation: sitecon's attachments host-<port>, plain or with
// their namespace; anything else (another attachment, the JSON form) is
// no host port.
func TestHostPorts(t *testing.T) {
	for value, want := range map[string][]string{
		"":                                nil,
		"host-eth1":                       {"eth1"},
		"host-eth1,host-eth2.100":         {"eth1", "eth2.100"},
		"eve-kube-app/host-eth1, macvlan": {"eth1"},
		"host-":                           nil,
		`[{"name":"host-eth1"}]`:          nil,
	} {
		if got := hostPorts(map[string]string{AnnotationNetworks: value}); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", value, got, want)
		}
	}
}
