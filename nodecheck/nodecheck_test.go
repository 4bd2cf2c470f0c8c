package nodecheck

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/test/testcert"
)

// fakeHost is a host tree for tests: sys, etc and bin under dir, with
// /proc either the real one or a tree of fake processes.
func fakeHost(t *testing.T, proc string) (Host, string) {
	t.Helper()
	dir := t.TempDir()
	h := Host{Proc: proc, Sys: filepath.Join(dir, "sys"), Etc: filepath.Join(dir, "etc"), BinDirs: []string{filepath.Join(dir, "sbin")}}
	if proc == "" {
		h.Proc = filepath.Join(dir, "proc")
	}
	for _, d := range []string{h.Proc, h.Sys, h.Etc, h.BinDirs[0]} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h, dir
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// startNamed starts a real process named name (a copy of sleep) and
// returns it; the test stops it.
func startNamed(t *testing.T, name string) *exec.Cmd {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	src, err := os.Open(sleep)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// iscsid is found by a real process's name in the real /proc: with a
// process named iscsid running the prerequisite is met; once it has
// exited, it is not.
func TestIscsidIsARealProcess(t *testing.T) {
	h, _ := fakeHost(t, "/proc")
	if Longhorn(h).Iscsid.OK {
		t.Skip("an iscsid runs on this machine already: its absence cannot be shown here")
	}
	cmd := startNamed(t, "iscsid")
	if got := Longhorn(h).Iscsid; !got.OK || !strings.Contains(got.Evidence, "iscsid runs") {
		t.Fatalf("iscsid running (pid %d): %+v", cmd.Process.Pid, got)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := Longhorn(h).Iscsid; got.OK || !strings.Contains(got.Evidence, "no process named iscsid") {
		t.Errorf("iscsid stopped: %+v", got)
	}
}

// The module, the NFS client and a /proc that cannot be read.
func TestLonghornModuleAndNFSClient(t *testing.T) {
	h, _ := fakeHost(t, "")
	r := Longhorn(h)
	if r.IscsiTCP.OK || r.NFSClient.OK || !r.Multipathd.OK {
		t.Fatalf("empty host: %+v", r)
	}
	if err := os.MkdirAll(filepath.Join(h.Sys, "module", "iscsi_tcp"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Not executable: no client.
	writeFile(t, filepath.Join(h.BinDirs[0], "mount.nfs4"), "", 0o644)
	if r := Longhorn(h); !r.IscsiTCP.OK || r.NFSClient.OK {
		t.Fatalf("module loaded, mount.nfs4 not executable: %+v", r)
	}
	writeFile(t, filepath.Join(h.BinDirs[0], "mount.nfs"), "#!/bin/sh\n", 0o755)
	if r := Longhorn(h); !r.NFSClient.OK {
		t.Fatalf("mount.nfs there: %+v", r.NFSClient)
	}
	h.Proc = filepath.Join(h.Proc, "absent")
	if r := Longhorn(h); r.Iscsid.OK || r.Iscsid.Problem == "" || r.Multipathd.OK || r.Multipathd.Problem == "" {
		t.Errorf("unreadable /proc must be unknown, not met nor missing: %+v", r)
	}
}

// multipathd is a trap only when it runs without Longhorn's devices
// blacklisted (Longhorn's knowledge base), in multipath.conf or a drop-in.
func TestMultipathdBlacklist(t *testing.T) {
	for _, c := range []struct {
		name    string
		running bool
		conf    map[string]string // path under etc → text
		ok      bool
	}{
		{"not running", false, nil, true},
		{"running without a config", true, nil, false},
		{"running, Longhorn's knowledge base blacklist", true, map[string]string{"multipath.conf": "defaults {\n    user_friendly_names yes\n}\nblacklist {\n    devnode \"^sd[a-z0-9]+\"\n}\n"}, true},
		{"running, blacklist by vendor", true, map[string]string{"multipath.conf": "blacklist {\n  device {\n    vendor \"IET\"\n    product \"VIRTUAL-DISK\"\n  }\n}\n"}, true},
		{"running, another vendor blacklisted", true, map[string]string{"multipath.conf": "blacklist {\n  device {\n    vendor \"NETAPP\"\n    product \".*\"\n  }\n}\n"}, false},
		{"running, only nvme blacklisted", true, map[string]string{"multipath.conf": "blacklist {\n  devnode \"^nvme\"\n}\n"}, false},
		{"running, blacklist commented out", true, map[string]string{"multipath.conf": "blacklist {\n#  devnode \"^sd[a-z0-9]+\"\n}\n"}, false},
		{"running, excepted again", true, map[string]string{"multipath.conf": "blacklist {\n  devnode \"^sd[a-z0-9]+\"\n}\nblacklist_exceptions {\n  devnode \"^sda\"\n}\n"}, false},
		{"running, blacklist in a drop-in", true, map[string]string{"multipath.conf": "defaults {\n}\n", "multipath/conf.d/longhorn.conf": "blacklist {\n  devnode \"^sd[a-z0-9]+\" # Longhorn\n}\n"}, true},
		{"running, every wwid blacklisted", true, map[string]string{"multipath.conf": "blacklist {\n  wwid \".*\"\n}\n"}, true},
		// A blacklist of the boot disk alone leaves the other sd devices,
		// Longhorn's among them, to multipathd.
		{"running, only the boot disk blacklisted", true, map[string]string{"multipath.conf": "blacklist {\n  devnode \"^sda\"\n}\n"}, false},
		{"running, only sda and sdb blacklisted", true, map[string]string{"multipath.conf": "blacklist {\n  devnode \"^sd[ab]$\"\n}\n"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, _ := fakeHost(t, "")
			if c.running {
				writeFile(t, filepath.Join(h.Proc, "812", "comm"), "multipathd\n", 0o644)
			}
			writeFile(t, filepath.Join(h.Proc, "1", "comm"), "init\n", 0o644)
			for p, text := range c.conf {
				writeFile(t, filepath.Join(h.Etc, p), text, 0o644)
			}
			got := Longhorn(h).Multipathd
			if got.OK != c.ok || got.Evidence == "" {
				t.Errorf("got %+v, want ok=%v", got, c.ok)
			}
		})
	}
}

// adjtimex's answer read as timedatectl reads it: STA_UNSYNC or the
// maximum error at its 16 s ceiling is not synchronised.
func TestTimeSync(t *testing.T) {
	fake := func(status int32, maxerr int64, state int, err error) func(*unix.Timex) (int, error) {
		return func(tx *unix.Timex) (int, error) {
			if tx.Modes != 0 {
				t.Errorf("adjtimex asked to change the clock: modes %#x", tx.Modes)
			}
			tx.Status, tx.Maxerror, tx.Esterror = status, maxerr, maxerr/2
			return state, err
		}
	}
	for _, c := range []struct {
		name string
		adj  func(*unix.Timex) (int, error)
		sync bool
		prob bool
	}{
		{"synchronised", fake(unix.STA_PLL, 12000, unix.TIME_OK, nil), true, false},
		{"STA_UNSYNC", fake(unix.STA_UNSYNC, 16000000, unix.TIME_ERROR, nil), false, false},
		{"max error at the ceiling", fake(unix.STA_PLL, 16000000, unix.TIME_OK, nil), false, false},
		{"adjtimex fails", fake(0, 0, -1, errors.New("operation not permitted")), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := TimeSync(c.adj)
			if got.Synchronized != c.sync || (got.Problem != "") != c.prob {
				t.Errorf("%+v", got)
			}
		})
	}
	// The real kernel answers, and the report says what it said.
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		t.Fatal(err)
	}
	got := TimeSync(unix.Adjtimex)
	if got.Problem != "" || got.State != state || got.Status&unix.STA_UNSYNC != int(tx.Status)&unix.STA_UNSYNC {
		t.Errorf("real adjtimex: %+v, kernel said state %d status %#x", got, state, tx.Status)
	}
	t.Logf("this machine: %+v", got)
}

// The certificates report: every *.crt of server/tls and agent with its
// expiry; a data dir without them says so.
func TestCerts(t *testing.T) {
	dir := t.TempDir()
	if r := Certs(dir); r.Found || len(r.Files) != 0 || r.Problem != "" {
		t.Errorf("empty data dir: %+v", r)
	}
	if r := Certs(""); r.Problem == "" {
		t.Errorf("no data dir: %+v", r)
	}
	at := time.Now().Add(20 * 24 * time.Hour).Truncate(time.Second)
	testcert.Write(t, filepath.Join(dir, "server/tls/client-admin.crt"), at)
	testcert.Write(t, filepath.Join(dir, "agent/serving-kubelet.crt"), at.Add(time.Hour))
	writeFile(t, filepath.Join(dir, "agent/serving-kubelet.key"), "key", 0o600)
	r := Certs(dir)
	if !r.Found || len(r.Files) != 2 || r.Problem != "" {
		t.Fatalf("%+v", r)
	}
	for _, f := range r.Files {
		if f.NotAfter.IsZero() || f.Problem != "" || !strings.HasSuffix(f.Path, ".crt") {
			t.Errorf("%+v", f)
		}
	}
	// Past the bound, the first to expire and the unreadable are kept.
	for i := range MaxReportedCerts + 5 {
		testcert.Write(t, filepath.Join(dir, fmt.Sprintf("agent/many/%03d.crt", i)), at.Add(time.Duration(i+2)*time.Hour))
	}
	writeFile(t, filepath.Join(dir, "agent/broken.crt"), "not pem", 0o600)
	r = Certs(dir)
	if len(r.Files) != MaxReportedCerts || r.Omitted != 8 || r.Files[0].Problem == "" ||
		!strings.HasSuffix(r.Files[1].Path, "client-admin.crt") || !strings.HasSuffix(r.Files[2].Path, "serving-kubelet.crt") {
		t.Errorf("%d files, %d omitted, first %+v %+v %+v", len(r.Files), r.Omitted, r.Files[0], r.Files[1], r.Files[2])
	}
}

// An agent in a container reads the host's tree where it is mounted.
func TestHostAt(t *testing.T) {
	h := HostAt("/hostfs")
	if h.Proc != "/hostfs/proc" || h.Sys != "/hostfs/sys" || h.Etc != "/hostfs/etc" || h.BinDirs[0] != "/hostfs/sbin" {
		t.Errorf("%+v", h)
	}
	if DefaultHost.Proc != "/proc" || DefaultHost.Etc != "/etc" {
		t.Errorf("default: %+v", DefaultHost)
	}
}
