package apps

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Any HTTP answer from a node's /status is a sign of life, an error status
// included; a refused connection is none. A node without an address cannot
// be shown dead.
func TestProbeStatus(t *testing.T) {
	answering := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "leaving", http.StatusServiceUnavailable)
	}))
	defer answering.Close()
	// A port that was just listened on and closed refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()

	ctx := context.Background()
	if life := ProbeStatus(ctx, answering.Listener.Addr().String()); !life.Alive || !strings.Contains(life.Detail, "503") {
		t.Fatalf("an answering node: %+v", life)
	}
	if life := ProbeStatus(ctx, refused); life.Alive || !strings.Contains(life.Detail, "refused") {
		t.Fatalf("a refusing address: %+v", life)
	}
	if life := ProbeNodeStatus(ctx, &corev1.Node{}); !life.Alive {
		t.Fatalf("a node without an address: %+v", life)
	}
	host, _, _ := net.SplitHostPort(refused)
	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-b"}, {Type: corev1.NodeInternalIP, Address: host}}}}
	if life := ProbeNodeStatus(ctx, node); !strings.Contains(life.Detail, net.JoinHostPort(host, "12346")) {
		t.Fatalf("the node's InternalIP and the status port are not what was probed: %+v", life)
	}
}
