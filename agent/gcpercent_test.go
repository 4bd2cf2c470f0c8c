package agent

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// gcPercentChild is set in the environment of the children this test
// starts, to the --gc-percent each is given ("" for none): the
// collector's target is the process's own, so each case is a process of
// its own, started with the environment the case gives.
const gcPercentChild = "SITECON_TEST_GC_PERCENT_CHILD"

func TestMain(m *testing.M) {
	if flag, ok := os.LookupEnv(gcPercentChild); ok {
		percent, given := DefaultGCPercent, flag != ""
		if given {
			percent, _ = strconv.Atoi(flag)
		}
		if err := SetGCPercent(percent, given, os.Getenv); err != nil {
			fmt.Print(err)
			os.Exit(2)
		}
		fmt.Print(debugGCPercent())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The agent collects its garbage at DefaultGCPercent, not at Go's 100;
// an operator's GOGC stands unless --gc-percent is given, which is the
// agent's alone (GOGC reaches the k3s it starts too).
func TestAgentCollectsAtItsGCPercent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
	for _, c := range []struct {
		gogc, flag, want string
	}{
		{"", "", fmt.Sprint(DefaultGCPercent)},
		{"100", "", "100"},
		{"200", "", "200"},
		{"100", "30", "30"},
		{"", "200", "200"},
	} {
		cmd := exec.Command(exe, "-test.run", "^$")
		cmd.Env = append(slices.Clone(env), gcPercentChild+"="+c.flag)
		if c.gogc != "" {
			cmd.Env = append(cmd.Env, "GOGC="+c.gogc)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOGC=%q --gc-percent=%q: %v: %s", c.gogc, c.flag, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != c.want {
			t.Errorf("GOGC=%q --gc-percent=%q: the agent collects at %s%%, want %s%%", c.gogc, c.flag, got, c.want)
		}
	}
}

// A target that is no target (0, or a negative one, Go's GOGC=off) is
// refused with what to give instead, and changes nothing.
func TestGCPercentBelowOneIsRefused(t *testing.T) {
	before := debugGCPercent()
	for _, p := range []int{0, -1} {
		err := SetGCPercent(p, true, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), "give at least 1") {
			t.Errorf("--gc-percent %d: %v", p, err)
		}
	}
	if after := debugGCPercent(); after != before {
		t.Errorf("a refused --gc-percent changed the target from %d to %d", before, after)
	}
}

// debugGCPercent is the target the runtime collects at.
func debugGCPercent() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
