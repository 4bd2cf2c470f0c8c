package bundle

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sitecon/sitecon/kube"
)

// The cluster's objects, each kind a source of its own: one LIST each,
// nothing else asked of the API server.

// clusterSources read the nodes (already listed), events, etcd's member
// list as the agents record it, Longhorn's volumes, replicas and
// engines, KubeVirt's VMIs and sitecon's ConfigMaps.
func clusterSources(c *kube.Clients, nodes *corev1.NodeList, deadline time.Duration) []Source {
	src := func(name string, collect func(ctx context.Context) ([]Item, error)) Source {
		return Source{Name: name, Deadline: deadline, Collect: func(ctx context.Context) ([]Item, []Missing, error) {
			items, err := collect(ctx)
			return items, nil, err
		}}
	}
	list := func(file, what string, get func(ctx context.Context) (runtime.Object, error)) Source {
		return src(what, func(ctx context.Context) ([]Item, error) {
			obj, err := get(ctx)
			if err != nil {
				return nil, err
			}
			data, err := objectsJSON(obj)
			if err != nil {
				return nil, err
			}
			return []Item{{Name: "cluster/" + file, Source: what, Data: data}}, nil
		})
	}
	lh := c.Longhorn.LonghornV1beta2()
	return []Source{
		list("nodes.json", "nodes", func(context.Context) (runtime.Object, error) { return nodes.DeepCopy(), nil }),
		src("events", func(ctx context.Context) ([]Item, error) {
			events, err := c.Core.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return eventItems(events)
		}),
		src("etcd members", func(ctx context.Context) ([]Item, error) {
			cm, err := c.Core.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.EtcdMembersConfigMapName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("no server's agent has published it (ConfigMap %s/%s not found)", kube.AppNamespace, kube.EtcdMembersConfigMapName)
			}
			if err != nil {
				return nil, err
			}
			return []Item{{Name: "cluster/etcd-members.json", Source: "ConfigMap " + kube.AppNamespace + "/" + kube.EtcdMembersConfigMapName,
				Data: etcdMembersJSON(cm)}}, nil
		}),
		list("longhorn-volumes.json", "Longhorn volumes", func(ctx context.Context) (runtime.Object, error) {
			return lh.Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
		}),
		list("longhorn-replicas.json", "Longhorn replicas", func(ctx context.Context) (runtime.Object, error) {
			return lh.Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
		}),
		list("longhorn-engines.json", "Longhorn engines", func(ctx context.Context) (runtime.Object, error) {
			return lh.Engines(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
		}),
		list("vmis.json", "KubeVirt VMIs", func(ctx context.Context) (runtime.Object, error) {
			return c.KubeVirt.KubevirtV1().VirtualMachineInstances(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		}),
		list("configmaps.json", "sitecon's ConfigMaps", func(ctx context.Context) (runtime.Object, error) {
			cms, err := c.Core.CoreV1().ConfigMaps(kube.AppNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			// sitecon's own (the cluster record, the placement overrides,
			// the etcd member list...), not the apps'.
			var own []corev1.ConfigMap
			for _, cm := range cms.Items {
				if strings.HasPrefix(cm.Name, "sitecon-") {
					own = append(own, cm)
				}
			}
			cms.Items = own
			return cms, nil
		}),
	}
}

// objectsJSON is a list's items as an indented JSON array, without their
// managed fields (who wrote which field: noise for a reader).
func objectsJSON(list runtime.Object) ([]byte, error) {
	var items []runtime.Object
	err := meta.EachListItem(list, func(o runtime.Object) error {
		if a, err := meta.Accessor(o); err == nil {
			a.SetManagedFields(nil)
		}
		items = append(items, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if items == nil {
		items = []runtime.Object{}
	}
	return json.MarshalIndent(items, "", "  ")
}

// EventTime is when an event last happened: its series' last, its
// eventTime, its lastTimestamp, its first, or when it was created.
func EventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// eventItems are the events oldest first, as JSON and as one line each.
func eventItems(list *corev1.EventList) ([]Item, error) {
	events := list.Items
	sort.SliceStable(events, func(i, j int) bool { return EventTime(&events[i]).Before(EventTime(&events[j])) })
	list.Items = events
	data, err := objectsJSON(list)
	if err != nil {
		return nil, err
	}
	var text strings.Builder
	for i := range events {
		e := &events[i]
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		fmt.Fprintf(&text, "%s  %-7s %-20s %s/%s/%s  %s%s\n", EventTime(e).UTC().Format(time.RFC3339), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name, strings.ReplaceAll(e.Message, "\n", " "), count)
	}
	return []Item{
		{Name: "cluster/events.json", Source: "events, oldest first", Data: data},
		{Name: "cluster/events.txt", Source: "events, oldest first", Data: []byte(text.String())},
	}, nil
}

// etcdMembersJSON is the member list each server's agent published, by
// observing node, each entry decoded when it is JSON.
func etcdMembersJSON(cm *corev1.ConfigMap) []byte {
	out := map[string]any{}
	for k, v := range cm.Data {
		var parsed any
		if json.Unmarshal([]byte(v), &parsed) == nil {
			out[k] = parsed
		} else {
			out[k] = v
		}
	}
	data, _ := json.MarshalIndent(map[string]any{"observers": out, "resourceVersion": cm.ResourceVersion}, "", "  ")
	return data
}

// secretValues lists every Secret for its values, which the bundle must
// not hold: they go to the redactor and nowhere else.
func secretValues(ctx context.Context, c *kube.Clients, r *Redactor) (int, error) {
	secrets, err := c.Core.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if publicSecretKey(s.Type, k) {
				continue
			}
			r.AddValue(string(v))
		}
		for _, v := range s.StringData {
			r.AddValue(v)
		}
	}
	return len(secrets.Items), nil
}

// publicSecretKey: a key of a Secret's data that holds no secret: a
// service account token Secret's namespace name and the cluster's CA
// certificate, which appear in the bundle by right (scrubbed by value,
// every namespace name "kube-system" would go).
func publicSecretKey(t corev1.SecretType, key string) bool {
	return t == corev1.SecretTypeServiceAccountToken && (key == corev1.ServiceAccountNamespaceKey || key == corev1.ServiceAccountRootCAKey)
}
