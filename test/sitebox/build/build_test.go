// Package build holds the test of build.sh, the script that builds the
// control plane sitebox runs into a cache shared by every clone.
package build

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Two first builds at once (make test and make sitebox, or two clones)
// share the cache: one waits for the other and both end with the
// binaries, built once. Without a lock the second one's `rm -rf` of the
// staging directory removed the first one's work under it. A stand-in
// `go` on PATH plays the 11-minute build: it records each run, and fails
// if its output directory vanished while it worked.
func TestBuildsAtOnceBuildOnce(t *testing.T) {
	dir := t.TempDir()
	fakeBin := filepath.Join(dir, "fakebin")
	if err := os.MkdirAll(fakeBin, 0o755); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "go-runs")
	// The stand-in takes -o DIR/ and writes there the binaries named last
	// on its command line (k8s's four and etcd, or kwok), slowly.
	fakeGo := `#!/usr/bin/env bash
set -eu
echo run >> "` + runs + `"
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"
done
sleep 1
[ -d "$out" ] || { echo "output directory $out is gone" >&2; exit 1; }
for a in "$@"; do
  case "$a" in
    */kube-apiserver|*/kube-controller-manager|*/kube-scheduler|*/kubectl|*/etcd|*/kwok)
      b=$(basename "$a"); printf '#!/bin/sh\n' > "$out/$b"; chmod +x "$out/$b";;
  esac
done
sleep 1
[ -d "$out" ] || { echo "output directory $out is gone" >&2; exit 1; }
`
	if err := os.WriteFile(filepath.Join(fakeBin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	var wg sync.WaitGroup
	outs := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("bash", "build.sh")
			cmd.Env = append(os.Environ(), "SITEBOX_CACHE="+cache, "PATH="+fakeBin+":"+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(out), err
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Errorf("build %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	// One build is two go runs (k8s, then kwok).
	if n := strings.Count(string(data), "run"); n != 2 {
		t.Errorf("go ran %d times, want 2 (one build)", n)
	}
	bins, _ := filepath.Glob(filepath.Join(cache, "*", "bin", "*"))
	if len(bins) != 6 {
		t.Errorf("the cache holds %v, want the six binaries", bins)
	}
}
