package safety

import (
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
)

// SalvageWindow is how close to the last failure a failed replica must
// have failed to be salvaged with it: Longhorn's AutoSalvageTimeLimit
// (controller/volume_controller.go, longhorn-manager v1.10.0).
const SalvageWindow = time.Minute

// UpToDate returns, of one volume's replicas, those that hold its latest
// data, whatever their instance is doing now (running, stopped with the
// volume detached, or starting). It reads the replicas as Longhorn's volume
// controller does:
//
//   - a replica whose spec.healthyAt is empty has never been read/write in
//     an engine since it was created or last rebuilt: it holds nothing;
//   - while any replica is healthy and active (healthyAt set, failedAt
//     empty, spec.active), those are the copies, and a failed replica
//     (failedAt set) is stale: it must be rebuilt from them;
//   - when every replica has failed (a faulted volume), Longhorn salvages
//     the ones that failed within SalvageWindow of the last failure: the
//     last to stop taking writes. Those hold the data.
//
// A replica being deleted, or not placed on a node, is no copy.
func UpToDate(reps []*lhv1beta2.Replica) []*lhv1beta2.Replica {
	var held []*lhv1beta2.Replica
	for _, r := range reps {
		if r.DeletionTimestamp == nil && r.Spec.HealthyAt != "" && r.Spec.NodeID != "" {
			held = append(held, r)
		}
	}
	var healthy []*lhv1beta2.Replica
	for _, r := range held {
		if r.Spec.FailedAt == "" && r.Spec.Active {
			healthy = append(healthy, r)
		}
	}
	if len(healthy) > 0 {
		return healthy
	}
	var last time.Time
	failedAt := map[*lhv1beta2.Replica]time.Time{}
	for _, r := range held {
		if r.Spec.FailedAt == "" {
			continue // inactive and not failed: not a salvage candidate
		}
		at, err := time.Parse(time.RFC3339, r.Spec.FailedAt)
		if err != nil {
			// An unreadable stamp cannot be ruled out: it counts.
			at = time.Time{}
		}
		failedAt[r] = at
		if at.After(last) {
			last = at
		}
	}
	var salvage []*lhv1beta2.Replica
	for _, r := range held {
		at, failed := failedAt[r]
		if failed && (at.IsZero() || last.Sub(at) <= SalvageWindow) {
			salvage = append(salvage, r)
		}
	}
	return salvage
}
