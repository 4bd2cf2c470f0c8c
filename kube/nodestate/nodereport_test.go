package nodestate

import (
	"strings"
	"testing"
	"time"
)

// A node's etcd view in a few words, the finding first: a narrow table
// cuts the end of it.
func TestEtcdReportText(t *testing.T) {
	view := &EtcdView{Members: []EtcdMemberStatus{{Name: "node-a-1", Healthy: true, Leader: true}, {Name: "node-b-2", Healthy: true}, {Name: "node-c-3"}, {Name: "node-d-4", Learner: true}}}
	lost := &EtcdView{Members: []EtcdMemberStatus{{Name: "node-a-1", Error: "no leader"}, {Name: "node-b-2"}, {Name: "node-c-3"}}}
	for _, c := range []struct {
		r    EtcdReport
		want string
	}{
		{EtcdReport{View: view}, "2/3 healthy, leader node-a-1"},
		{EtcdReport{View: lost}, "no quorum: 0/3 healthy, no leader"},
		{EtcdReport{View: view, Error: "etcd member list: context deadline exceeded"}, "no answer now; before: 2/3 healthy, leader node-a-1 (now: etcd member list: context deadline exceeded)"},
		{EtcdReport{Error: "no etcd member here"}, "no view: no etcd member here"},
		{EtcdReport{}, "not observed yet"},
	} {
		if got := c.r.Text(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
	since := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		k    K3sReport
		want string
	}{
		{K3sReport{}, "not run here"},
		{K3sReport{Supervised: true, Running: true, RunningSince: &since, Starts: 3}, "running 2h (3 starts)"},
		{K3sReport{Supervised: true, LastExit: "exit status 1"}, "not running: exit status 1"},
	} {
		if got := c.k.Text(since.Add(2 * time.Hour)); !strings.EqualFold(got, c.want) {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}
