package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// MaxKubeletMinorsBehind is how many minor versions a kubelet may trail the
// API server under the Kubernetes version skew policy (since v1.28).
const MaxKubeletMinorsBehind = 3

// KubeletSkew checks a node's kubelet version against the API server's under
// the Kubernetes version skew policy: the kubelet must not be newer than the
// API server, nor more than three minor versions older. It returns the
// problem, or "" when the pair is supported or a version is unknown.
func KubeletSkew(kubelet, apiserver string) string {
	k, err := version.ParseGeneric(kubelet)
	if err != nil {
		return ""
	}
	a, err := version.ParseGeneric(apiserver)
	if err != nil {
		return ""
	}
	if k.Major() != a.Major() {
		return fmt.Sprintf("kubelet %s and API server %s differ in major version", kubelet, apiserver)
	}
	switch diff := int(a.Minor()) - int(k.Minor()); {
	case diff < 0:
		return fmt.Sprintf("kubelet %s is newer than the API server %s; the skew policy forbids that", kubelet, apiserver)
	case diff > MaxKubeletMinorsBehind:
		return fmt.Sprintf("kubelet %s is %d minor versions behind the API server %s; the skew policy allows %d", kubelet, diff, apiserver, MaxKubeletMinorsBehind)
	}
	return ""
}
