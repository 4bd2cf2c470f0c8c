package kube

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kvv1 "kubevirt.io/api/core/v1"
)

// App kinds.
const (
	AppKindVM        = "vm"
	AppKindContainer = "container"
)

// AppStatus is one user app (VMI or container pod) and where it runs, as
// the cluster shows it. Not apps.PublishedApp, which is one node agent's
// gating verdict on a configured app.
type AppStatus struct {
	Name      string `json:"name"`
	UUID      string `json:"uuid,omitempty"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Node      string `json:"node,omitempty"`
	Phase     string `json:"phase"`
	Ready     bool   `json:"ready"`
	// Object is the pod or VMI name.
	Object string `json:"object"`
	// Mode is auto (may move: preferred affinity) or pinned (required);
	// DesignatedNode is the node its affinity names.
	Mode           string `json:"mode,omitempty"`
	DesignatedNode string `json:"designatedNode,omitempty"`
	// LastMove is the last time the snapshot saw the app start running on
	// another node than before.
	LastMove *AppMove `json:"lastMove,omitempty"`
	// Started is when the app's pod or VMI started on its node (the pod's
	// startTime; the VMI's move to Running, else its creation): written on
	// the object, so every reader has it, unlike LastMove, which only a
	// process that watched the move saw. A failover or a move starts a new
	// object, so this is when the app came to the node it is on.
	Started *time.Time `json:"started,omitempty"`
	// VNCPort is a VM's VNC console port on its node (0: none).
	VNCPort int `json:"vncPort,omitempty"`
	// HostPorts are the host Ethernet ports passed through to it (its
	// attachments host-<port>).
	HostPorts []string `json:"hostPorts,omitempty"`
	// Requires are the node requirements of its affinity besides the node
	// name (its node-select labels): a node it moves to must meet them.
	Requires []corev1.NodeSelectorRequirement `json:"requires,omitempty"`
	// NodeLost: the node it is on is not Ready (NotReady, or Unknown: its
	// kubelet stopped reporting), so it is not known to run: Phase is
	// then Unknown and ReportedPhase what its object last said.
	NodeLost      bool   `json:"nodeLost,omitempty"`
	ReportedPhase string `json:"reportedPhase,omitempty"`
	// Terminating are the app's older pods or VMIs still going away (a pod
	// hanging on a lost node while its replacement runs): a note on the
	// app, never where it runs.
	Terminating []AppObject `json:"terminating,omitempty"`
	// Unscheduled is the scheduler's word on a pod it has not placed (its
	// PodScheduled=False condition: "0/3 nodes are available: ..."); a
	// VM's is its launcher pod's. nil once placed, or before it says.
	Unscheduled *Condition `json:"unscheduled,omitempty"`
}

// AppObject is one pod or VMI of an app and the node it is on.
type AppObject struct {
	Object string `json:"object"`
	Node   string `json:"node,omitempty"`
}

// AppMove is an app seen running on a new node.
type AppMove struct {
	At   time.Time `json:"at"`
	From string    `json:"from"`
	To   string    `json:"to"`
}

// appStatuses gives one row per app. While Kubernetes replaces an app's pod
// or VMI (the old one hangs terminating on a lost node), the live object is
// the app: its node is where the app runs, and actions such as migrate read
// it from there; the terminating ones are noted on it.
func appStatuses(d Data, nodeLost func(node string) bool) []AppStatus {
	type candidate struct {
		AppStatus
		key      string // the app's key within its namespace
		leaving  bool
		rankTime time.Time
	}
	isApp := func(p *corev1.Pod) bool {
		// VM apps are reported through their VMI, not their launcher pod.
		return p.Namespace == AppNamespace && !strings.HasPrefix(p.Name, VirtLauncherPrefix)
	}
	n := len(d.VMIs)
	for _, p := range d.Pods {
		if isApp(p) {
			n++
		}
	}
	// A VM's launcher pod the scheduler has not placed, by its VMI's UID
	// (the label KubeVirt sets on it).
	var launcherUnscheduled map[string]*Condition
	for _, p := range d.Pods {
		if p.Namespace == AppNamespace && strings.HasPrefix(p.Name, VirtLauncherPrefix) {
			if c := unscheduled(p); c != nil {
				if launcherUnscheduled == nil {
					launcherUnscheduled = map[string]*Condition{}
				}
				launcherUnscheduled[p.Labels[labelVirtCreatedBy]] = c
			}
		}
	}
	all := make([]candidate, 0, n)
	for _, vmi := range d.VMIs {
		designated, mode := affinityTarget(vmi.Spec.Affinity)
		phase := string(vmi.Status.Phase)
		if vmi.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		key := AppKey(vmi.Labels, vmi.Name)
		all = append(all, candidate{key: key, leaving: vmi.DeletionTimestamp != nil,
			rankTime: vmi.CreationTimestamp.Time, AppStatus: AppStatus{
				Mode: mode, DesignatedNode: designated, LastMove: lastMove(d, key), Requires: nodeRequirements(vmi.Spec.Affinity),
				Started: vmiStarted(vmi),
				VNCPort: vncPort(vmi.Annotations), HostPorts: hostPorts(vmi.Annotations),
				Name:      AppName(vmi.Labels, vmi.Name),
				UUID:      vmi.Labels[LabelAppUUID],
				Namespace: vmi.Namespace,
				Kind:      AppKindVM,
				Node:      vmi.Status.NodeName,
				Phase:     phase,
				Ready:     vmi.Status.Phase == kvv1.Running && vmi.DeletionTimestamp == nil,
				Object:    vmi.Name,
				// Looked up only when there are any: most sites have none.
				Unscheduled: launcherUnscheduled[string(vmi.UID)],
			}})
	}
	for _, p := range d.Pods {
		if !isApp(p) {
			continue
		}
		phase := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		designated, mode := affinityTarget(p.Spec.Affinity)
		key := AppKey(p.Labels, p.Name)
		all = append(all, candidate{key: key, leaving: p.DeletionTimestamp != nil,
			rankTime: p.CreationTimestamp.Time, AppStatus: AppStatus{
				Mode: mode, DesignatedNode: designated, LastMove: lastMove(d, key), Requires: nodeRequirements(p.Spec.Affinity),
				HostPorts:   hostPorts(p.Annotations),
				Started:     podStarted(p),
				Name:        AppName(p.Labels, p.Name),
				UUID:        p.Labels[LabelAppUUID],
				Namespace:   p.Namespace,
				Kind:        AppKindContainer,
				Node:        p.Spec.NodeName,
				Phase:       phase,
				Ready:       PodReady(p) && p.DeletionTimestamp == nil,
				Object:      p.Name,
				Unscheduled: unscheduled(p),
			}})
	}
	for i := range all {
		all[i].markNodeLost(nodeLost)
	}
	// Within an app, live objects before terminating ones, ready before not,
	// newest first: the first is the one the app's row shows. Pointers are
	// sorted, not the candidates.
	sorted := make([]*candidate, len(all))
	for i := range all {
		sorted[i] = &all[i]
	}
	slices.SortFunc(sorted, func(a, b *candidate) int {
		// cmp.Or would work out every comparison first: most end at the key.
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Or(FalseFirst(a.leaving, b.leaving), FalseFirst(!a.Ready, !b.Ready),
			b.rankTime.Compare(a.rankTime), strings.Compare(a.Object, b.Object))
	})
	sameApp := func(a, b *candidate) bool { return a.key == b.key && a.Namespace == b.Namespace }
	rows := make([]*AppStatus, 0, len(sorted))
	for i := 0; i < len(sorted); {
		row := &sorted[i].AppStatus
		j := i + 1
		for ; j < len(sorted) && sameApp(sorted[j], sorted[i]); j++ {
			if sorted[j].leaving {
				row.Terminating = append(row.Terminating, AppObject{Object: sorted[j].Object, Node: sorted[j].Node})
				continue
			}
			// Two live objects for one app (a replica set surging) are both
			// running somewhere: each keeps its row.
			rows = append(rows, &sorted[j].AppStatus)
		}
		rows = append(rows, row)
		i = j
	}
	slices.SortFunc(rows, func(a, b *AppStatus) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Object, b.Object))
	})
	if len(rows) == 0 {
		return nil // no apps: null in `sitecon status -o json`, as always
	}
	out := make([]AppStatus, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	return out
}

// labelVirtCreatedBy on a virt-launcher pod is the UID of its VMI.
const labelVirtCreatedBy = "kubevirt.io/created-by"

// unscheduled is the pod's PodScheduled=False condition (the scheduler's
// reason it found no node), nil when it is placed or has none.
func unscheduled(p *corev1.Pod) *Condition {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return nil
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return &Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime.Time}
		}
	}
	return nil
}

// asReported takes every app as its object reports it.
func asReported(string) bool { return false }

// AppsAsReported gives one row per app, each as its object reports it:
// the drain preflight judges the apps on the node it drains as they say
// they are, not as the model's view of lost nodes would have them.
func AppsAsReported(d Data) []AppStatus { return appStatuses(d, asReported) }

// AppPhaseUnknown is the phase of an app on a lost node.
const AppPhaseUnknown = "Unknown"

// markNodeLost applies the one rule for an app on a lost node: whatever
// its pod or VMI last reported (a lost kubelet reports nothing more), it
// is not known to run. One leaving is leaving wherever it is.
func (a *AppStatus) markNodeLost(nodeLost func(string) bool) {
	if a.Node == "" || a.Phase == "Terminating" || !nodeLost(a.Node) {
		return
	}
	a.ReportedPhase, a.Phase, a.Ready, a.NodeLost = a.Phase, AppPhaseUnknown, false, true
}

// PhaseText is the app's phase as every reader says it: an app on a lost
// node is "Unknown (node-b lost)", never the Running its node last said.
func (a AppStatus) PhaseText() string {
	if a.NodeLost {
		return a.Phase + " (" + a.Node + " lost)"
	}
	return a.Phase
}

// UnschedulableAfter is how long the scheduler may find no node for an
// app's pod before that is a problem to act on: while a site boots, or a
// node comes back, pods wait seconds for a Ready node, and the advice to
// free or uncordon one would be wrong. The console's alert and the doctor
// judge alike.
const UnschedulableAfter = 30 * time.Second

// UnschedulableFor is how long the scheduler has found no node for the
// app (0: it has not said so).
func (a AppStatus) UnschedulableFor(now time.Time) time.Duration {
	if a.Unscheduled == nil || a.Unscheduled.Since.IsZero() {
		return 0
	}
	return now.Sub(a.Unscheduled.Since)
}

// NotRunningLine says an app that is not running, as the console's
// alert, sitecon status and the doctor all say it: on a lost node it is
// not known to run ("Unknown (node-b lost)").
func (a AppStatus) NotRunningLine() string {
	switch {
	case a.NodeLost:
		return fmt.Sprintf("app %s (%s) not known to run: %s", a.Name, a.Kind, a.PhaseText())
	}
	phase := cmp.Or(a.Phase, "n/a")
	if a.Node == "" {
		// Not placed yet: there is no node to name (the reason says why).
		return fmt.Sprintf("app %s (%s) not running: %s", a.Name, a.Kind, phase)
	}
	return fmt.Sprintf("app %s (%s) not running: %s on %s", a.Name, a.Kind, phase, a.Node)
}

// Away reports whether the app runs on another node than the one its
// layout designates (after a failover, its node back or not): it has a
// home to return to. An app going away (Terminating) or not placed is not.
func (a AppStatus) Away() bool {
	return a.DesignatedNode != "" && a.Node != "" && a.Node != a.DesignatedNode && a.Phase != "Terminating"
}

// AwaySince is when an away app came to the node it is on: its object's
// start, else the move the snapshot saw it make there; zero when neither
// is known.
func (a AppStatus) AwaySince() time.Time {
	switch {
	case a.Started != nil:
		return *a.Started
	case a.LastMove != nil && a.LastMove.To == a.Node:
		return a.LastMove.At
	}
	return time.Time{}
}

// AwayApps are the apps away from home, longest away first (unknown
// times last), then by name.
func AwayApps(apps []AppStatus) []AppStatus {
	var out []AppStatus
	for _, a := range apps {
		if a.Away() {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(x, y AppStatus) int {
		tx, ty := x.AwaySince(), y.AwaySince()
		if tx.IsZero() != ty.IsZero() {
			return FalseFirst(tx.IsZero(), ty.IsZero())
		}
		return cmp.Or(tx.Compare(ty), strings.Compare(x.Name, y.Name))
	})
	return out
}

func podStarted(p *corev1.Pod) *time.Time {
	if p.Status.StartTime == nil || p.Spec.NodeName == "" {
		return nil
	}
	t := p.Status.StartTime.Time
	return &t
}

// vmiStarted is when the VMI went Running (KubeVirt stamps each phase it
// enters), else when it was made; nil before it has a node.
func vmiStarted(vmi *kvv1.VirtualMachineInstance) *time.Time {
	if vmi.Status.NodeName == "" {
		return nil
	}
	t := vmi.CreationTimestamp.Time
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		if p.Phase == kvv1.Running {
			t = p.PhaseTransitionTimestamp.Time
		}
	}
	if t.IsZero() {
		return nil
	}
	return &t
}

// FalseFirst orders false before true.
func FalseFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func vncPort(annotations map[string]string) int {
	port, err := strconv.Atoi(annotations[AnnotationVNCPort])
	if err != nil || port <= 0 || port > 65535 {
		return 0
	}
	return port
}

// hostPorts are the host ports an object's Multus attachments pass
// through: the names host-<port> in its networks annotation (a plain
// comma-separated list; the JSON form names no sitecon attachment).
func hostPorts(annotations map[string]string) []string {
	var out []string
	for _, name := range strings.Split(annotations[AnnotationNetworks], ",") {
		name = strings.TrimSpace(name)
		name = name[strings.LastIndex(name, "/")+1:] // namespace/name
		if port, ok := strings.CutPrefix(name, "host-"); ok && port != "" {
			out = append(out, port)
		}
	}
	return out
}

func lastMove(d Data, key string) *AppMove {
	m, ok := d.AppMoves[key]
	if !ok {
		return nil
	}
	move := m // on the heap only when there is one
	return &move
}

// AppKey identifies an app across the pods and VMIs that run it: its UUID
// label, else its name label, else the object's own name.
func AppKey(labels map[string]string, object string) string {
	if u := labels[LabelAppUUID]; u != "" {
		return u
	}
	if n := labels[LabelAppName]; n != "" {
		return n
	}
	return object
}

// AppName is an app's name: its name label, else fallback (the object's).
func AppName(labels map[string]string, fallback string) string {
	if n := labels[LabelAppName]; n != "" {
		return n
	}
	return fallback
}
