package views

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair and returns its terminal side's path.
func openPTY(t *testing.T) string {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("the pseudo-terminal's number: %v", err)
	}
	return "/dev/pts/" + strconv.Itoa(n)
}

// Issue 38: piped (make demo | tee), the console drew into the pipe and the
// terminal showed nothing for minutes. It draws on the controlling
// terminal then, as less and top do, or says why it cannot; on a terminal
// it uses stdout as before.
func TestOpenTerminalWhenStdoutIsAPipe(t *testing.T) {
	pts := openPTY(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	opts, closeTerm, err := OpenTerminal(w, pts)
	if err != nil || len(opts) != 2 {
		t.Fatalf("piped, with a terminal to open: %d options, %v; want output and input on %s", len(opts), err, pts)
	}
	closeTerm()

	tty, err := os.OpenFile(pts, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if opts, _, err := OpenTerminal(tty, filepath.Join(t.TempDir(), "none")); err != nil || len(opts) != 0 {
		t.Errorf("on a terminal: %d options, %v; want stdout as it is", len(opts), err)
	}

	plain := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for tty, words := range map[string]string{plain: "nor is", filepath.Join(t.TempDir(), "none"): "cannot be opened"} {
		_, _, err := OpenTerminal(w, tty)
		if err == nil || !strings.Contains(err.Error(), "needs a terminal") || !strings.Contains(err.Error(), words) {
			t.Errorf("piped, %s: %v; want why nothing can be drawn (%q)", tty, err, words)
		}
	}
}
