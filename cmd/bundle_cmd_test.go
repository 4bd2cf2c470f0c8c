package cmd

import (
	"strings"
	"testing"
)

func TestBundleFlagsAreCheckedBeforeAnythingIsRead(t *testing.T) {
	for _, tc := range []struct {
		size  string
		bytes int64
		err   string
	}{
		{size: "50Mi", bytes: 50 << 20},
		{size: "200M", bytes: 200_000_000},
		{size: "1024", bytes: 1024},
		{size: "0", err: "positive"},
		{size: "-5Mi", err: "positive"},
		{size: "lots", err: "want a size"},
	} {
		n, err := parseSize(tc.size)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--max-size %s: %v, want an error saying %q", tc.size, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.bytes {
			t.Errorf("--max-size %s: %d %v, want %d", tc.size, n, err, tc.bytes)
		}
	}
	nodes, err := parseNodeAddresses([]string{"node-a=10.0.0.1", "node-b=fd00::2"})
	if err != nil || len(nodes) != 2 || nodes[1].Node != "node-b" || nodes[1].Address != "fd00::2" {
		t.Errorf("--node: %+v %v", nodes, err)
	}
	for _, bad := range []string{"node-a", "=10.0.0.1", "node-a=not-an-ip", "node-a=10.0.0.1:12346"} {
		if _, err := parseNodeAddresses([]string{bad}); err == nil {
			t.Errorf("--node %s accepted", bad)
		}
	}
}
