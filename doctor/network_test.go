package doctor

import (
	"context"
	"testing"
)

// The second-cluster check's reading of a scan: an answer for another
// cluster id is an error naming it; ours (in any case), an empty answer
// (not a member yet) and anything else are not findings; no scan or a
// prefix that could not be asked says it did not run.
func TestSecondClusterReading(t *testing.T) {
	const ours = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	for _, c := range []struct {
		name string
		scan *StatusScan
		want map[string]Severity
	}{
		{"no config", nil, map[string]Severity{"": Info}},
		{"could not ask", &StatusScan{Problem: "config: no such file"}, map[string]Severity{"": Info}},
		{"ours, empty, junk", &StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, Answers: []StatusAnswer{
			{"10.244.244.2", "cluster:" + "7F3E2A10-8C4B-4F8E-9A55-2B1C3D4E5F60"}, {"10.244.244.3", ""}, {"10.244.244.4", "hello"}}},
			map[string]Severity{"": OK}},
		{"another", &StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, Answers: []StatusAnswer{
			{"10.244.244.2", "cluster:" + ours}, {"10.244.244.9", "cluster:0badc0de-1111-4222-8333-444455556666"}}},
			map[string]Severity{"10.244.244.9": Error}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{}
			if c.scan != nil {
				env.StatusScan = func(context.Context, DialFunc) StatusScan { return *c.scan }
			}
			got := map[string]Severity{}
			for _, f := range checkSecondCluster(context.Background(), env) {
				got[f.Subject] = f.Severity
			}
			if len(got) != len(c.want) {
				t.Fatalf("findings %v, want %v", got, c.want)
			}
			for s, sev := range c.want {
				if got[s] != sev {
					t.Errorf("%q: %s, want %s", s, got[s], sev)
				}
			}
		})
	}
}
