package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sitecon/sitecon/test/sitebox"
)

// The end-to-end tests: the sitecon binary built once, one sitebox site
// shared by the package (started by the first test that asks), and the
// one way every test waits for a condition (until).

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
	defer os.RemoveAll(dir)
	sitecon = filepath.Join(dir, "sitecon")
	build := exec.Command("go", "build", "-o", sitecon, "github.com/sitecon/sitecon")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sitecon:", err)
		return 1
	}
	return sitebox.RunMain(m)
}

// runSitecon runs the binary and returns stdout, stderr and the exit error.
func runSitecon(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sitecon, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// until polls look (every 100 ms) until it reports done or within passes,
// and returns what it saw last. On the deadline the test fails with what
// it waited for and, when describe is given, what it last saw. Every
// e2e wait goes through here: a condition with a deadline, never a sleep.
func until[T any](t testing.TB, within time.Duration, what string, look func() (T, bool), describe func(T) string) T {
	t.Helper()
	var last T
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		var done bool
		last, done = look()
		return done, nil
	})
	if err != nil {
		msg := fmt.Sprintf("%s: not within %s", what, within)
		if describe != nil {
			msg += "; " + describe(last)
		}
		t.Fatal(msg)
	}
	return last
}
