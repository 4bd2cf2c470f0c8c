package kube

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodRow is one pod as the console lists it.
type PodRow struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Phase     string    `json:"phase"`
	Ready     string    `json:"ready"`
	Restarts  int32     `json:"restarts"`
	Node      string    `json:"node"`
	Created   time.Time `json:"created"`
	// Healthy is false for a pod that is failed, or not ready and not done.
	Healthy bool `json:"healthy"`
	// Conditions are the pod's (PodScheduled, Ready...); Unscheduled is
	// its PodScheduled=False while no node is chosen (the scheduler's
	// reason); Containers are its containers' states. The console's pod
	// detail draws them.
	Conditions  []Condition      `json:"conditions,omitempty"`
	Unscheduled *Condition       `json:"unscheduled,omitempty"`
	Containers  []ContainerState `json:"containers,omitempty"`
}

// ContainerState is one container of a pod as its status says: its state
// now (running, waiting or terminated, with the reason), how often it
// restarted and why it last ended.
type ContainerState struct {
	Name     string `json:"name"`
	Init     bool   `json:"init,omitempty"`
	Ready    bool   `json:"ready"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	Restarts int32  `json:"restarts"`
	// LastTermination is why the container last ended ("Error, exit 1",
	// "OOMKilled"), with LastEnded when; empty when it never did.
	LastTermination string    `json:"lastTermination,omitempty"`
	LastEnded       time.Time `json:"lastEnded,omitzero"`
}

// containerStates are a pod's containers' states, init containers first.
func containerStates(p *corev1.Pod) []ContainerState {
	var out []ContainerState
	add := func(statuses []corev1.ContainerStatus, init bool) {
		for _, c := range statuses {
			cs := ContainerState{Name: c.Name, Init: init, Ready: c.Ready, Restarts: c.RestartCount, State: "unknown"}
			switch st := c.State; {
			case st.Running != nil:
				cs.State = "running"
			case st.Waiting != nil:
				cs.State, cs.Reason, cs.Message = "waiting", st.Waiting.Reason, st.Waiting.Message
			case st.Terminated != nil:
				cs.State, cs.Reason, cs.Message = "terminated", terminationText(st.Terminated), st.Terminated.Message
			}
			if t := c.LastTerminationState.Terminated; t != nil {
				cs.LastTermination, cs.LastEnded = terminationText(t), t.FinishedAt.Time
			}
			out = append(out, cs)
		}
	}
	add(p.Status.InitContainerStatuses, true)
	add(p.Status.ContainerStatuses, false)
	return out
}

// terminationText is why a container ended and its exit code.
func terminationText(t *corev1.ContainerStateTerminated) string {
	reason := t.Reason
	if reason == "" {
		reason = "terminated"
	}
	return reason + ", exit " + strconv.Itoa(int(t.ExitCode))
}

// PodRows lists the pods of the namespaces sitecon watches over, sorted by
// namespace and name.
func PodRows(pods []*corev1.Pod) []PodRow { return new(PodRowCache).Rows(pods) }

// PodRowCache makes the pod rows of successive reads of the caches (see
// rowCache). The zero value is ready to use.
type PodRowCache struct {
	// Finish, when set before the first read, is applied to each row as
	// it is made, once for as long as its pod does not change: the
	// console cleans the rows' strings for the terminal there, rather
	// than every row of every frame. Rows are sorted as finished.
	Finish func(PodRow) PodRow
	c      rowCache[corev1.Pod, PodRow]
}

// Rows is PodRows, redoing only what changed since the last call.
func (c *PodRowCache) Rows(pods []*corev1.Pod) []PodRow {
	return c.c.update(pods, watchedPod, finished(podRow, c.Finish), comparePodRows)
}

// finished is row, then finish when there is one.
func finished[T, R any](row func(*T) R, finish func(R) R) func(*T) R {
	if finish == nil {
		return row
	}
	return func(o *T) R { return finish(row(o)) }
}

func watchedPod(p *corev1.Pod) bool { return ShownNamespace(p.Namespace) }

func comparePodRows(a, b *PodRow) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func podRow(p *corev1.Pod) PodRow {
	ready, restarts := 0, int32(0)
	for _, c := range p.Status.ContainerStatuses {
		if c.Ready {
			ready++
		}
		restarts += c.RestartCount
	}
	phase := string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	return PodRow{
		Namespace:   p.Namespace,
		Name:        p.Name,
		Phase:       phase,
		Ready:       readyText(ready, len(p.Spec.Containers)),
		Restarts:    restarts,
		Node:        p.Spec.NodeName,
		Created:     p.CreationTimestamp.Time,
		Healthy:     p.Status.Phase == corev1.PodSucceeded || (PodReady(p) && p.DeletionTimestamp == nil),
		Conditions:  podConditions(p),
		Unscheduled: unscheduled(p),
		Containers:  containerStates(p),
	}
}

// podConditions are a pod's conditions as the console draws them.
func podConditions(p *corev1.Pod) []Condition {
	out := make([]Condition, 0, len(p.Status.Conditions))
	for _, c := range p.Status.Conditions {
		out = append(out, Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message, Since: c.LastTransitionTime.Time})
	}
	return out
}

// readyTexts are the common "ready/containers" counts, made once.
var readyTexts = func() (t [4][4]string) {
	for ready := range t {
		for total := range t[ready] {
			t[ready][total] = strconv.Itoa(ready) + "/" + strconv.Itoa(total)
		}
	}
	return t
}()

// readyText is "ready/total", as kubectl shows a pod's READY column.
func readyText(ready, total int) string {
	if ready < len(readyTexts) && total < len(readyTexts[0]) {
		return readyTexts[ready][total]
	}
	return strconv.Itoa(ready) + "/" + strconv.Itoa(total)
}

// EventRow is one Kubernetes event as the timeline shows it.
type EventRow struct {
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Object    string    `json:"object"`
	Namespace string    `json:"namespace"`
	// Name is the Event object's own name: with Namespace, what identifies
	// the row while newer events arrive above it.
	Name    string `json:"name"`
	Message string `json:"message"`
	Count   int32  `json:"count"`
	// First is when the event was first seen (its Time is the last);
	// zero when the event does not say.
	First time.Time `json:"first,omitempty"`
}

// EventRows lists events newest first, at most limit of them.
func EventRows(events []*corev1.Event, limit int) []EventRow {
	return new(EventRowCache).Rows(events, limit)
}

// EventRowCache makes the event rows of successive reads of the caches
// (see rowCache). The zero value is ready to use.
type EventRowCache struct {
	// Finish is as PodRowCache's, for the event rows.
	Finish func(EventRow) EventRow
	c      rowCache[corev1.Event, EventRow]
}

// Rows is EventRows, redoing only what changed since the last call.
func (c *EventRowCache) Rows(events []*corev1.Event, limit int) []EventRow {
	out := c.c.update(events, nil, finished(eventRow, c.Finish), compareEventRows)
	if limit > 0 && len(out) > limit {
		out = out[:limit:limit]
	}
	return out
}

// compareEventRows orders newest first, then by object; the event's own
// name last makes the order total, so rows of one time and object keep
// their order from one read to the next.
func compareEventRows(a, b *EventRow) int {
	if c := b.Time.Compare(a.Time); c != 0 {
		return c
	}
	if c := strings.Compare(a.Object, b.Object); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func eventRow(e *corev1.Event) EventRow {
	t := e.LastTimestamp.Time
	if t.IsZero() {
		t = e.EventTime.Time
	}
	if t.IsZero() {
		t = e.CreationTimestamp.Time
	}
	first := e.FirstTimestamp.Time
	if first.IsZero() {
		first = e.EventTime.Time
	}
	return EventRow{
		First: first,
		Time:  t, Type: e.Type, Reason: e.Reason, Namespace: e.Namespace, Name: e.Name, Message: e.Message, Count: max(e.Count, 1),
		Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name,
	}
}

// rowCache makes the sorted rows of successive reads of an informer cache,
// redoing only what changed. An informer replaces an object it updates
// (its objects are read only), so an object seen before, the same pointer,
// has the same row and the same place in the order: a read in which k
// objects are new or changed costs a look-up an object and a sort of k
// rows, not a sort of all. The rows returned are never written again (a
// frame on another goroutine may hold them). The zero value is ready to
// use; it is not safe for concurrent use.
type rowCache[T, R any] struct {
	entries map[*T]*rowEntry[T, R]
	order   []*rowEntry[T, R] // the last rows' objects, in row order
	rows    []R
}

type rowEntry[T, R any] struct {
	obj  *T
	row  R
	seen bool // in the read being made
}

// update makes the rows of the objects that keep accepts (all, when nil),
// sorted by compare.
func (c *rowCache[T, R]) update(objs []*T, keep func(*T) bool, row func(*T) R, compare func(a, b *R) int) []R {
	if c.entries == nil {
		c.entries = map[*T]*rowEntry[T, R]{}
	}
	var added []*rowEntry[T, R]
	kept := 0
	for _, o := range objs {
		if keep != nil && !keep(o) {
			continue
		}
		if e, ok := c.entries[o]; ok {
			if !e.seen {
				e.seen = true
				kept++
			}
			continue
		}
		e := &rowEntry[T, R]{obj: o, row: row(o), seen: true}
		c.entries[o] = e
		added = append(added, e)
	}
	if len(added) == 0 && kept == len(c.order) && c.rows != nil {
		for _, e := range c.order {
			e.seen = false
		}
		return c.rows
	}
	// The kept objects are in order already: the new ones are sorted and
	// merged in, the gone ones dropped.
	slices.SortFunc(added, func(a, b *rowEntry[T, R]) int { return compare(&a.row, &b.row) })
	order := make([]*rowEntry[T, R], 0, kept+len(added))
	rows := make([]R, 0, kept+len(added))
	take := func(e *rowEntry[T, R]) {
		e.seen = false
		order = append(order, e)
		rows = append(rows, e.row)
	}
	j := 0
	for _, e := range c.order {
		if !e.seen {
			delete(c.entries, e.obj)
			continue
		}
		for ; j < len(added) && compare(&added[j].row, &e.row) < 0; j++ {
			take(added[j])
		}
		take(e)
	}
	for ; j < len(added); j++ {
		take(added[j])
	}
	c.order, c.rows = order, rows
	return rows
}

// affinityTarget reads the node an app is placed on by its node affinity on
// kubernetes.io/hostname: required means pinned, preferred means it may move
// (auto-migration).
func affinityTarget(aff *corev1.Affinity) (node string, mode string) {
	if aff == nil || aff.NodeAffinity == nil {
		return "", ""
	}
	na := aff.NodeAffinity
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		for _, term := range req.NodeSelectorTerms {
			if n := hostnameIn(term); n != "" {
				return n, AppModePinned
			}
		}
	}
	best := int32(-1)
	for _, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		if n := hostnameIn(p.Preference); n != "" && p.Weight > best {
			node, mode, best = n, AppModeAuto, p.Weight
		}
	}
	return node, mode
}

// nodeRequirements are the required node-affinity expressions other than the
// node name (first term only: sitecon writes one).
func nodeRequirements(aff *corev1.Affinity) []corev1.NodeSelectorRequirement {
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil
	}
	var out []corev1.NodeSelectorRequirement
	for _, e := range terms[0].MatchExpressions {
		if e.Key != corev1.LabelHostname {
			out = append(out, e)
		}
	}
	return out
}

func hostnameIn(term corev1.NodeSelectorTerm) string {
	for _, e := range term.MatchExpressions {
		if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
			return e.Values[0]
		}
	}
	return ""
}

// App placement modes.
const (
	AppModeAuto   = "auto"
	AppModePinned = "pinned"
)
