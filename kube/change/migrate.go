package change

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
)

// WriteOverride records an on-site move in the placement ConfigMap, creating
// it when missing. Only the app's key changes.
func WriteOverride(ctx context.Context, cs kubernetes.Interface, appUUID string, o kube.PlacementOverride) error {
	raw, err := json.Marshal(o)
	if err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(kube.AppNamespace)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{appUUID: string(raw)}})
	_, err = cms.Patch(ctx, kube.PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sitecon"})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: kube.PlacementConfigMapName, Namespace: kube.AppNamespace},
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
func WaitAppOn(ctx context.Context, snap *kube.Snapshot, uuid, node string, timeout time.Duration, progress func(where string)) (last string, err error) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	deadline := time.After(timeout)
	for {
		if now, ok := kube.FindApp(snap.Status().Apps, uuid); ok {
			if where := kube.AppWhere(now); where != last {
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

// AppConfigRef is what an app's workload says of the config it was laid
// out from: the designated node and the version, which an on-site
// override records (see kube.PlacementOverride).
type AppConfigRef struct {
	DNId    string
	Version uint64
}

// ReadAppConfigRef reads an app's designated node and config version from
// its workload (stamped by the agent that laid it out).
func ReadAppConfigRef(ctx context.Context, c *kube.Clients, uuid string) (AppConfigRef, error) {
	ref := func(ann map[string]string) (AppConfigRef, bool) {
		v, _ := strconv.ParseUint(ann[kube.AnnotationConfigVersion], 10, 64)
		return AppConfigRef{DNId: ann[kube.AnnotationConfigDNId], Version: v}, ann[kube.AnnotationConfigDNId] != ""
	}
	sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + uuid}
	deps, err := c.Core.AppsV1().Deployments(kube.AppNamespace).List(ctx, sel)
	if err != nil {
		return AppConfigRef{}, err
	}
	for _, d := range deps.Items {
		if r, ok := ref(d.Annotations); ok {
			return r, nil
		}
	}
	if rs, err := c.KubeVirt.KubevirtV1().VirtualMachineInstanceReplicaSets(kube.AppNamespace).List(ctx, sel); err == nil {
		for _, x := range rs.Items {
			if r, ok := ref(x.Annotations); ok {
				return r, nil
			}
		}
	}
	if vmis, err := c.KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).List(ctx, sel); err == nil {
		for _, v := range vmis.Items {
			if r, ok := ref(v.Annotations); ok {
				return r, nil
			}
		}
	}
	return AppConfigRef{}, fmt.Errorf("app %s has no workload laid out by a sitecon agent: an on-site move needs the agents to place it", uuid)
}
