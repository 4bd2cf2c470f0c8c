package agent

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
)

// gcPercentChild is set in the environment of the child this test starts:
// the collector's target is the process's own, so each case is a process
// of its own, started with the environment the case gives.
const gcPercentChild = "SITECON_TEST_GC_PERCENT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(gcPercentChild) != "" {
		SetGCPercent(os.Getenv)
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		fmt.Print(s[0].Value.Uint64())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The agent collects its garbage at GCPercent, not at Go's 100, unless
// the operator's GOGC says otherwise: that choice is theirs and kept.
func TestAgentCollectsAtItsGCPercentUnlessGOGCIsSet(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
	for _, c := range []struct {
		gogc, want string
	}{
		{"", fmt.Sprint(GCPercent)},
		{"100", "100"},
		{"200", "200"},
	} {
		cmd := exec.Command(exe, "-test.run", "^$")
		cmd.Env = append(slices.Clone(env), gcPercentChild+"=1")
		if c.gogc != "" {
			cmd.Env = append(cmd.Env, "GOGC="+c.gogc)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOGC=%q: %v", c.gogc, err)
		}
		if got := strings.TrimSpace(string(out)); got != c.want {
			t.Errorf("GOGC=%q: the agent collects at %s%%, want %s%%", c.gogc, got, c.want)
		}
	}
}
