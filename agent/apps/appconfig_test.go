package apps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 13 item 1: KubeVirt refuses a VMI without memory, so a VM app
// config without resources.memory is refused where it is read, naming the
// field, instead of being laid out as a VMI the API server turns away.
func TestVMAppNeedsMemory(t *testing.T) {
	vm := `{"uuid":"` + appID + `","displayname":"hmi","activate":true,"kind":"vm",
	 "image":"registry.local/hmi:1","designated_node_id":"` + nodeA + `","resources":{"cpu":"1"}}`
	dir := t.TempDir()
	path := filepath.Join(dir, "apps", "hmi.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(vm), 0o644); err != nil {
		t.Fatal(err)
	}
	files := ReadAppFiles(dir)
	if len(files.Apps) != 0 || !strings.Contains(files.Errors[path], "resources.memory: missing: a VM app needs its guest memory") {
		t.Fatalf("a VM app without memory: apps %v, errors %q", files.Apps, files.Errors)
	}

	withMemory := strings.Replace(vm, `{"cpu":"1"}`, `{"cpu":"1","memory":"2Gi"}`, 1)
	if app, err := ParseAppConfig([]byte(withMemory)); err != nil || app.Resources.Memory != "2Gi" {
		t.Fatalf("a VM app with memory: %+v, %v", app, err)
	}
	// A container's memory stays optional: Kubernetes runs a pod without
	// requests.
	container := strings.Replace(vm, `"kind":"vm"`, `"kind":"container"`, 1)
	if _, err := ParseAppConfig([]byte(container)); err != nil {
		t.Fatalf("a container app without memory: %v", err)
	}
}
