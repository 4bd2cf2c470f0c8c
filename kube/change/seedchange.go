package change

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// SetSeed makes node the seed server: the sitecon-cluster ConfigMap's
// join_server_ip becomes its address; every agent re-renders its k3s config
// from it.
func SetSeed(ctx context.Context, cs kubernetes.Interface, d kube.Data, node string) (string, error) {
	if err := safety.SeedCheck(kube.NodeFacts(d.Nodes), node); err != nil {
		return "", err
	}
	var ip string
	for _, n := range d.Nodes {
		if n.Name == node {
			ip = kube.InternalIP(n)
		}
	}
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{kube.ClusterKeyJoinServerIP: ip, kube.ClusterKeySeedNode: node}})
	_, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Patch(ctx, kube.ClusterConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sitecon"})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("the cluster has no %s/%s ConfigMap: was it formed by sitecon?", kube.AppNamespace, kube.ClusterConfigMapName)
	}
	return ip, err
}
