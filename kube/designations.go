package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreapply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
)

// The record of whose app is whose (DesignationsConfigMapName): the
// stats leader, a server, writes it from its own app configs; the policy
// NodeAppsPolicyName reads it, to keep a node's identity to its own apps
// (kube/access/designations.go says how).

// Designations is what the record says, as the stats leader works it out.
type Designations struct {
	// Apps is the node that lays out each active app, by app UUID: the
	// app's effective designated node (an on-site override applied), or
	// NoNode. An app not in it (deactivated, or gone from the config) is
	// removed by the node that laid it out.
	Apps map[string]string
	// Nodes is each node's name, by its UUID (its Node's node-uuid
	// label, which no node's identity may change).
	Nodes map[string]string
	// Claims is the apps that may mount each claim, by claim name.
	Claims map[string][]string
}

// NoNode is what the record says of an active app whose designated node is
// not in the cluster: no node lays it out, nor removes it.
const NoNode = "-"

// RecordedNode is the node the record's data names for an app ("": none).
func RecordedNode(data map[string]string, app string) string {
	return data[DesignationAppPrefix+app]
}

// Keys of the record's entries: the node policy (kube/access) reads them.
const (
	DesignationAppPrefix   = "app."
	DesignationNodePrefix  = "node."
	DesignationClaimPrefix = "claim."
)

// Data is the record's ConfigMap data.
func (d Designations) Data() map[string]string {
	out := map[string]string{}
	for uuid, node := range d.Apps {
		out[DesignationAppPrefix+uuid] = node
	}
	for uuid, node := range d.Nodes {
		out[DesignationNodePrefix+uuid] = node
	}
	for claim, apps := range d.Claims {
		out[DesignationClaimPrefix+claim] = strings.Join(slices.Sorted(slices.Values(apps)), " ")
	}
	return out
}

// WriteDesignations writes the record, all of it: entries it no longer
// holds go (server-side apply, this field manager owning every entry).
func WriteDesignations(ctx context.Context, cs kubernetes.Interface, d Designations) error {
	cm := coreapply.ConfigMap(DesignationsConfigMapName, AppNamespace).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": "sitecon"}).
		WithData(d.Data())
	if _, err := cs.CoreV1().ConfigMaps(AppNamespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "sitecon-designations", Force: true}); err != nil {
		return fmt.Errorf("record the apps' designated nodes: %w", err)
	}
	return nil
}

// DesignationsIn is the record's data as data shows it, and whether there
// is a record at all.
func DesignationsIn(data Data) (map[string]string, bool) {
	for _, cm := range data.ConfigMaps {
		if cm.Namespace == AppNamespace && cm.Name == DesignationsConfigMapName {
			return cm.Data, true
		}
	}
	return nil, false
}
