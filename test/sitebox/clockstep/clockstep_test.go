package clockstep

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A program that prints its wall clock (Unix nanoseconds) and its
// monotonic time since start for each line it reads.
const clockProgram = `package main

import (
	"bufio"
	"fmt"
	"os"
	"time"
)

func main() {
	start := time.Now()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		now := time.Now()
		fmt.Println(now.UnixNano(), now.Sub(start).Nanoseconds())
	}
}
`

// clockReader runs the program and reads it one line at a time.
type clockReader struct {
	in  *os.File
	out *bufio.Scanner
}

func (c clockReader) read(t *testing.T) (wall time.Time, elapsed time.Duration) {
	t.Helper()
	if _, err := c.in.WriteString("\n"); err != nil {
		t.Fatal(err)
	}
	if !c.out.Scan() {
		t.Fatalf("the program ended: %v", c.out.Err())
	}
	f := strings.Fields(c.out.Text())
	w, err1 := strconv.ParseInt(f[0], 10, 64)
	e, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("unreadable line %q", c.out.Text())
	}
	return time.Unix(0, w), time.Duration(e)
}

func start(t *testing.T, bin string, env ...string) clockReader {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	return clockReader{in: in.(*os.File), out: bufio.NewScanner(out)}
}

// near fails unless got is want within a second.
func near(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if d := got.Sub(want); d < -time.Second || d > time.Second {
		t.Fatalf("%s: the program's clock reads %s, want %s (off by %s)", what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano), d)
	}
}

// A program built with the overlay reads the machine's clock plus the
// step in the file its environment names, a step staged while it runs
// included, and its durations stay unstepped; without the variable, or
// once the file is gone, it reads the machine's clock.
func TestOverlayStepsTheWallClockOnly(t *testing.T) {
	dir := t.TempDir()
	overlay, err := Overlay("go", filepath.Join(dir, "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"main.go": clockProgram, "go.mod": "module clockprogram\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin, plain := filepath.Join(dir, "clockprogram"), filepath.Join(dir, "plainprogram")
	for _, b := range []struct {
		out   string
		flags []string
	}{{bin, []string{"-overlay", overlay}}, {plain, nil}} {
		build := exec.Command("go", append(append([]string{"build"}, b.flags...), "-o", b.out, ".")...)
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", b.flags, err, out)
		}
	}
	if ok, err := Reads(bin); err != nil || !ok {
		t.Fatalf("Reads(%s) = %v, %v: want true for a program built with the overlay", bin, ok, err)
	}
	if ok, err := Reads(plain); err != nil || ok {
		t.Fatalf("Reads(%s) = %v, %v: want false, it was built without the overlay", plain, ok, err)
	}

	stepFile := filepath.Join(dir, "clock_step")
	if err := os.WriteFile(stepFile, []byte("90s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unset := start(t, bin)
	wall, _ := unset.read(t)
	near(t, "no variable", wall, time.Now())

	stepped := start(t, bin, EnvVar+"="+stepFile)
	wall, before := stepped.read(t)
	near(t, "stepped 90s at start", wall, time.Now().Add(90*time.Second))

	// Stepped back while it runs: seen within the overlay's 200 ms.
	if err := os.WriteFile(stepFile, []byte("-2m"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		wall, after := stepped.read(t)
		if d := wall.Sub(time.Now().Add(-2 * time.Minute)); d > -time.Second && d < time.Second {
			// 3.5 minutes back on the wall clock, and still forward on
			// the monotonic one.
			if after < before {
				t.Fatalf("the monotonic time went back with the wall clock: %s after %s", after, before)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a step of -2m staged while the program runs: its clock reads %s, %s from the machine's", wall.Format(time.RFC3339), time.Until(wall))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Healed: the file gone, the machine's clock again.
	if err := os.Remove(stepFile); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		wall, _ := stepped.read(t)
		if d := time.Until(wall); d > -time.Second && d < time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("step file removed: the program's clock still reads %s from the machine's", time.Until(wall))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
