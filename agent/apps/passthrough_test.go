package apps

import (
	"maps"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// An app's adapters are read as EVE writes them (the type by number or by
// name) and checked: Ethernet ports only, a name Linux gives an interface
// that also makes a Kubernetes name for its attachment, none twice, and
// the app pinned (the port is on its designated node).
func TestParseAdapters(t *testing.T) {
	base := `{"uuid":"` + appID + `","displayname":"plc-gw","activate":true,"kind":"container","image":"registry.local/gw:1",
	 "designated_node_id":"` + nodeA + `","affinity":"required","adapters":`
	for name, tc := range map[string]struct {
		adapters string
		affinity string // replaces "required" when set
		ports    []string
		problem  string // "": parses
	}{
		"one port, by number":               {adapters: `[{"type":1,"name":"eth1"}]`, ports: []string{"eth1"}},
		"by EVE's name":                     {adapters: `[{"type":"PhyIoNetEth","name":"enp3s0f1"}]`, ports: []string{"enp3s0f1"}},
		"two ports, in order":               {adapters: `[{"type":1,"name":"eth2"},{"type":1,"name":"eth1.100"}]`, ports: []string{"eth2", "eth1.100"}},
		"15 characters":                     {adapters: `[{"type":1,"name":"enx0123456789ab"}]`, ports: []string{"enx0123456789ab"}},
		"no adapters":                       {adapters: `[]`},
		"a USB device":                      {adapters: `[{"type":2,"name":"usb1"}]`, problem: "adapters[0].type: 2: only 1 (PhyIoNetEth"},
		"a type name sitecon does not pass": {adapters: `[{"type":"PhyIoUSB","name":"usb1"}]`, problem: `adapter type "PhyIoUSB"`},
		"no name":                           {adapters: `[{"type":1}]`, problem: "adapters[0].name: missing"},
		"16 characters":                     {adapters: `[{"type":1,"name":"enx0123456789abc"}]`, problem: "is not a Linux interface name"},
		"a slash":                           {adapters: `[{"type":1,"name":"eth/1"}]`, problem: "is not a Linux interface name"},
		"a colon":                           {adapters: `[{"type":1,"name":"eth1:0"}]`, problem: "is not a Linux interface name"},
		"a space":                           {adapters: `[{"type":1,"name":"eth 1"}]`, problem: "is not a Linux interface name"},
		"a control character":               {adapters: `[{"type":1,"name":"eth\u001b1"}]`, problem: "is not a Linux interface name"},
		"dot-dot":                           {adapters: `[{"type":1,"name":".."}]`, problem: "is not a Linux interface name"},
		"upper case (Linux allows it, a Kubernetes name does not)": {adapters: `[{"type":1,"name":"Eth1"}]`, problem: "its attachment host-Eth1 must be a Kubernetes name"},
		"an underscore":         {adapters: `[{"type":1,"name":"eth_1"}]`, problem: "its attachment host-eth_1 must be a Kubernetes name"},
		"listed twice":          {adapters: `[{"type":1,"name":"eth1"},{"type":1,"name":"eth1"}]`, problem: `adapters[1].name: "eth1" is listed twice`},
		"an auto-migrating app": {adapters: `[{"type":1,"name":"eth1"}]`, affinity: "preferred", problem: `adapters: a passed-through port is on the designated node: the app must be pinned ("affinity": "required"), not "preferred"`},
	} {
		t.Run(name, func(t *testing.T) {
			doc := base + tc.adapters + "}"
			if tc.affinity != "" {
				doc = strings.Replace(doc, `"affinity":"required"`, `"affinity":"`+tc.affinity+`"`, 1)
			}
			app, err := ParseAppConfig([]byte(doc))
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("error %v, want one saying %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := app.HostPorts(); !slices.Equal(got, tc.ports) {
				t.Fatalf("host ports %v, want %v", got, tc.ports)
			}
		})
	}
	// An auto app that omits affinity is auto: refused too.
	noAffinity := strings.Replace(base+`[{"type":1,"name":"eth1"}]}`, `"affinity":"required",`, "", 1)
	if _, err := ParseAppConfig([]byte(noAffinity)); err == nil || !strings.Contains(err.Error(), "must be pinned") {
		t.Fatalf("an app without affinity (auto) asking for a port: %v", err)
	}
}

// One port, one app: the app whose live layout holds a port keeps it,
// otherwise the first by name (then UUID) gets it; an app gets all its
// ports or none; one port name on two nodes is two ports.
func TestAssignPorts(t *testing.T) {
	req := func(uuid, name, node string, ports ...string) PortRequest {
		return PortRequest{UUID: uuid, Name: name, Node: node, Ports: ports}
	}
	for name, tc := range map[string]struct {
		reqs    []PortRequest
		holders map[string][]string
		refused []string          // UUIDs
		reason  map[string]string // UUID: a part of its reason
	}{
		"no conflict":            {reqs: []PortRequest{req("1", "a", "node-a", "eth1"), req("2", "b", "node-a", "eth2")}},
		"same name on two nodes": {reqs: []PortRequest{req("1", "a", "node-a", "eth1"), req("2", "b", "node-b", "eth1")}},
		"new apps: the first by name": {reqs: []PortRequest{req("2", "zeta", "node-a", "eth1"), req("1", "alpha", "node-a", "eth1")},
			refused: []string{"2"}, reason: map[string]string{"2": "host port eth1 (passed through to alpha) on node-a is in use"}},
		"same name: by UUID": {reqs: []PortRequest{req("2", "gw", "node-a", "eth1"), req("1", "gw", "node-a", "eth1")}, refused: []string{"2"}},
		"the holder keeps it over a name that sorts first": {reqs: []PortRequest{req("1", "alpha", "node-a", "eth1"), req("2", "zeta", "node-a", "eth1")},
			holders: map[string][]string{"2": {"eth1"}}, refused: []string{"1"}, reason: map[string]string{"1": "passed through to zeta"}},
		"all or none: a refused app holds none of its ports": {
			reqs:    []PortRequest{req("1", "a", "node-a", "eth1"), req("2", "b", "node-a", "eth1", "eth2"), req("3", "c", "node-a", "eth2")},
			refused: []string{"2"}},
		"holding another port than the one asked for does not count": {reqs: []PortRequest{req("1", "alpha", "node-a", "eth1"), req("2", "zeta", "node-a", "eth1")},
			holders: map[string][]string{"2": {"eth9"}}, refused: []string{"2"}},
	} {
		t.Run(name, func(t *testing.T) {
			refused := AssignPorts(tc.reqs, tc.holders)
			if got := slices.Sorted(maps.Keys(refused)); !slices.Equal(got, tc.refused) {
				t.Fatalf("refused %v (%v), want %v", got, refused, tc.refused)
			}
			for uuid, part := range tc.reason {
				if !strings.Contains(refused[uuid], part) {
					t.Fatalf("reason for %s: %q, want it to say %q", uuid, refused[uuid], part)
				}
			}
			// The choice does not depend on the order the apps come in.
			reversed := slices.Clone(tc.reqs)
			slices.Reverse(reversed)
			if again := AssignPorts(reversed, tc.holders); !maps.Equal(again, refused) {
				t.Fatalf("in reverse order: %v, was %v", again, refused)
			}
		})
	}
}

// The layout of an app with a port: its pod (a VM's VMI) names the
// attachment for Multus and its workload the port; the attachment is the
// host-device config EVE writes.
func TestLayoutPassthrough(t *testing.T) {
	app := testApp()
	app.VolumeRefs = nil
	app.Affinity, app.Adapters = AffinityRequired, []IoAdapter{{Type: IoNetEth, Name: "eth1"}, {Type: IoNetEth, Name: "eth2"}}
	dep, err := LayoutApp(app, nodeA, "node-a", nil, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := unstructured.NestedString(dep.Object.Object, "spec", "template", "metadata", "annotations", AnnotationNetworks)
	if got != "host-eth1,host-eth2" || dep.Object.GetAnnotations()[AnnotationHostPorts] != "eth1,eth2" {
		t.Fatalf("deployment: pod networks %q, host ports %q", got, dep.Object.GetAnnotations()[AnnotationHostPorts])
	}
	vm := app
	vm.Kind, vm.Resources.Memory, vm.EnableVNC = KindVM, "1Gi", true
	vmi, err := LayoutApp(vm, nodeA, "node-a", nil, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ann := vmi.Object.GetAnnotations(); vmi.GVR != GVRVMI || ann[AnnotationNetworks] != "host-eth1,host-eth2" || ann[kube.AnnotationVNCPort] != "5900" {
		t.Fatalf("VMI %s annotations %v", vmi.GVR.Resource, ann)
	}
	// An app without ports is laid out as before: same hash, no annotation.
	without := testApp()
	without.VolumeRefs = nil
	plain, _ := LayoutApp(without, nodeA, "node-a", nil, PlacementOptions{})
	if _, ok := plain.Object.GetAnnotations()[AnnotationHostPorts]; ok {
		t.Fatalf("an app without ports carries %s", AnnotationHostPorts)
	}
	nad, err := LayoutNAD("eth1")
	if err != nil {
		t.Fatal(err)
	}
	config, _, _ := unstructured.NestedString(nad.Object.Object, "spec", "config")
	if nad.Name() != "host-eth1" || nad.Namespace() != kube.AppNamespace || nad.Object.GetLabels()[LabelManagedBy] != FieldManager ||
		config != `{"cniVersion":"0.3.1","plugins":[{"device":"eth1","type":"host-device"}]}` {
		t.Fatalf("attachment %s/%s labels %v config %s", nad.Namespace(), nad.Name(), nad.Object.GetLabels(), config)
	}
}

// desiredLayouts with ports: the winner's workload and attachments, the
// refused app left out with its reason; without the attachment API no
// app with a port is laid out, and the others are.
func TestDesiredLayoutsPassthrough(t *testing.T) {
	mk := func(uuid, name string, ports ...string) AppConfig {
		a := testApp()
		a.UUID, a.DisplayName, a.Affinity, a.VolumeRefs = uuid, name, AffinityRequired, nil
		for _, p := range ports {
			a.Adapters = append(a.Adapters, IoAdapter{Type: IoNetEth, Name: p})
		}
		return a
	}
	const gw, second, plain = "a0000000-0000-4000-8000-000000000001", "a0000000-0000-4000-8000-000000000002", "a0000000-0000-4000-8000-000000000003"
	set := AppSet{Apps: map[string]AppConfig{gw: mk(gw, "gw", "eth1"), second: mk(second, "second", "eth1"), plain: mk(plain, "plain")}}
	decisions := map[string]AppDecision{gw: {Place: true}, second: {Place: true}, plain: {Place: true}}
	states := []PublishedApp{{UUID: gw, DNIdNode: "node-a"}, {UUID: second, DNIdNode: "node-a"}, {UUID: plain, DNIdNode: "node-a"}}

	desired, appErr, refused := desiredLayouts(set, decisions, states, nodeA, ownClaims(nodeA), PlacementOptions{}, passthroughView{served: true})
	ns := kube.AppNamespace
	want := []string{layoutKey(GVRDeployment, ns, WorkloadName(set.Apps[gw])), layoutKey(GVRDeployment, ns, WorkloadName(set.Apps[plain])), layoutKey(GVRNAD, ns, "host-eth1")}
	if got := slices.Sorted(maps.Keys(desired)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("desired %v, want %v", got, want)
	}
	if !strings.Contains(appErr[second], "one port, one app") || refused[second] != appErr[second] || len(appErr) != 1 {
		t.Fatalf("app errors %v, refused %v", appErr, refused)
	}

	desired, appErr, _ = desiredLayouts(set, decisions, states, nodeA, ownClaims(nodeA), PlacementOptions{}, passthroughView{})
	if got := slices.Collect(maps.Keys(desired)); len(got) != 1 || got[0] != want[1] {
		t.Fatalf("without the attachment API: desired %v, want only %s", got, want[1])
	}
	if !strings.Contains(appErr[gw], "NetworkAttachmentDefinitions") || !strings.Contains(appErr[second], "NetworkAttachmentDefinitions") {
		t.Fatalf("without the attachment API: app errors %v", appErr)
	}
}

// An attachment sitecon made goes only when nothing uses its port: no
// desired layout, no active app of the config (on any node), no live
// workload; never while a file cannot be read; never one that is not
// sitecon's (no port label).
func TestNADsToRemove(t *testing.T) {
	nad := func(port string) *unstructured.Unstructured {
		l, _ := LayoutNAD(port)
		return l.Object
	}
	workload := func(uuid, ports string) placedObject {
		u := &unstructured.Unstructured{}
		u.SetName("w-" + uuid)
		u.SetNamespace(kube.AppNamespace)
		u.SetLabels(map[string]string{kube.LabelAppUUID: uuid})
		u.SetAnnotations(map[string]string{AnnotationHostPorts: ports})
		return placedObject{GVR: GVRDeployment, Object: u}
	}
	app := func(uuid string, active bool, ports ...string) AppConfig {
		a := testApp()
		a.UUID, a.Activate, a.Affinity = uuid, active, AffinityRequired
		for _, p := range ports {
			a.Adapters = append(a.Adapters, IoAdapter{Type: IoNetEth, Name: p})
		}
		return a
	}
	foreign := &unstructured.Unstructured{}
	foreign.SetName("host-eth7")
	foreign.SetNamespace(kube.AppNamespace)
	nl, _ := LayoutNAD("eth1")
	deleting := nad("eth6")
	deleting.SetDeletionTimestamp(ptr.To(metav1.Now()))
	all := []*unstructured.Unstructured{nad("eth1"), nad("eth2"), nad("eth3"), nad("eth4"), nad("eth5"), deleting, foreign}
	set := AppSet{Apps: map[string]AppConfig{
		"a": app("a", true, "eth2"),  // another node's app asks for eth2
		"b": app("b", false, "eth4"), // deactivated: does not use eth4
	}}
	workloads := []placedObject{workload("c", "eth3")} // left the config, still laid out
	desired := map[string]Layout{nl.key(): nl}
	var got []string
	for _, n := range nadsToRemove(all, desired, set, workloads) {
		got = append(got, n.GetName())
	}
	if want := []string{"host-eth4", "host-eth5"}; !slices.Equal(got, want) {
		t.Fatalf("removed %v, want %v", got, want)
	}
	set.Unknown = []string{"/apps/broken.json"}
	if held := nadsToRemove(all, desired, set, workloads); len(held) != 0 {
		t.Fatalf("with a file that cannot be read, removed %d", len(held))
	}
}
