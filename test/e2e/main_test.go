package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sitecon/sitecon/test/sitebox"
)

// The end-to-end tests: the sitecon binary built once, and one sitebox
// site shared by the package (started by the first test that asks). What
// the tests share besides is in helpers_test.go.

var sitecon string // path of the sitecon binary under test

// binDir is where this process's tests build their helper binaries.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// deviceConfig is where sitecon reads a device's own cluster config when
// no --config is given (DefaultConfigDir in cmd/form_cmd.go).
const deviceConfig = "/persist/sitecon/cluster.json"

func run(m *testing.M) int {
	// The tests run sitecon's commands and console as a technician does,
	// most without --config: on a machine that holds a device's cluster
	// config they would read it, scan its LAN's prefix and dial its peers.
	// Such a machine is refused, before anything is sent.
	if _, err := os.Stat(deviceConfig); err == nil {
		fmt.Fprintf(os.Stderr, "this machine holds a device's cluster config (%s): the end-to-end tests would read it and send to its cluster network; run them on a machine without one\n", deviceConfig)
		return 1
	}
	// This process's own directory for the binaries its tests build (the
	// k3s stand-in, the sitebox CLI): shards run side by side.
	dir, err := os.MkdirTemp("", "sitecon-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	// make test builds sitecon once for all its shards (test/suite.sh).
	if bin := os.Getenv("SITECON_E2E_BIN"); bin != "" {
		sitecon = bin
		return sitebox.RunMain(m)
	}
	sitecon = filepath.Join(dir, "sitecon")
	build := exec.Command("go", "build", "-o", sitecon, "github.com/sitecon/sitecon")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sitecon:", err)
		return 1
	}
	return sitebox.RunMain(m)
}
