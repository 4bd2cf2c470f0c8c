package sitebox

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// startEtcd starts every member at once (a new cluster forms only once a
// quorum of its members runs) and waits until each serves with a leader.
func (s *Site) startEtcd(ctx context.Context) error {
	var initial []string
	for _, m := range s.Etcd {
		initial = append(initial, m.Name+"="+m.PeerURL())
	}
	for _, m := range s.Etcd {
		if err := s.start(etcdProcess(m.Node),
			"--name="+m.Name,
			"--data-dir="+filepath.Join(s.Dir, "etcd", m.Node),
			"--listen-client-urls="+m.ClientURL(), "--advertise-client-urls="+m.ClientURL(),
			"--listen-peer-urls="+m.PeerURL(), "--initial-advertise-peer-urls="+m.PeerURL(),
			"--initial-cluster="+strings.Join(initial, ","),
			// The token keeps a member from joining another site's
			// cluster on a reused port. A restart (Recover) keeps its
			// data directory, and etcd ignores the initial-* flags then.
			"--initial-cluster-token="+s.ClusterID,
			"--initial-cluster-state=new",
			"--listen-metrics-urls=",
			"--log-level=warn",
			// Test data: losing it on a host crash costs nothing, and fsync is
			// most of etcd's latency on a shared disk.
			"--unsafe-no-fsync",
			// k3s's own timings (500 ms, 5 s) would make a lost leader
			// cost the API server seconds; etcd's defaults (100 ms, 1 s)
			// risk elections when the three members, the API server and
			// the tests share two busy cores. In between:
			"--heartbeat-interval=250", "--election-timeout=2500",
		); err != nil {
			return err
		}
	}
	for _, m := range s.Etcd {
		if err := s.waitHTTP(ctx, etcdProcess(m.Node), m.ClientURL()+"/health", nil); err != nil {
			return err
		}
	}
	return nil
}

// etcdProcess names the site process of a node's etcd member.
func etcdProcess(node string) string { return "etcd-" + node }

// EtcdEndpoints are the client URLs of every member.
func (s *Site) EtcdEndpoints() []string {
	var out []string
	for _, m := range s.Etcd {
		out = append(out, m.ClientURL())
	}
	return out
}

// EtcdMemberOf is the etcd member the node runs; false for a node without one.
func (s *Site) EtcdMemberOf(node string) (EtcdMember, bool) {
	for _, m := range s.Etcd {
		if m.Node == node {
			return m, true
		}
	}
	return EtcdMember{}, false
}

func (s *Site) startAPIServer(ctx context.Context) error {
	tol := strconv.Itoa(s.EvictionToleration)
	args := []string{
		"--etcd-servers=" + strings.Join(s.EtcdEndpoints(), ","),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.APIPort),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + s.pki("apiserver.crt"), "--tls-private-key-file=" + s.pki("apiserver.key"),
		"--client-ca-file=" + s.pki("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + s.pki("sa.pub"),
		"--service-account-signing-key-file=" + s.pki("sa.key"),
		"--service-cluster-ip-range=" + serviceClusterRange,
		"--authorization-mode=Node,RBAC",
		// As k3s runs its API server: a kubelet's identity changes only
		// its own Node and the pods bound to it.
		"--enable-admission-plugins=NodeRestriction",
		// k3s allows privileged pods (KubeVirt's and Longhorn's need it).
		"--allow-privileged=true",
		"--default-not-ready-toleration-seconds=" + tol,
		"--default-unreachable-toleration-seconds=" + tol,
		"--profiling=false",
	}
	args = append(args, s.aggregationFlags()...)
	if s.Bootstrap {
		// A bootstrap-mode node's InternalIP is its cluster address, in
		// the site's namespaces: the API server dials its loopback one.
		args = append(args, "--kubelet-preferred-address-types=ExternalIP,InternalIP,Hostname")
	}
	// Reaching the kubelets (kwok's servers) with TLS both ways: kubelet.go.
	args = append(args, s.apiServerKubeletArgs()...)
	if err := s.start("kube-apiserver", args...); err != nil {
		return err
	}
	tlsCfg, err := s.adminTLS()
	if err != nil {
		return err
	}
	return s.waitHTTP(ctx, "kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", s.APIPort), tlsCfg)
}

// aggregationFlags turn on the aggregation layer as k3s runs it: the API
// server proxies an APIService's group (KubeVirt's subresources, served by
// the virt-api simulator) to its server, presenting the front-proxy client
// certificate and naming the user in the X-Remote-* headers, which that
// server believes only from a client the front-proxy CA signed with an
// allowed name.
//
// Not --enable-aggregator-routing: with it the API server dials the
// Service's endpoints, and an Endpoints or EndpointSlice address may not be
// in 127.0.0.0/8, where the simulator listens. Without it the API server
// dials the Service itself, and an ExternalName Service names 127.0.0.1
// (virtapisim.go).
func (s *Site) aggregationFlags() []string {
	return []string{
		"--requestheader-client-ca-file=" + s.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + s.pki(FrontProxyClient+".crt"),
		"--proxy-client-key-file=" + s.pki(FrontProxyClient+".key"),
	}
}

func (s *Site) adminTLS() (*http.Transport, error) {
	cfg, err := s.RESTConfig()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Transport{TLSClientConfig: tlsConfig}, nil
}

func (s *Site) startControllers() error {
	kubeconfig := "--kubeconfig=" + s.Kubeconfig()
	if err := s.start("kube-controller-manager", kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file="+s.pki("sa.key"),
		"--root-ca-file="+s.pki("ca.crt"),
		"--cluster-signing-cert-file="+s.pki("ca.crt"),
		"--cluster-signing-key-file="+s.pki("ca.key"),
		"--use-service-account-credentials=false",
		"--node-monitor-grace-period="+s.NodeMonitorGracePeriod,
		"--node-monitor-period=1s",
		// The attach/detach controller runs as in k3s (it is on by
		// default): it attaches Longhorn volumes through VolumeAttachments
		// on nodes that ask for it, and holds a volume on a lost node that
		// last reported it in use. Only how often it re-reads the
		// VolumeAttachments is the site's to choose.
		"--attach-detach-reconcile-sync-period="+cmp.Or(s.AttachDetachSyncPeriod, "1m0s"),
		"--profiling=false",
	); err != nil {
		return err
	}
	return s.start("kube-scheduler", kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--profiling=false",
	)
}

func (s *Site) kwokArgs(n Node) []string {
	return append([]string{
		"--kubeconfig=" + s.Kubeconfig(),
		"--config=" + filepath.Join(s.Dir, "kwok.yaml"),
		"--manage-single-node=" + n.Name,
		"--node-ip=" + n.IP,
		"--cidr=" + n.CIDR,
		"--node-lease-duration-seconds=" + strconv.Itoa(s.NodeLeaseSeconds),
	}, s.kubeletArgs(n)...)
}

func (s *Site) startKwok(n Node) error {
	return s.start("kwok-"+n.Name, s.kwokArgs(n)...)
}

// bootstrapObjects creates what a k3s cluster with Longhorn and KubeVirt has
// before sitecon looks at it: namespaces, CRDs, the simulated nodes, the
// kube-vip Lease and the sitecon-cluster ConfigMap formation would write.
func (s *Site) bootstrapObjects(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, ns := range []string{"kube-system", "longhorn-system", "kubevirt", "cdi", kube.AppNamespace} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	if err := installCRDs(ctx, cfg, longhornCRDs, kubevirtCRDs, multusCRDs, kwokLogsCRD); err != nil {
		return err
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	// Longhorn's driver deployer registers its CSI driver as one that
	// needs attaching: the attach/detach controller attaches its volumes
	// through VolumeAttachments (with no CSIDriver object it would too, as
	// the default; the object says so out loud).
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: longhornProvisioner},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), PodInfoOnMount: ptr.To(true)},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("CSIDriver %s: %w", longhornProvisioner, err)
	}
	if err := installKubevirtAdmission(ctx, cs, clients.KubeVirt); err != nil {
		return fmt.Errorf("kubevirt admission simulator: %w", err)
	}
	if err := createSystemWorkloads(ctx, cs); err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, s.nodeObject(n), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	now := metav1.NewMicroTime(time.Now())
	if _, err := cs.CoordinationV1().Leases(kube.VIPLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: kube.VIPLeaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(s.Nodes[0].Name),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube-vip lease: %w", err)
	}
	// A bootstrap-mode site's agents record their cluster themselves.
	if s.Bootstrap {
		return nil
	}
	var names []string
	for _, n := range s.Nodes {
		names = append(names, n.Name)
	}
	_, err = cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kube.ClusterConfigMapName},
		Data: map[string]string{
			kube.ClusterKeyName:         s.ClusterName,
			kube.ClusterKeyID:           s.ClusterID,
			kube.ClusterKeyJoinServerIP: s.Nodes[0].IP,
			kube.ClusterKeyVIPAddress:   vipAddr(netip.MustParsePrefix(s.NodePrefix())).String(),
			kube.ClusterKeyNodes:        strings.Join(names, ","),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster configmap: %w", err)
	}
	return nil
}

// nodeObject is a Node as k3s on EVE registers it: a server (control
// plane, etcd) when the site runs an etcd member for it, else an agent.
// Nodes may set their status on create, so capacity and the kubelet version
// are there from the start (kwok keeps what is set).
func (s *Site) nodeObject(n Node) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		kube.LabelNodeUUID:       n.UUID,
		"type":                   "kwok",
	}
	if _, server := s.EtcdMemberOf(n.Name); server {
		labels["node-role.kubernetes.io/control-plane"] = "true"
		labels[kube.LabelEtcd] = "true"
		labels["node-role.kubernetes.io/master"] = "true"
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			Labels: labels,
			Annotations: map[string]string{
				// kwok manages only nodes carrying this annotation.
				"kwok.x-k8s.io/node": "fake",
				// What a kubelet (k3s's included) sets at registration
				// with --enable-controller-attach-detach (its default): the
				// attach/detach controller attaches and detaches this
				// node's volumes, and manages no node without it.
				ControllerManagedAttachAnnotation: "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: n.CIDR},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("8Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("128Gi"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("7Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("120Gi"),
			},
			Addresses: nodeAddresses(n),
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          KubeletVersion,
				ContainerRuntimeVersion: "containerd://2.0.5-k3s1",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				OSImage:                 "EVE (sitebox simulated node)",
				// Recover gives a new one, as a boot does.
				BootID: string(uuid.NewUUID()),
			},
		},
	}
}

func nodeAddresses(n Node) []corev1.NodeAddress {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP}}
	if n.LoopbackIP != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: n.LoopbackIP})
	}
	return append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
}

// installCRDs creates every CRD in the YAML streams and waits until each is established.
func installCRDs(ctx context.Context, cfg *rest.Config, streams ...[]byte) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var names []string
	for _, stream := range streams {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := dec.Decode(&crd); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("decode CRD: %w", err)
			}
			if crd.Name == "" {
				continue
			}
			if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			established := false
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

func (s *Site) waitNodesReady(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var notReady []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for _, n := range s.Nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil || !kube.NodeIsReady(node) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready in time: %s (see %s/logs/kwok-*.log)", strings.Join(notReady, ", "), s.Dir)
	}
	return nil
}

// controlPlaneProcesses are what one k3s server process runs beside etcd:
// they stop and start together, as a k3s restart or crash stops them.
var controlPlaneProcesses = []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver"}

// StopAPIServer stops the API server with the controller-manager and the
// scheduler, as a k3s restart or a crash does (k3s runs the three in one
// process).
func (s *Site) StopAPIServer() error {
	var errs []error
	for _, name := range controlPlaneProcesses {
		if s.running(name) {
			errs = append(errs, s.stop(name))
		}
	}
	return errors.Join(errs...)
}

// StartAPIServer starts a stopped API server again, waits until it is
// ready, and then starts the controller-manager and the scheduler again. A
// controller left running through the outage would come back on client-go's
// re-list backoff, up to 30 s after the server: started with it, it watches
// from the first moment, as k3s's do.
func (s *Site) StartAPIServer(ctx context.Context) error {
	if s.running("kube-apiserver") {
		return errors.New("kube-apiserver is already running")
	}
	if err := s.startAPIServer(ctx); err != nil {
		return err
	}
	if err := s.restartControllers(); err != nil {
		return err
	}
	s.restarts.Add(1)
	return nil
}

// restartControllers starts the controller-manager and the scheduler
// anew, watching from their first moment.
func (s *Site) restartControllers() error {
	for _, name := range controlPlaneProcesses {
		if name == "kube-apiserver" {
			continue
		}
		if s.running(name) {
			if err := s.stop(name); err != nil {
				return err
			}
		}
		if err := s.restart(name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// coreClient is a client of the site's API server as its admin.
func (s *Site) coreClient() (kubernetes.Interface, error) {
	cfg, err := s.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// etcdQuorate says whether enough of the site's etcd members run for a
// quorum.
func (s *Site) etcdQuorate() bool {
	running := 0
	for _, m := range s.Etcd {
		if s.running(etcdProcess(m.Node)) {
			running++
		}
	}
	return running > len(s.Etcd)/2
}

// afterQuorumReturns is called once a member has started: when etcd had
// no quorum before it and has one now, it waits until the API server
// serves a quorum read again and restarts the controller-manager and the
// scheduler. On a k3s site each leader-elects through etcd: without a
// quorum it cannot renew its lease, exits (leaderelection lost), and k3s
// starts again, so they watch afresh once the quorum is back. sitebox's
// run without leader election and would otherwise come back on client-go's
// re-list backoff, up to 30 s after the quorum: a claim made in that shadow
// was not bound for as long (issue 23, `claim vol-used never bound`).
func (s *Site) afterQuorumReturns(wasQuorate bool) error {
	if wasQuorate || !s.etcdQuorate() || !s.running("kube-apiserver") {
		return nil
	}
	cs, err := s.coreClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A LIST without a resourceVersion is a quorum read.
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("etcd has its quorum again, but the API server serves no quorum read within 60s: %w", err)
	}
	return s.restartControllers()
}

// createSystemWorkloads stands up the pods a k3s cluster with Longhorn and
// KubeVirt runs in its system namespaces, so per-namespace health has
// something real to count: per-node DaemonSets lose a pod with their node,
// Deployments move.
func createSystemWorkloads(ctx context.Context, cs kubernetes.Interface) error {
	podSpec := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "registry.local/" + name}}},
		}
	}
	selector := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	}
	daemonSets := map[string][]string{
		"kube-system":     {"svclb-traefik", "kube-vip"},
		"longhorn-system": {"longhorn-manager", "longhorn-csi-plugin", "engine-image"},
		"kubevirt":        {"virt-handler"},
	}
	for ns, names := range daemonSets {
		for _, name := range names {
			_, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       appsv1.DaemonSetSpec{Selector: selector(name), Template: podSpec(name)},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("daemonset %s/%s: %w", ns, name, err)
			}
		}
	}
	deployments := map[string][]string{
		"kube-system":     {"coredns", "metrics-server"},
		"longhorn-system": {"longhorn-driver-deployer"},
		"kubevirt":        {"virt-api", "virt-controller"},
		"cdi":             {"cdi-deployment", "cdi-apiserver"},
	}
	for ns, names := range deployments {
		for _, name := range names {
			_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector(name), Template: podSpec(name)},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("deployment %s/%s: %w", ns, name, err)
			}
		}
	}
	return nil
}
