package safety

import (
	"slices"
	"testing"
)

func TestReconfirm(t *testing.T) {
	pinned := "pinned app historian runs on node-b and will stop until the node is back"
	for name, tc := range map[string]struct {
		confirmed, now Preflight
		want           []string
	}{
		"unchanged": {
			confirmed: Preflight{Evict: []string{"a/x"}}, now: Preflight{Evict: []string{"a/x"}},
		},
		"other pods to evict are the drain's business": {
			confirmed: Preflight{Evict: []string{"a/x"}}, now: Preflight{Evict: []string{"a/x", "a/y"}},
		},
		"a warning accepted at confirmation stands": {
			confirmed: Preflight{Warnings: []string{pinned}}, now: Preflight{Warnings: []string{pinned}},
		},
		"a warning gone is no reason to stop": {
			confirmed: Preflight{Warnings: []string{pinned}}, now: Preflight{},
		},
		"a refusal since stops it": {
			confirmed: Preflight{}, now: Preflight{Refusals: []string{"node-b holds the only healthy replica of vol-1"}},
			want: []string{"node-b holds the only healthy replica of vol-1"},
		},
		"a warning nobody accepted stops it": {
			confirmed: Preflight{}, now: Preflight{Warnings: []string{pinned}},
			want: []string{"not confirmed: " + pinned},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Reconfirm(tc.confirmed, tc.now); !slices.Equal(got, tc.want) {
				t.Fatalf("Reconfirm = %q, want %q", got, tc.want)
			}
		})
	}
}
