package apps

import (
	"cmp"
	"context"
	"fmt"
	"maps"

	"github.com/sitecon/sitecon/kube"
)

// designationsFrom is the record of whose apps are whose
// (kube.Designations) as this node's config and the cluster show them:
// each active app's effective designated node (kube.NoNode while that
// node is not in the cluster); every node's name by its UUID; and the
// apps that name each claim.
func designationsFrom(set AppSet, states []PublishedApp, nodeByUUID map[string]string) kube.Designations {
	d := kube.Designations{Apps: map[string]string{}, Nodes: map[string]string{}, Claims: map[string][]string{}}
	for _, st := range states {
		if app, ok := set.Apps[st.UUID]; ok && app.Activate {
			d.Apps[st.UUID] = cmp.Or(st.DNIdNode, kube.NoNode)
		}
	}
	for uuid, node := range nodeByUUID {
		d.Nodes[uuid] = node
	}
	for uuid, app := range set.Apps {
		for _, ref := range app.VolumeRefs {
			if v, ok := set.Volumes[ref]; ok {
				claim := ClaimName(v)
				d.Claims[claim] = append(d.Claims[claim], uuid)
			}
		}
	}
	return d
}

// recordDesignations writes the record when this node leads with a
// server's credential and the record in the cluster (as the cache shows
// it: written by an earlier leader, changed or removed by hand) says
// otherwise. It writes nothing while a config file cannot be read (an app
// missing from the config may be in it: a record without it would refuse
// its node, and let the node that laid it out remove it) or the cluster
// cache is not synced (no nodes to name), nor within the file absence
// grace of its first read. A failed write is tried again (retry true).
func (c *Controller) recordDesignations(ctx context.Context, obs observation, states []PublishedApp) (retry bool) {
	if c.opts.NodeIdentity || !c.opts.Leader().IsLeader || !obs.synced || len(obs.set.Unknown) > 0 {
		return false
	}
	if obs.now.Sub(c.firstRead) < c.opts.FileAbsentGrace {
		// Just started, with no last good version of a file that may be
		// absent for a moment (HoldAbsentFiles): an app missing now may
		// be back within the grace, and the record an earlier leader
		// wrote stands till then (place retries at the grace's end).
		return false
	}
	d := designationsFrom(obs.set, states, obs.nodeByUUID)
	if live := recordIn(obs.data); live != nil && maps.Equal(live, d.Data()) {
		return false
	}
	if err := kube.WriteDesignations(ctx, c.snap.Clients().Core, d); err != nil {
		c.opts.Metrics.APIErrors.Inc()
		c.log.Error("record the apps' designated nodes: a worker may not lay out its apps until it is written", "err", err)
		return true
	}
	c.log.Info("recorded the apps' designated nodes", "apps", len(d.Apps), "nodes", len(d.Nodes), "claims", len(d.Claims))
	return false
}

// recordIn is the record's data as the cluster cache shows it (nil: none).
func recordIn(data kube.Data) map[string]string {
	record, _ := kube.DesignationsIn(data)
	return record
}

// awaitingRecord takes out of desired the workloads of the apps the record
// does not name node for (yet: the leader records a move as soon as its
// config says it, and the record's change wakes the next pass), and says
// why in appErr. Only for an agent with its node's identity, whose writes
// the record decides: written, they would be refused.
func awaitingRecord(desired map[string]Layout, record map[string]string, node string, appErr map[string]string) {
	for key, l := range desired {
		uuid := l.Object.GetLabels()[kube.LabelAppUUID]
		if uuid == "" || (l.GVR != GVRDeployment && l.GVR != GVRVMI && l.GVR != GVRVMIRS) {
			continue
		}
		recorded := kube.RecordedNode(record, uuid)
		if recorded == node {
			continue
		}
		delete(desired, key)
		says := "does not name its node yet"
		switch recorded {
		case "":
		case kube.NoNode:
			says = "says its node is not in the cluster"
		default:
			says = "names " + recorded
		}
		appErr[uuid] = fmt.Sprintf("not laid out here yet: the servers' record (%s) %s; this node's identity lays out only the apps recorded as its own, "+
			"and waits for the stats leader's config to agree with its own", kube.DesignationsConfigMapName, says)
	}
}
