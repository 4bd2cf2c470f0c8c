package apps

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// desiredLayouts is what this node lays out this pass, by layout key: the
// workload of each active app it is the effective DNId of (and whose
// designated node is in the cluster), the attachment of each host port
// those apps pass through, the claim of each volume it is the designated
// node of (writesClaimsOf: see Controller.claimWriter), and the Longhorn storage
// class of each replica count those claims use. An app that cannot be laid out is left out, its error
// returned by app UUID to stand in its state; what is left out is what the
// orphan reconciler may remove. portRefused are the apps left out because
// a host port they ask for went to another app (AssignPorts), by UUID.
func desiredLayouts(set AppSet, decisions map[string]AppDecision, states []PublishedApp, myUUID string, writesClaimsOf func(dnid string) bool, opts PlacementOptions, ports passthroughView) (desired map[string]Layout, appErr, portRefused map[string]string) {
	desired = map[string]Layout{}
	appErr = map[string]string{}
	hosts := designatedNodes(states)
	placing := map[string]string{} // app UUID: the node it is laid out for
	for uuid, dec := range decisions {
		app, dnidNode := set.Apps[uuid], hosts[uuid]
		if !dec.Place || !app.Activate || dnidNode == "" {
			continue
		}
		placing[uuid] = dnidNode
	}
	portRefused = AssignPorts(portRequests(set, placing), ports.holders)
	for uuid, dnidNode := range placing {
		app := set.Apps[uuid]
		if len(app.HostPorts()) > 0 && !ports.served {
			appErr[uuid] = "not laid out: passing a host port through needs the cluster to serve NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1, Multus) and a server as the app's node (a worker's agent writes no attachment)"
			continue
		}
		if why, ok := portRefused[uuid]; ok {
			appErr[uuid] = why
			continue
		}
		l, err := LayoutApp(app, myUUID, dnidNode, set.Volumes, opts)
		if err != nil {
			appErr[uuid] = err.Error()
			continue
		}
		desired[l.key()] = l
		for _, port := range app.HostPorts() {
			if nad, err := LayoutNAD(port); err == nil {
				desired[nad.key()] = nad
			}
		}
	}
	var classes []int
	for _, v := range set.Volumes {
		if !writesClaimsOf(v.DesignatedNodeID) {
			continue
		}
		l, err := LayoutVolume(v)
		if err != nil {
			// A size that does not parse was refused with its file.
			continue
		}
		desired[l.key()] = l
		classes = append(classes, v.ReplicaCount)
	}
	for _, r := range classes {
		if l, err := LayoutStorageClass(r); err == nil {
			desired[l.key()] = l
		}
	}
	return desired, appErr, portRefused
}

// designatedNodes is the node name of each app's effective DNId, by app
// UUID ("" when that node is not in the cluster).
// passthroughView is what the layout of apps with host ports needs from
// the cluster: whether it serves NetworkAttachmentDefinitions, and the
// ports each app's live layout passes through now (livePorts).
type passthroughView struct {
	served  bool
	holders map[string][]string
}

func designatedNodes(states []PublishedApp) map[string]string {
	out := map[string]string{}
	for _, st := range states {
		out[st.UUID] = st.DNIdNode
	}
	return out
}

// layoutKey names one laid-out object across kinds: the memory of the
// placement reconcilers is kept by it.
func layoutKey(gvr schema.GroupVersionResource, ns, name string) string {
	return gvr.Resource + "/" + ns + "/" + name
}

func (l Layout) key() string { return layoutKey(l.GVR, l.Namespace(), l.Name()) }
