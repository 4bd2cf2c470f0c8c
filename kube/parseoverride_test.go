package kube

import "testing"

// An override entry is usable only as JSON naming a node UUID: the agents
// act on nothing else, and sitecon doctor reports the rest (both read it
// through ParseOverride).
func TestParseOverride(t *testing.T) {
	for _, c := range []struct {
		raw    string
		usable bool
	}{
		{`{"node":"node-b","node_uuid":"8ca5fe9c-62bb-5149-a491-10d2d59f7c22","config_dnid":"x"}`, true},
		{`{"node":"node-b"}`, false},
		{`node-b`, false},
		{``, false},
	} {
		o, err := ParseOverride(c.raw)
		if (err == nil) != c.usable {
			t.Errorf("%q: %+v, %v; want usable=%v", c.raw, o, err, c.usable)
		}
	}
}
