// Package dist tests what `make dist` ships: the Debian package installed
// into a throwaway root with dpkg, its files and modes, its systemd unit,
// and what stays behind when it is removed.
package dist

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/test/prereq"
)

const repoRoot = "../.."

// The stamped version a build with VERSION=v1.2.3-4-gabcdef1 carries, and
// the Debian version it becomes (no '-', which would start a revision).
const (
	stampedVersion = "v1.2.3-4-gabcdef1"
	debVersion     = "1.2.3+4+gabcdef1"
	stampedCommit  = "abcdef1234567890abcdef1234567890abcdef12"
)

func TestDebianPackageInstallsIntoARoot(t *testing.T) {
	for _, tool := range []string{"dpkg", "systemd-analyze"} {
		_, err := exec.LookPath(tool)
		prereq.Need(t, err == nil, tool+" (apt-get install dpkg systemd)")
	}
	arch := runtime.GOARCH
	out := t.TempDir()
	dist := exec.Command("packaging/dist.sh", out)
	dist.Dir = repoRoot
	dist.Env = append(os.Environ(), "ARCHES="+arch, "VERSION="+stampedVersion, "COMMIT="+stampedCommit)
	if b, err := dist.CombinedOutput(); err != nil {
		t.Fatalf("packaging/dist.sh: %v\n%s", err, b)
	}
	deb := filepath.Join(out, "sitecon_"+debVersion+"_"+arch+".deb")
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{filepath.Base(deb), "sitecon-linux-" + arch} {
		if !strings.Contains(string(sums), "  "+name+"\n") {
			t.Errorf("SHA256SUMS does not list %s:\n%s", name, sums)
		}
	}
	check := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check: %v\n%s", err, b)
	}

	root := t.TempDir()
	for _, dir := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		mustMkdir(t, filepath.Join(root, dir))
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dpkg := func(args ...string) {
		t.Helper()
		// The maintainer scripts run outside the root with DPKG_ROOT set:
		// they must leave this machine's systemd alone.
		cmd := exec.Command("dpkg", append([]string{"--root=" + root, "--force-not-root", "--force-script-chrootless", "--log=/dev/null"}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	dpkg("-i", deb)

	// Files and their modes.
	for path, want := range map[string]os.FileMode{
		"usr/bin/sitecon": 0o755,
		"usr/lib/systemd/system/sitecon-agent.service":     0o644,
		"etc/default/sitecon-agent":                        0o644,
		"usr/share/man/man1/sitecon.1.gz":                  0o644,
		"usr/share/man/man1/sitecon-agent.1.gz":            0o644,
		"usr/share/bash-completion/completions/sitecon":    0o644,
		"usr/share/zsh/vendor-completions/_sitecon":        0o644,
		"usr/share/fish/vendor_completions.d/sitecon.fish": 0o644,
		"var/lib/sitecon":                                  os.ModeDir | 0o700,
		"persist/sitecon":                                  os.ModeDir | 0o700,
	} {
		info, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("/%s not installed: %v", path, err)
			continue
		}
		if got := info.Mode() & (os.ModeDir | os.ModePerm); got != want {
			t.Errorf("/%s has mode %v, want %v", path, got, want)
		}
	}
	conffiles, _ := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/sitecon.conffiles"))
	if !strings.Contains(string(conffiles), "/etc/default/sitecon-agent") {
		t.Errorf("/etc/default/sitecon-agent is not a conffile (a technician's flags would be overwritten on upgrade): %q", conffiles)
	}

	// The binary: static (it runs on any device's libc) and stamped.
	bin := filepath.Join(root, "usr/bin/sitecon")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("/usr/bin/sitecon is not an ELF binary: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/usr/bin/sitecon is dynamically linked (has an ELF interpreter)")
		}
	}
	f.Close()
	b, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("installed sitecon version: %v", err)
	}
	var v struct{ Version, Commit string }
	if err := json.Unmarshal(b, &v); err != nil || v.Version != stampedVersion || v.Commit != stampedCommit {
		t.Errorf("installed sitecon version says %s (err %v), want version %s commit %s", b, err, stampedVersion, stampedCommit)
	}

	checkUnit(t, root)

	// Removing the package keeps the agent's records and the technician's
	// flags: leaving a cluster is `sitecon agent leave`, never a side
	// effect of a package. Purging drops the flags, still not the records.
	record := filepath.Join(root, "var/lib/sitecon/formed.json")
	if err := os.WriteFile(record, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dpkg("-r", "sitecon")
	for _, gone := range []string{"usr/bin/sitecon", "usr/lib/systemd/system/sitecon-agent.service"} {
		if _, err := os.Stat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("/%s still there after dpkg -r (%v)", gone, err)
		}
	}
	for _, kept := range []string{"var/lib/sitecon/formed.json", "etc/default/sitecon-agent"} {
		if _, err := os.Stat(filepath.Join(root, kept)); err != nil {
			t.Errorf("/%s gone after dpkg -r: %v", kept, err)
		}
	}
	dpkg("--purge", "sitecon")
	if _, err := os.Stat(filepath.Join(root, "etc/default/sitecon-agent")); !os.IsNotExist(err) {
		t.Errorf("/etc/default/sitecon-agent still there after purge (%v)", err)
	}
	if _, err := os.Stat(record); err != nil {
		t.Errorf("the agent's record is gone after purge: %v", err)
	}
}

// checkUnit verifies the installed unit with systemd-analyze and holds it
// to what the agent needs.
func checkUnit(t *testing.T, root string) {
	t.Helper()
	unitPath := filepath.Join(root, "usr/lib/systemd/system/sitecon-agent.service")
	// verify --root resolves the unit's dependencies inside the root: give
	// it the host's targets and slices, as a device has them.
	for _, pattern := range []string{"/usr/lib/systemd/system/*.target", "/usr/lib/systemd/system/*.slice"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if b, err := os.ReadFile(m); err == nil {
				_ = os.WriteFile(filepath.Join(root, "usr/lib/systemd/system", filepath.Base(m)), b, 0o644)
			}
		}
	}
	// systemd-analyze exits 0 on a line it ignores (an unknown option or
	// value), so any output at all is a failure.
	b, err := exec.Command("systemd-analyze", "verify", "--man=no", "--root="+root, "sitecon-agent.service").CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(b))) > 0 {
		t.Errorf("systemd-analyze verify sitecon-agent.service: %v\n%s", err, b)
	}
	settings := unitSettings(t, unitPath)
	for key, want := range map[string]string{
		"Restart": "always",
		// The agent stops k3s itself; the apps' shims outlive an agent restart.
		"KillMode":           "process",
		"Delegate":           "yes",
		"After":              "network-online.target",
		"Wants":              "network-online.target",
		"Before":             "k3s.service k3s-agent.service",
		"Conflicts":          "k3s.service k3s-agent.service",
		"StateDirectory":     "sitecon",
		"StateDirectoryMode": "0700",
		"RuntimeDirectory":   "sitecon",
		"WantedBy":           "multi-user.target",
	} {
		if got := settings[key]; got != want {
			t.Errorf("unit %s=%q, want %q", key, got, want)
		}
	}
	if !strings.HasPrefix(settings["ExecStart"], "/usr/bin/sitecon agent ") {
		t.Errorf("unit ExecStart=%q does not run the installed agent", settings["ExecStart"])
	}
	// The agent is k3s's parent: a sandbox here is every container's.
	for _, inherited := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups", "ProtectClock", "NoNewPrivileges",
		"SystemCallFilter", "LockPersonality", "RestrictRealtime", "RestrictSUIDSGID", "MemoryDenyWriteExecute",
		"RestrictNamespaces", "CapabilityBoundingSet", "UMask", "DevicePolicy", "DeviceAllow"} {
		if v, ok := settings[inherited]; ok {
			t.Errorf("unit sets %s=%s: k3s and every container would inherit it", inherited, v)
		}
	}
}

func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		if key, value, ok := strings.Cut(line, "="); ok {
			settings[key] = value
		}
	}
	return settings
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
