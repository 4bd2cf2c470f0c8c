// Package prereq decides what a test does when something it needs is not on
// the machine (root, iproute2, tmux): on a developer's machine it skips,
// saying what is missing; under CI (the CI variable set, as .ci/run does) it
// fails, because a CI run that skipped them has tested nothing and must not
// print ok.
package prereq

import (
	"os"
	"testing"
)

// Need skips (or, under CI, fails) the test when ok is false.
func Need(t testing.TB, ok bool, missing string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: a prerequisite is missing, so this test would test nothing: %s", missing)
		return
	}
	t.Skipf("skipped: %s (under CI this fails)", missing)
}
