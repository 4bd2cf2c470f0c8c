package safety

import (
	"slices"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTakeOut(t *testing.T) {
	up := func(names ...string) []Member {
		var out []Member
		for _, n := range names {
			out = append(out, Member{Name: n})
		}
		return out
	}
	for name, tc := range map[string]struct {
		members     []Member
		out         string
		holds       bool
		spare       int
		say         string
		afterSpare  int
		afterMember int
	}{
		"three, one out": {members: up("a", "b", "c"), out: "a", holds: true, spare: 0,
			say: "3 etcd members, all healthy; draining a leaves 2 of the 2 needed", afterSpare: 0, afterMember: 2},
		"two, one out": {members: up("a", "b"), out: "a", holds: false, spare: -1,
			say: "2 etcd members, all healthy; draining a leaves 1 of the 2 needed", afterSpare: 0, afterMember: 1},
		"one, the last": {members: up("a"), out: "a", holds: false, spare: -1,
			say: "1 etcd member, all healthy; draining a leaves 0 of the 1 needed", afterSpare: 0, afterMember: 0},
		"five, one down, one out": {members: append(up("a", "b", "c", "d"), Member{Name: "e", Down: "NotReady"}), out: "a", holds: true, spare: 0,
			say: "5 etcd members, 1 unhealthy (e: NotReady); draining a leaves 3 of the 3 needed", afterSpare: 0, afterMember: 4},
		"three, the dead one out": {members: append(up("a", "b"), Member{Name: "c", Down: "NotReady"}), out: "c", holds: true, spare: 0,
			say: "3 etcd members, 1 unhealthy (c: NotReady); draining c leaves 2 of the 2 needed", afterSpare: 0, afterMember: 2},
		"not a member": {members: up("a", "b"), out: "w", holds: true},
	} {
		t.Run(name, func(t *testing.T) {
			q := TakeOut(tc.members, tc.out, "draining")
			if q.Holds() != tc.holds || q.Spare() != tc.spare {
				t.Fatalf("%+v: holds %v spare %d, want %v %d", q, q.Holds(), q.Spare(), tc.holds, tc.spare)
			}
			if !q.IsMember {
				return
			}
			if q.String() != tc.say {
				t.Errorf("says %q, want %q", q.String(), tc.say)
			}
			after := q.AfterRemoval()
			if after.Members != tc.afterMember || (after.Members > 0 && after.Spare() != tc.afterSpare) {
				t.Errorf("after removal %+v (spare %d), want %d members, spare %d", after, after.Spare(), tc.afterMember, tc.afterSpare)
			}
		})
	}
}

func TestUpToDate(t *testing.T) {
	at := func(min int) string {
		return time.Date(2026, 11, 22, 3, min, 0, 0, time.UTC).Format(time.RFC3339)
	}
	rep := func(name, healthyAt, failedAt string, active bool) *lhv1beta2.Replica {
		r := &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: name}}
		r.Spec.NodeID, r.Spec.HealthyAt, r.Spec.FailedAt, r.Spec.Active = "node-"+name, healthyAt, failedAt, active
		return r
	}
	deleting := rep("del", at(0), "", true)
	deleting.DeletionTimestamp = &metav1.Time{}
	unplaced := rep("unplaced", at(0), "", true)
	unplaced.Spec.NodeID = ""
	for name, tc := range map[string]struct {
		reps []*lhv1beta2.Replica
		want []string
	}{
		"healthy ones, whatever their instance does": {reps: []*lhv1beta2.Replica{rep("a", at(0), "", true), rep("b", at(0), "", true)}, want: []string{"a", "b"}},
		"never healthy holds nothing":                {reps: []*lhv1beta2.Replica{rep("a", at(0), "", true), rep("b", "", "", true)}, want: []string{"a"}},
		"failed is stale beside a healthy one":       {reps: []*lhv1beta2.Replica{rep("a", at(0), "", true), rep("b", at(0), at(9), true)}, want: []string{"a"}},
		"inactive is not a copy Longhorn uses":       {reps: []*lhv1beta2.Replica{rep("a", at(0), "", true), rep("b", at(0), "", false)}, want: []string{"a"}},
		"all failed: the last to fail":               {reps: []*lhv1beta2.Replica{rep("a", at(0), at(5), true), rep("b", at(0), at(30), true)}, want: []string{"b"}},
		"all failed within the window":               {reps: []*lhv1beta2.Replica{rep("a", at(0), at(29), true), rep("b", at(0), at(30), true)}, want: []string{"a", "b"}},
		"failed, never healthy: nothing to salvage":  {reps: []*lhv1beta2.Replica{rep("a", "", at(5), true)}},
		"deleting or unplaced: no copy":              {reps: []*lhv1beta2.Replica{deleting, unplaced}},
		"an unreadable failure stamp still counts":   {reps: []*lhv1beta2.Replica{rep("a", at(0), "yesterday", true), rep("b", at(0), at(30), true)}, want: []string{"a", "b"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, r := range UpToDate(tc.reps) {
				got = append(got, r.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("UpToDate = %v, want %v", got, tc.want)
			}
		})
	}
}
