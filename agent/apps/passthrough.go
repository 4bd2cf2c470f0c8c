package apps

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sitecon/sitecon/kube"
)

// Ethernet passthrough: an app whose config assigns it a host Ethernet
// port gets that port inside its pod through Multus and the host-device
// CNI plugin, as EVE's zedkube does it (pkg/pillar/cmd/zedkube/
// etherpassthrough.go in lf-edge/eve): a NetworkAttachmentDefinition
// host-<port> in the apps namespace, named in the pod's
// k8s.v1.cni.cncf.io/networks annotation. The port is on one device, so
// such an app is pinned to its designated node; and a port moved into one
// app's pod is gone from the host, so one port serves one app.

// IoType is the type of an adapter assigned to an app: EVE's PhyIoType
// (eve-api evecommon), numbered as there.
type IoType int

// IoNetEth is a host Ethernet port (PhyIoNetEth), the one adapter type
// sitecon passes through.
const IoNetEth IoType = 1

// ioTypeNames are the names EVE's API gives the types sitecon recognises
// (protobuf's JSON writes an enum by name); every other type is read by
// number only, and refused.
var ioTypeNames = map[string]IoType{"PhyIoNetEth": IoNetEth, "IoNetEth": IoNetEth}

// UnmarshalJSON reads the type as a number or as EVE's name for it.
func (t *IoType) UnmarshalJSON(data []byte) error {
	var name string
	if err := json.Unmarshal(data, &name); err == nil {
		v, ok := ioTypeNames[name]
		if !ok {
			return fmt.Errorf("adapter type %q: use %d (PhyIoNetEth, a host Ethernet port)", name, IoNetEth)
		}
		*t = v
		return nil
	}
	var n int
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("adapter type %s: a number or an EVE type name", data)
	}
	*t = IoType(n)
	return nil
}

// IoAdapter is one host device assigned to an app (EVE's Adapter /
// IoAdapter): its type and its name, for an Ethernet port the Linux
// interface name on the designated node.
type IoAdapter struct {
	Type IoType `json:"type"`
	Name string `json:"name"`
}

// HostPorts are the host Ethernet ports the app asks for, in config order.
func (a AppConfig) HostPorts() []string {
	var out []string
	for _, io := range a.Adapters {
		if io.Type == IoNetEth {
			out = append(out, io.Name)
		}
	}
	return out
}

// NADName is the NetworkAttachmentDefinition that passes port through, as
// EVE names it.
func NADName(port string) string { return "host-" + port }

// What passthrough writes.
const (
	// AnnotationNetworks is Multus's list of the attachments a pod asks
	// for, comma-separated names in the pod's namespace.
	AnnotationNetworks = kube.AnnotationNetworks
	// AnnotationHostPorts lists, on an app's workload, the host ports its
	// layout passes through: which app holds a port, read from what is
	// laid out (AssignPorts), and which attachments are in use.
	AnnotationHostPorts = "sitecon.io/host-ports"
	// LabelHostPort is the port a sitecon attachment passes through.
	LabelHostPort = "sitecon.io/host-port"
)

// GVRNAD is Multus's NetworkAttachmentDefinition.
var GVRNAD = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// LayoutNAD is the attachment that passes port through: the host-device
// CNI plugin moves the host's interface into the pod's network namespace.
// It names no node: one port name on every device is one attachment, kept
// while any app uses it (see nadsToRemove).
func LayoutNAD(port string) (Layout, error) {
	cni, err := json.Marshal(map[string]any{"cniVersion": "0.3.1",
		"plugins": []map[string]string{{"type": "host-device", "device": port}}})
	if err != nil {
		return Layout{}, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVRNAD.GroupVersion().String(), "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": NADName(port), "namespace": kube.AppNamespace,
			"labels": map[string]any{LabelManagedBy: FieldManager, LabelHostPort: port}},
		"spec": map[string]any{"config": string(cni)},
	}}
	return finish(GVRNAD, u, nil)
}

// fieldProblem is one problem with one field of a config.
type fieldProblem struct{ field, msg string }

// adapterProblems checks an app's adapters: Ethernet ports only, each a
// name Linux gives an interface and one that makes a valid attachment
// name, none twice, and the app pinned (the port is on its node).
func adapterProblems(a AppConfig) []fieldProblem {
	var out []fieldProblem
	seen := map[string]bool{}
	for i, io := range a.Adapters {
		field := fmt.Sprintf("adapters[%d]", i)
		if io.Type != IoNetEth {
			out = append(out, fieldProblem{field + ".type", fmt.Sprintf("%d: only %d (PhyIoNetEth, a host Ethernet port) can be passed through in a cluster", io.Type, IoNetEth)})
			continue
		}
		if msg := interfaceNameProblem(io.Name); msg != "" {
			out = append(out, fieldProblem{field + ".name", msg})
			continue
		}
		if seen[io.Name] {
			out = append(out, fieldProblem{field + ".name", fmt.Sprintf("%q is listed twice", io.Name)})
		}
		seen[io.Name] = true
	}
	if len(seen) > 0 && a.Affinity != AffinityRequired {
		out = append(out, fieldProblem{"adapters", fmt.Sprintf("a passed-through port is on the designated node: the app must be pinned (\"affinity\": %q), not %q", AffinityRequired, a.Affinity)})
	}
	return out
}

// interfaceNameProblem says why name is not a host port sitecon can pass
// through ("": it is): Linux takes 1 to 15 bytes, not "." or "..", without
// '/', ':' or white space (dev_valid_name), and the attachment host-<name>
// must be a Kubernetes object name (lower case, digits, '-', '.').
func interfaceNameProblem(name string) string {
	const linux = "1 to 15 characters, none of '/', ':' or white space, not '.' or '..'"
	switch {
	case name == "":
		return "missing: the host interface name (like eth1)"
	case len(name) > 15, name == ".", name == "..",
		strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return fmt.Sprintf("%q is not a Linux interface name (%s)", name, linux)
	}
	if errs := validation.IsDNS1123Subdomain(NADName(name)); len(errs) > 0 {
		return fmt.Sprintf("%q: its attachment %s must be a Kubernetes name: lower-case letters, digits, '-' or '.', starting and ending with a letter or digit", name, NADName(name))
	}
	return ""
}

// PortRequest is an app this node lays out this pass that asks for host
// ports on the node it is pinned to.
type PortRequest struct {
	UUID, Name string
	// Node is the node the app is pinned to: its ports are that node's.
	Node  string
	Ports []string
}

// AssignPorts decides which app gets each host port (one port, one app)
// and returns the refused apps' reasons by UUID. holders are the ports
// each app's live layout passes through now, by app UUID (what is laid
// out, so the choice survives an agent restart). The apps are served in
// one order, an app getting all its ports or none: first those whose live
// layout already holds one of the ports they ask for (a running app never
// loses its port to a newcomer), then by name, then UUID.
func AssignPorts(reqs []PortRequest, holders map[string][]string) map[string]string {
	holds := func(r PortRequest) bool {
		return slices.ContainsFunc(r.Ports, func(p string) bool { return slices.Contains(holders[r.UUID], p) })
	}
	order := slices.Clone(reqs)
	slices.SortFunc(order, func(a, b PortRequest) int {
		if ha, hb := holds(a), holds(b); ha != hb {
			if ha {
				return -1
			}
			return 1
		}
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.UUID, b.UUID))
	})
	owner := map[string]PortRequest{} // by node + "/" + port
	refused := map[string]string{}
	for _, r := range order {
		var taken []string
		for _, p := range r.Ports {
			if o, ok := owner[r.Node+"/"+p]; ok {
				taken = append(taken, fmt.Sprintf("%s (passed through to %s)", p, o.Name))
			}
		}
		if len(taken) > 0 {
			refused[r.UUID] = fmt.Sprintf("not laid out: host port %s on %s is in use: one port, one app (the app that holds a port keeps it, otherwise the first by name)",
				strings.Join(taken, ", "), r.Node)
			continue
		}
		for _, p := range r.Ports {
			owner[r.Node+"/"+p] = r
		}
	}
	return refused
}

// livePorts are the host ports each app's live workloads pass through,
// by app UUID.
func livePorts(workloads []placedObject) map[string][]string {
	out := map[string][]string{}
	for _, w := range workloads {
		if w.Object.GetDeletionTimestamp() != nil {
			continue
		}
		ports := splitPorts(w.Object.GetAnnotations()[AnnotationHostPorts])
		if uuid := w.Object.GetLabels()[kube.LabelAppUUID]; uuid != "" && len(ports) > 0 {
			out[uuid] = append(out[uuid], ports...)
		}
	}
	return out
}

func splitPorts(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// nadsToRemove chooses the attachments sitecon made that no app uses any
// more: none of this pass's desired layouts is one, no active app of the
// config asks for its port (on any node: the attachment is shared by
// name), and no live workload passes the port through. While a file
// cannot be read (set.Unknown) nothing is removed: an app that uses it may
// be in that file.
func nadsToRemove(nads []*unstructured.Unstructured, desired map[string]Layout, set AppSet, workloads []placedObject) []*unstructured.Unstructured {
	if len(set.Unknown) > 0 {
		return nil
	}
	used := map[string]bool{}
	for _, a := range set.Apps {
		if a.Activate {
			for _, p := range a.HostPorts() {
				used[p] = true
			}
		}
	}
	for _, ports := range livePorts(workloads) {
		for _, p := range ports {
			used[p] = true
		}
	}
	var out []*unstructured.Unstructured
	for _, n := range nads {
		port := n.GetLabels()[LabelHostPort]
		if _, ok := desired[layoutKey(GVRNAD, n.GetNamespace(), n.GetName())]; ok || port == "" || used[port] || n.GetDeletionTimestamp() != nil {
			continue
		}
		out = append(out, n)
	}
	return out
}

// passthroughAnnotations are what an app's layout carries for its ports:
// the attachments its pod asks for, and the ports on the workload itself.
// Both nil for an app without ports.
func passthroughAnnotations(app AppConfig) (pod, workload map[string]string) {
	ports := app.HostPorts()
	if len(ports) == 0 {
		return nil, nil
	}
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = NADName(p)
	}
	return map[string]string{AnnotationNetworks: strings.Join(names, ",")},
		map[string]string{AnnotationHostPorts: strings.Join(ports, ",")}
}

// portRequests are the apps among desired (laid out by this node this
// pass) that ask for host ports, with the node each is pinned to.
func portRequests(set AppSet, desiredApps map[string]string) []PortRequest {
	var out []PortRequest
	for _, uuid := range slices.Sorted(maps.Keys(desiredApps)) {
		app := set.Apps[uuid]
		if ports := app.HostPorts(); len(ports) > 0 {
			out = append(out, PortRequest{UUID: uuid, Name: app.DisplayName, Node: desiredApps[uuid], Ports: ports})
		}
	}
	return out
}
