package main

import (
	"strings"
	"testing"
)

// A failed test's whole output is shown, a passed one's is not; a package
// whose stream ends before it did (a killed run) fails the suite; the
// slowest tests come first.
func TestReportShowsFailuresAndTheSlowest(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestQuick"}`,
		`{"Action":"output","Package":"p","Test":"TestQuick","Output":"quiet\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestQuick","Elapsed":0.5}`,
		`{"Action":"run","Package":"p","Test":"TestSlow"}`,
		`{"Action":"output","Package":"p","Test":"TestSlow","Output":"the reason it broke\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestSlow","Elapsed":42}`,
		`{"Action":"fail","Package":"p","Elapsed":43}`,
		`{"Action":"start","Package":"q"}`,
		`{"Action":"output","Package":"q","Output":"panic: test timed out\n"}`,
	}, "\n")
	s := newSuite()
	if err := s.read(strings.NewReader(stream), "unit"); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if s.report(&out, 20) {
		t.Error("a suite with a failed test passed")
	}
	got := out.String()
	for _, want := range []string{"=== FAIL p TestSlow (unit)\nthe reason it broke", "=== q (unit) never ended", "panic: test timed out", "fail      43s  p (unit)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet") {
		t.Errorf("a passed test's output is shown:\n%s", got)
	}
	if slow, quick := strings.LastIndex(got, "TestSlow (unit)\n"), strings.LastIndex(got, "TestQuick (unit)\n"); slow < 0 || quick < slow {
		t.Errorf("the slowest test is not listed first:\n%s", got)
	}
}

// Every test lands in exactly one shard, and the shards' times are close:
// the longest tests are spread before the short ones fill in.
func TestShardsSplitEveryTestOnceByTime(t *testing.T) {
	tests := []string{"TestA", "TestB", "TestC", "TestD", "TestE", "TestNew"}
	durations := map[string]float64{"TestA": 100, "TestB": 90, "TestC": 20, "TestD": 10, "TestE": 5}
	seen := map[string]int{}
	var loads []float64
	for i := range 2 {
		var load float64
		for _, name := range shard(tests, durations, i, 2) {
			seen[name]++
			if d, ok := durations[name]; ok {
				load += d
			} else {
				load += unknownSeconds
			}
		}
		loads = append(loads, load)
	}
	for _, name := range tests {
		if seen[name] != 1 {
			t.Errorf("%s is in %d shards, want 1", name, seen[name])
		}
	}
	if d := loads[0] - loads[1]; d > 20 || d < -20 {
		t.Errorf("shards take %v: not balanced", loads)
	}
	if p := runPattern([]string{"TestA", "TestB"}); p != "^(TestA|TestB)$" {
		t.Errorf("pattern %q", p)
	}
}
