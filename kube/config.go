// Package kube is the cluster's read side that every face shares: the
// clients, the names of sitecon's objects, the informer-backed Snapshot the
// console, `sitecon status`, the doctor and the agent read, and the model
// derived from it (nodes, apps, volumes, alerts). What changes the cluster
// is in kube/change and kube/flow; the node identities' access policy in
// kube/access; log and VNC streams in kube/streams; node reports and etcd's
// members in kube/nodestate.
//
// It imports only kube/safety (the pure rules).
package kube

import (
	"errors"
	"fmt"
	"os"

	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kvclientset "kubevirt.io/client-go/kubevirt"
)

// K3sKubeconfig is where k3s writes the admin kubeconfig on a server node.
const K3sKubeconfig = "/etc/rancher/k3s/k3s.yaml"

// LoadingRules are clientcmd's loading rules with the k3s kubeconfig added:
// an explicit path wins, then $KUBECONFIG, then /etc/rancher/k3s/k3s.yaml
// (what an EVE node has), then ~/.kube/config.
func LoadingRules(explicitPath string) *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = explicitPath
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		if _, err := os.Stat(K3sKubeconfig); err == nil {
			// Only the first file that exists is used, so a technician's
			// ~/.kube/config cannot silently override the node's own cluster.
			rules.Precedence = []string{K3sKubeconfig}
		}
	}
	return rules
}

// ErrNoKubeconfig is returned when no loading rule found a kubeconfig.
var ErrNoKubeconfig = errors.New("no kubeconfig found (tried --kubeconfig, $KUBECONFIG, " + K3sKubeconfig + ", ~/.kube/config)")

// LoadRESTConfig loads a *rest.Config by the loading rules, for the named context
// (empty: the current one).
func LoadRESTConfig(explicitPath, contextName string) (*rest.Config, error) {
	rules := LoadingRules(explicitPath)
	overrides := &clientcmd.ConfigOverrides{CurrentContext: contextName}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, ErrNoKubeconfig
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "sitecon"
	return cfg, nil
}

// Clients are the typed clients for everything sitecon reads and changes,
// made from one *rest.Config.
type Clients struct {
	Config   *rest.Config
	Core     kubernetes.Interface
	KubeVirt kvclientset.Interface
	Longhorn lhclientset.Interface
}

// NewClients builds every client from one config. No client-wide timeout is set:
// http.Client.Timeout would also cut every watch stream. Callers bound one-shot
// requests with a context instead.
func NewClients(cfg *rest.Config) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	// The defaults (5 QPS) throttle the initial sync of a busy cluster.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	kv, err := kvclientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubevirt client: %w", err)
	}
	lh, err := lhclientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("longhorn client: %w", err)
	}
	return &Clients{Config: cfg, Core: core, KubeVirt: kv, Longhorn: lh}, nil
}
