// Package clockstep gives a sitebox node a clock of its own. The nodes of
// a site share the machine's clock, and the kernel has no per-namespace
// wall clock (a time namespace offsets only the monotonic and boot
// clocks). So the sitecon and k3s stand-in binaries a site runs are built
// with an overlay (go build -overlay) of Go's time package whose Now adds
// the step read from the file that SITEBOX_CLOCK_STEP_FILE names:
// everything the program dates (records, signatures, leases, certificate
// checks) is dated on the node's stepped clock, while durations, which Go
// measures on the monotonic clock, are not stepped, as on a device whose
// clock NTP steps. The product's source is untouched; a binary built
// without the overlay ignores the variable.
//
// What the step does not reach: the kernel's own times (file dates) and
// the programs sitebox does not build (kwok's kubelets, etcd, the API
// server), which keep the machine's clock.
package clockstep

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvVar names the file a node's processes read their clock step from.
const EnvVar = "SITEBOX_CLOCK_STEP_FILE"

//go:embed timestep.go.src
var timestepSource []byte

// nowAnchor is the line of time.Now the overlay follows with the step.
const nowAnchor = "\tsec, nsec, mono := runtimeNow()\n"

const nowStepped = nowAnchor + "\tif st := sitebox_clockStep.Load(); st != 0 {\n" +
	"\t\tt := sec*1e9 + int64(nsec) + st\n" +
	"\t\tsec, nsec = t/1e9, int32(t%1e9)\n" +
	"\t}\n"

// Overlay writes, under dir, the overlay of the time package of the Go
// toolchain that goBin runs, and returns the path to give go build's
// -overlay flag. A toolchain whose time.Now no longer has the line the
// overlay follows is an error, not a build without a clock.
func Overlay(goBin, dir string) (string, error) {
	out, err := exec.Command(goBin, "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	timeDir := filepath.Join(strings.TrimSpace(string(out)), "src", "time")
	orig, err := os.ReadFile(filepath.Join(timeDir, "time.go"))
	if err != nil {
		return "", err
	}
	if n := bytes.Count(orig, []byte(nowAnchor)); n != 1 {
		return "", fmt.Errorf("%s: time.Now's line %q found %d times, want once: the clock overlay needs updating for this Go", filepath.Join(timeDir, "time.go"), strings.TrimSpace(nowAnchor), n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	patched := filepath.Join(dir, "time.go")
	added := filepath.Join(dir, "sitebox_clockstep.go")
	if err := os.WriteFile(patched, bytes.Replace(orig, []byte(nowAnchor), []byte(nowStepped), 1), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(added, timestepSource, 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(timeDir, "time.go"):              patched,
		filepath.Join(timeDir, "sitebox_clockstep.go"): added,
	}})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "overlay.json")
	return path, os.WriteFile(path, overlay, 0o644)
}

// Reads says whether the program at path was built with the overlay: it
// holds the variable's name, which only the overlay puts there.
func Reads(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return bytes.Contains(data, []byte(EnvVar)), nil
}
