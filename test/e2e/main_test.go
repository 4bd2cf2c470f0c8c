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

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sitecon-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sitecon = filepath.Join(dir, "sitecon")
	build := exec.Command("go", "build", "-o", sitecon, "github.com/sitecon/sitecon")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sitecon:", err)
		return 1
	}
	return sitebox.RunMain(m)
}
