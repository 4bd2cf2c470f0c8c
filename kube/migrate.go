package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// PlacementOverride is an on-site move of an app (the agent's
// PlacementOverride, as stored in the sitecon-placement ConfigMap).
type PlacementOverride struct {
	Node       string    `json:"node"`
	NodeUUID   string    `json:"node_uuid"`
	By         string    `json:"by"`
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"`
	ConfigDNId string    `json:"config_dnid"`
	// ConfigVersion is the version of the app's config the move was made
	// against (0: unversioned): only an agent holding a newer one clears it.
	ConfigVersion uint64 `json:"config_version,omitempty"`
}

// ParseOverride reads one entry of the placement ConfigMap as every agent
// acts on it: JSON naming a node UUID. An entry that does not is ignored
// by the agents (and reported by them and by sitecon doctor).
func ParseOverride(raw string) (PlacementOverride, error) {
	var o PlacementOverride
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return o, err
	}
	if o.NodeUUID == "" {
		return o, errors.New("no node_uuid")
	}
	return o, nil
}

// WriteOverride records an on-site move in the placement ConfigMap, creating
// it when missing. Only the app's key changes.
func WriteOverride(ctx context.Context, cs kubernetes.Interface, appUUID string, o PlacementOverride) error {
	raw, err := json.Marshal(o)
	if err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(AppNamespace)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{appUUID: string(raw)}})
	_, err = cms.Patch(ctx, PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sitecon"})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: PlacementConfigMapName, Namespace: AppNamespace},
			Data:       map[string]string{appUUID: string(raw)},
		}, metav1.CreateOptions{FieldManager: "sitecon"})
	}
	return err
}

// ErrNotMovedYet: the app did not run on its target within the wait.
var ErrNotMovedYet = errors.New("not running on the target yet")

// WaitAppOn waits until the app runs, ready, on node, telling progress each
// time where it is changes. It waits on the snapshot's changes: no request.
// It returns the last place seen, with ErrNotMovedYet after timeout or
// ctx's error when cancelled.
func WaitAppOn(ctx context.Context, snap *Snapshot, uuid, node string, timeout time.Duration, progress func(where string)) (last string, err error) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	deadline := time.After(timeout)
	for {
		if now, ok := FindApp(snap.Status().Apps, uuid); ok {
			if where := AppWhere(now); where != last {
				progress(where)
				last = where
			}
			if now.Node == node && now.Ready {
				return last, nil
			}
		}
		select {
		case <-changes:
		case <-deadline:
			return last, ErrNotMovedYet
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}

// AppWhere says where an app is, for progress lines: "Running on node-c",
// "Scheduling, not placed yet", "starting, not placed yet" (a VM between
// its old instance and the new one).
func AppWhere(a AppStatus) string {
	phase := cmp.Or(a.Phase, "starting")
	if a.Node == "" {
		return phase + ", not placed yet"
	}
	return phase + " on " + a.Node
}

// FindApp finds an app by name or UUID; of the objects running it (a
// terminating pod and its replacement), the ready one wins.
func FindApp(apps []AppStatus, ref string) (AppStatus, bool) {
	var found AppStatus
	ok := false
	for _, a := range apps {
		if a.Name != ref && !strings.EqualFold(a.UUID, ref) {
			continue
		}
		if !ok || (a.Ready && !found.Ready) || (found.Phase == "Terminating" && a.Phase != "Terminating") {
			found, ok = a, true
		}
	}
	return found, ok
}

// AppNames lists app names, sorted and unique, for messages.
func AppNames(apps []AppStatus) string {
	var names []string
	for _, a := range apps {
		if !slices.Contains(names, a.Name) {
			names = append(names, a.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// AppConfigRef is what an app's workload says of the config it was laid
// out from: the designated node and the version, which an on-site
// override records (see PlacementOverride).
type AppConfigRef struct {
	DNId    string
	Version uint64
}

// ReadAppConfigRef reads an app's designated node and config version from
// its workload (stamped by the agent that laid it out).
func ReadAppConfigRef(ctx context.Context, c *Clients, uuid string) (AppConfigRef, error) {
	ref := func(ann map[string]string) (AppConfigRef, bool) {
		v, _ := strconv.ParseUint(ann[AnnotationConfigVersion], 10, 64)
		return AppConfigRef{DNId: ann[AnnotationConfigDNId], Version: v}, ann[AnnotationConfigDNId] != ""
	}
	sel := metav1.ListOptions{LabelSelector: LabelAppUUID + "=" + uuid}
	deps, err := c.Core.AppsV1().Deployments(AppNamespace).List(ctx, sel)
	if err != nil {
		return AppConfigRef{}, err
	}
	for _, d := range deps.Items {
		if r, ok := ref(d.Annotations); ok {
			return r, nil
		}
	}
	if rs, err := c.KubeVirt.KubevirtV1().VirtualMachineInstanceReplicaSets(AppNamespace).List(ctx, sel); err == nil {
		for _, x := range rs.Items {
			if r, ok := ref(x.Annotations); ok {
				return r, nil
			}
		}
	}
	if vmis, err := c.KubeVirt.KubevirtV1().VirtualMachineInstances(AppNamespace).List(ctx, sel); err == nil {
		for _, v := range vmis.Items {
			if r, ok := ref(v.Annotations); ok {
				return r, nil
			}
		}
	}
	return AppConfigRef{}, fmt.Errorf("app %s has no workload laid out by a sitecon agent: an on-site move needs the agents to place it", uuid)
}
