package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// ClusterRecord is what a member knows of its cluster from its own config,
// for the sitecon-cluster ConfigMap.
type ClusterRecord struct {
	Name         string
	ID           string
	JoinServerIP string
	// SeedNode is set by the seed itself (the node whose address is the
	// join address), empty on every other node.
	SeedNode string
	// FailoverTimeout is this node's --failover-timeout: the cluster's
	// when the record has none yet (ClusterKeyFailoverTimeout).
	FailoverTimeout time.Duration
}

// ErrForeignClusterRecord: the ConfigMap describes another cluster.
var ErrForeignClusterRecord = errors.New("the cluster's sitecon-cluster ConfigMap belongs to another cluster")

// EnsureClusterConfigMap makes sure the cluster's sitecon-cluster ConfigMap
// exists and lists node among the cluster's nodes. The first member to reach
// the API creates it from its config; after that, what the ConfigMap says
// outranks any node's config (a seed change made on site must not be undone
// by a node booting with the old seed), so only the node list grows and a
// missing seed name is filled in by the seed. A ConfigMap of another cluster
// is never touched.
func EnsureClusterConfigMap(ctx context.Context, cs kubernetes.Interface, rec ClusterRecord, node string) error {
	cms := cs.CoreV1().ConfigMaps(AppNamespace)
	return retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		cm, err := cms.Get(ctx, ClusterConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			data := map[string]string{
				ClusterKeyName: rec.Name, ClusterKeyID: rec.ID,
				ClusterKeyJoinServerIP: rec.JoinServerIP, ClusterKeyNodes: node,
			}
			if rec.SeedNode != "" {
				data[ClusterKeySeedNode] = rec.SeedNode
			}
			if rec.FailoverTimeout > 0 {
				data[ClusterKeyFailoverTimeout] = rec.FailoverTimeout.String()
			}
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: ClusterConfigMapName, Namespace: AppNamespace},
				Data:       data,
			}, metav1.CreateOptions{FieldManager: "sitecon"})
			return err
		}
		if err != nil {
			return err
		}
		if id := cm.Data[ClusterKeyID]; id != "" && !strings.EqualFold(id, rec.ID) {
			return fmt.Errorf("%w: it names cluster %s, this node's config cluster %s", ErrForeignClusterRecord, id, rec.ID)
		}
		nodes := splitNodeList(cm.Data[ClusterKeyNodes])
		fillSeed := rec.SeedNode != "" && cm.Data[ClusterKeySeedNode] == "" && cm.Data[ClusterKeyJoinServerIP] == rec.JoinServerIP
		// A record from before the key: the first member to see it gives
		// it its own; one there already is never changed by an agent.
		fillTimeout := rec.FailoverTimeout > 0 && cm.Data[ClusterKeyFailoverTimeout] == ""
		if slices.Contains(nodes, node) && !fillSeed && !fillTimeout && cm.Data[ClusterKeyID] != "" {
			return nil
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if cm.Data[ClusterKeyID] == "" {
			cm.Data[ClusterKeyID] = rec.ID
		}
		if !slices.Contains(nodes, node) {
			cm.Data[ClusterKeyNodes] = strings.Join(append(nodes, node), ",")
		}
		if fillSeed {
			cm.Data[ClusterKeySeedNode] = rec.SeedNode
		}
		if fillTimeout {
			cm.Data[ClusterKeyFailoverTimeout] = rec.FailoverTimeout.String()
		}
		// Update carries the resourceVersion read: two members joining at
		// once conflict and retry instead of one losing the other's name.
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "sitecon"})
		return err
	})
}

// RemoveFromNodeList takes node off the ConfigMap's node list, if there.
func RemoveFromNodeList(ctx context.Context, cs kubernetes.Interface, node string) error {
	cms := cs.CoreV1().ConfigMaps(AppNamespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cm, err := cms.Get(ctx, ClusterConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		nodes := splitNodeList(cm.Data[ClusterKeyNodes])
		kept := slices.DeleteFunc(slices.Clone(nodes), func(s string) bool { return s == node })
		if len(kept) == len(nodes) {
			return nil
		}
		cm = cm.DeepCopy()
		cm.Data[ClusterKeyNodes] = strings.Join(kept, ",")
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "sitecon"})
		return err
	})
}

// MinFailoverTimeout is the shortest failover timeout a fence can come
// before (agent/apps derives the fence bound from it): a record's value
// under it is not usable, and an agent raises its own to it.
const MinFailoverTimeout = 16 * time.Second

// ClusterFailoverTimeout is the cluster's failover timeout as its record
// publishes it (ClusterKeyFailoverTimeout), read from d; ok is false when
// the record or the key is missing, and problem says why a value there
// cannot be used ("" when it can, or when there is none).
func ClusterFailoverTimeout(d Data) (timeout time.Duration, ok bool, problem string) {
	for _, cm := range d.ConfigMaps {
		if cm.Namespace != AppNamespace || cm.Name != ClusterConfigMapName {
			continue
		}
		raw, ok := cm.Data[ClusterKeyFailoverTimeout]
		if !ok {
			return 0, false, ""
		}
		t, err := time.ParseDuration(strings.TrimSpace(raw))
		switch {
		case err != nil || t <= 0:
			return 0, false, fmt.Sprintf("%s's %s %q is not a positive duration", ClusterConfigMapName, ClusterKeyFailoverTimeout, raw)
		case t < MinFailoverTimeout:
			return 0, false, fmt.Sprintf("%s's %s %s is shorter than a fence needs (%s)", ClusterConfigMapName, ClusterKeyFailoverTimeout, t, MinFailoverTimeout)
		}
		return t, true, ""
	}
	return 0, false, ""
}

func splitNodeList(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}
