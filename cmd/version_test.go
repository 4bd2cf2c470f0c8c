package cmd

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The build stamps the version and commit, and the binary reports the
// client libraries it was linked with as go.mod pins them: a field report
// that says "sitecon version" says which API versions it speaks.
func TestVersionIsStampedByTheBuild(t *testing.T) {
	if raceEnabled {
		// It builds the binary afresh, which the race detector does not
		// watch: make test's plain run checks it, once.
		t.Skip("checked by the run without the race detector")
	}
	bin := filepath.Join(t.TempDir(), "sitecon")
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X github.com/sitecon/sitecon/cmd.buildVersion=v9.8.7-test -X github.com/sitecon/sitecon/cmd.buildCommit=0123abcd", "github.com/sitecon/sitecon")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("sitecon version -o json: %v", err)
	}
	var got versionInfo
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("version -o json is not JSON: %v\n%s", err, out)
	}
	goMod, err := os.ReadFile(filepath.Join("..", "go.mod")) // the module's, one up from cmd/
	if err != nil {
		t.Fatal(err)
	}
	pinned := func(module string) string {
		m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindSubmatch(goMod)
		if m == nil {
			t.Fatalf("go.mod does not require %s", module)
		}
		return string(m[1])
	}
	want := versionInfo{
		Version:    "v9.8.7-test",
		Commit:     "0123abcd",
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		Kubernetes: pinned(clientGoModule),
		KubeVirt:   pinned(kubeVirtModule),
		Longhorn:   pinned(longhornModule),
	}
	if got != want {
		t.Errorf("sitecon version -o json:\n got %+v\nwant %+v", got, want)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("sitecon version: %v", err)
	}
	for _, line := range []string{"Version:     v9.8.7-test", "Commit:      0123abcd", "Kubernetes:  k8s.io/client-go " + want.Kubernetes} {
		if !strings.Contains(string(text), line) {
			t.Errorf("sitecon version does not say %q:\n%s", line, text)
		}
	}
	flag, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("sitecon --version: %v", err)
	}
	if string(flag) != string(text) {
		t.Errorf("sitecon --version differs from sitecon version:\n%s\nvs\n%s", flag, text)
	}
}
