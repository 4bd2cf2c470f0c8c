package kube

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// FenceSettings are what a node's agent fences with, as it writes them on
// its own Node (AnnotationFence).
type FenceSettings struct {
	Fencing         bool
	FailoverTimeout time.Duration
}

// String is the annotation's value: "on 28s", or "off 3s".
func (s FenceSettings) String() string {
	state := "off"
	if s.Fencing {
		state = "on"
	}
	return state + " " + s.FailoverTimeout.String()
}

// ParseFenceSettings reads an annotation's value (String's form).
func ParseFenceSettings(v string) (FenceSettings, error) {
	state, timeout, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || state != "on" && state != "off" {
		return FenceSettings{}, fmt.Errorf("fence settings %q: want \"on <timeout>\" or \"off <timeout>\"", v)
	}
	t, err := time.ParseDuration(timeout)
	if err != nil || t <= 0 {
		return FenceSettings{}, fmt.Errorf("fence settings %q: timeout: want a positive duration", v)
	}
	return FenceSettings{Fencing: state == "on", FailoverTimeout: t}, nil
}

// NodeFenceSettings are the fence settings n's agent wrote on it; problem
// says why there are none to go by ("" when there are).
func NodeFenceSettings(n *corev1.Node) (s FenceSettings, problem string) {
	v, ok := n.Annotations[AnnotationFence]
	if !ok {
		return FenceSettings{}, fmt.Sprintf("node %s never said that it fences (no sitecon agent there, or an older one)", n.Name)
	}
	s, err := ParseFenceSettings(v)
	if err != nil {
		return FenceSettings{}, fmt.Sprintf("node %s's fence settings cannot be read (%v)", n.Name, err)
	}
	return s, ""
}
