package apps

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sitecon/sitecon/agent/config"
)

// App kinds and affinities as EVE's AppInstanceConfig names them.
const (
	KindContainer     = "container"
	KindVM            = "vm"
	AffinityPreferred = "preferred" // auto-migration
	AffinityRequired  = "required"  // pinned
)

// AppConfig is one app instance as the controller (or a technician) describes
// it, with EVE API field names.
type AppConfig struct {
	UUID string `json:"uuid"`
	// Version counts the controller's changes to this app (EVE's
	// UUIDandVersion): a node holding an older version never overwrites
	// what a newer one laid out. 0: unversioned.
	Version     uint64 `json:"version,omitempty"`
	DisplayName string `json:"displayname"`
	Activate    bool   `json:"activate"`
	Kind        string `json:"kind"`
	Image       string `json:"image"`
	// DesignatedNodeID is the UUID of the node that should run the app (DNId).
	DesignatedNodeID string            `json:"designated_node_id"`
	Affinity         string            `json:"affinity,omitempty"`
	NodeSelectLabels map[string]string `json:"node_select_labels,omitempty"`
	VolumeRefs       []string          `json:"volume_refs,omitempty"`
	Resources        AppResources      `json:"resources,omitzero"`
	// EnableVNC and VNCDisplay are EVE's VM console settings: the VM's VNC
	// server listens on port 5900 + display.
	EnableVNC  bool `json:"enable_vnc,omitempty"`
	VNCDisplay int  `json:"vnc_display,omitempty"`
	// Adapters are the host devices assigned to the app, as EVE's
	// AppInstanceConfig lists them (adapters; IoAdapterList in EVE's
	// pillar): a type and a name. sitecon passes through host Ethernet
	// ports (PhyIoNetEth), see passthrough.go.
	Adapters []IoAdapter `json:"adapters,omitempty"`
}

// VNCPort is the VM's VNC port, 0 when it has none.
func (a AppConfig) VNCPort() int {
	if a.Kind != KindVM || !a.EnableVNC {
		return 0
	}
	return 5900 + a.VNCDisplay
}

// AppResources are an app's requests, as Kubernetes quantities.
type AppResources struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// Pinned says the app must stay on its designated node.
func (a AppConfig) Pinned() bool { return a.Affinity == AffinityRequired }

// MovedByTheFailoverAlone says that nothing but the failover guard holds
// the app's replacement while a copy may still run on a lost node: an
// auto app with no volume. With a volume, the replacement Kubernetes makes
// when the taint evicts the old pod waits for the volume, which the guard
// releases only on evidence that the old copy stopped; without one it
// would start at once. So such an app's pods tolerate a lost node for
// good, and the guard itself deletes the old pod, on the same evidence.
func (a AppConfig) MovedByTheFailoverAlone() bool { return !a.Pinned() && len(a.VolumeRefs) == 0 }

// VolumeConfig is one volume, with EVE API field names.
type VolumeConfig struct {
	UUID             string `json:"uuid"`
	Name             string `json:"name"`
	DesignatedNodeID string `json:"designated_node_id"`
	Size             string `json:"size"`
	ReplicaCount     int    `json:"replica_count"`
}

// AppFiles is what an apps directory held at one read: the apps and volumes
// that parsed, per file what did not, and the directories that could not be
// listed at all.
type AppFiles struct {
	Apps    map[string]AppConfig    // by file path
	Volumes map[string]VolumeConfig // by file path
	Errors  map[string]string       // by file path
	// Unreadable are the directories that could not be listed (missing,
	// unreadable, not a directory), by path: what they hold is unknown.
	Unreadable map[string]string
}

// AppSet is the config the agent acts on: apps and volumes by UUID, and the
// files it could not use (their last good version, if any, is kept).
type AppSet struct {
	Apps    map[string]AppConfig
	Volumes map[string]VolumeConfig
	Errors  map[string]string
	// Unknown are the failed files with no good version to fall back on (a
	// file broken when the agent started, an unreadable directory): what
	// they describe is unknown, so nothing may be removed for its absence.
	Unknown []string
}

// The apps directory holds one JSON object per file: apps/<any>.json and
// volumes/<any>.json.
const (
	appsSubdir    = "apps"
	volumesSubdir = "volumes"
)

// ReadAppFiles reads every app and volume file under dir. A directory that
// cannot be listed, missing included, is unreadable, never empty: a config
// partition remounting or a tool swapping the directory must not read as
// "every app removed". A bad file is an error for that file only.
func ReadAppFiles(dir string) AppFiles {
	out := AppFiles{Apps: map[string]AppConfig{}, Volumes: map[string]VolumeConfig{}, Errors: map[string]string{}, Unreadable: map[string]string{}}
	read := func(sub string, parse func(path string, data []byte) error) {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			out.Unreadable[filepath.Join(dir, sub)] = err.Error()
			return
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue // editors' temp files and the like
			}
			path := filepath.Join(dir, sub, e.Name())
			data, err := os.ReadFile(path)
			if err == nil {
				err = parse(path, data)
			}
			if err != nil {
				out.Errors[path] = err.Error()
			}
		}
	}
	read(appsSubdir, func(path string, data []byte) error {
		app, err := ParseAppConfig(data)
		if err == nil {
			out.Apps[path] = app
		}
		return err
	})
	read(volumesSubdir, func(path string, data []byte) error {
		vol, err := ParseVolumeConfig(data)
		if err == nil {
			out.Volumes[path] = vol
		}
		return err
	})
	return out
}

var labelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

// ParseAppConfig decodes and checks one app; the error lists every problem.
func ParseAppConfig(data []byte) (AppConfig, error) {
	var a AppConfig
	if err := config.DecodeStrict(data, &a); err != nil {
		return AppConfig{}, fmt.Errorf("not an app config: %w", err)
	}
	if a.Affinity == "" {
		a.Affinity = AffinityPreferred
	}
	var problems []string
	add := func(field, msg string) { problems = append(problems, field+": "+msg) }
	if !config.UUIDPattern.MatchString(a.UUID) {
		add("uuid", fmt.Sprintf("%q is not a UUID", a.UUID))
	}
	if a.DisplayName == "" {
		add("displayname", "missing")
	} else if !labelValue.MatchString(a.DisplayName) || len(a.DisplayName) > 63 {
		add("displayname", fmt.Sprintf("%q: use up to 63 letters, digits, '-', '_' or '.'", a.DisplayName))
	}
	if a.Kind != KindContainer && a.Kind != KindVM {
		add("kind", fmt.Sprintf("%q: use %q or %q", a.Kind, KindContainer, KindVM))
	}
	if a.Image == "" {
		add("image", "missing")
	}
	if !config.UUIDPattern.MatchString(a.DesignatedNodeID) {
		add("designated_node_id", fmt.Sprintf("%q is not a node UUID", a.DesignatedNodeID))
	}
	if a.Affinity != AffinityPreferred && a.Affinity != AffinityRequired {
		add("affinity", fmt.Sprintf("%q: use %q (auto-migration) or %q (pinned)", a.Affinity, AffinityPreferred, AffinityRequired))
	}
	for _, k := range slices.Sorted(maps.Keys(a.NodeSelectLabels)) {
		for _, msg := range validation.IsQualifiedName(k) {
			add("node_select_labels", fmt.Sprintf("key %q: %s", k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(a.NodeSelectLabels[k]) {
			add("node_select_labels", fmt.Sprintf("value of %q: %s", k, msg))
		}
	}
	for _, ref := range a.VolumeRefs {
		if !config.UUIDPattern.MatchString(ref) {
			add("volume_refs", fmt.Sprintf("%q is not a volume UUID", ref))
		}
	}
	for _, p := range adapterProblems(a) {
		add(p.field, p.msg)
	}
	if a.VNCDisplay < 0 || a.VNCDisplay > 99 {
		add("vnc_display", fmt.Sprintf("%d: use 0 to 99 (port 5900 + display)", a.VNCDisplay))
	}
	// A VM's memory is its guest's memory: KubeVirt refuses a VMI without
	// it, and no default fits every guest, so the config must say.
	if a.Kind == KindVM && a.Resources.Memory == "" {
		add("resources.memory", "missing: a VM app needs its guest memory (like 2Gi)")
	}
	for field, q := range map[string]string{"resources.cpu": a.Resources.CPU, "resources.memory": a.Resources.Memory} {
		if q == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q); err != nil {
			add(field, fmt.Sprintf("%q is not a quantity like 500m or 256Mi", q))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return AppConfig{}, errors.New(strings.Join(problems, "; "))
	}
	a.UUID, a.DesignatedNodeID = strings.ToLower(a.UUID), strings.ToLower(a.DesignatedNodeID)
	for i := range a.VolumeRefs {
		a.VolumeRefs[i] = strings.ToLower(a.VolumeRefs[i])
	}
	return a, nil
}

// ParseVolumeConfig decodes and checks one volume.
func ParseVolumeConfig(data []byte) (VolumeConfig, error) {
	var v VolumeConfig
	if err := config.DecodeStrict(data, &v); err != nil {
		return VolumeConfig{}, fmt.Errorf("not a volume config: %w", err)
	}
	var problems []string
	if !config.UUIDPattern.MatchString(v.UUID) {
		problems = append(problems, fmt.Sprintf("uuid: %q is not a UUID", v.UUID))
	}
	if v.Name == "" {
		problems = append(problems, "name: missing")
	}
	if !config.UUIDPattern.MatchString(v.DesignatedNodeID) {
		problems = append(problems, fmt.Sprintf("designated_node_id: %q is not a node UUID", v.DesignatedNodeID))
	}
	if q, err := resource.ParseQuantity(v.Size); err != nil || q.Sign() <= 0 {
		problems = append(problems, fmt.Sprintf("size: %q is not a positive quantity like 10Gi", v.Size))
	}
	if v.ReplicaCount < 1 || v.ReplicaCount > 5 {
		problems = append(problems, fmt.Sprintf("replica_count: %d, use 1 to 5", v.ReplicaCount))
	}
	if len(problems) > 0 {
		return VolumeConfig{}, errors.New(strings.Join(problems, "; "))
	}
	v.UUID, v.DesignatedNodeID = strings.ToLower(v.UUID), strings.ToLower(v.DesignatedNodeID)
	return v, nil
}

// MergeAppFiles turns a fresh read into the set the agent acts on. A file
// that fails keeps its last good version from previous, so a typo in one app
// never stops it; a directory that cannot be listed keeps every file last
// read from it and is unknown (removals held); two files claiming one UUID:
// the first path wins and the other is an error.
func MergeAppFiles(read AppFiles, lastGood AppFiles) (AppSet, AppFiles) {
	good := AppFiles{Apps: map[string]AppConfig{}, Volumes: map[string]VolumeConfig{}, Errors: map[string]string{}}
	set := AppSet{Errors: map[string]string{}}
	maps.Copy(set.Errors, read.Errors)
	for dir, err := range read.Unreadable {
		set.Errors[dir] = "directory cannot be read (" + err + "): keeping what it held, removals held"
		set.Unknown = append(set.Unknown, dir)
		for path, a := range lastGood.Apps {
			if filepath.Dir(path) == dir {
				good.Apps[path] = a
			}
		}
		for path, v := range lastGood.Volumes {
			if filepath.Dir(path) == dir {
				good.Volumes[path] = v
			}
		}
	}
	for path := range read.Errors {
		a, okApp := lastGood.Apps[path]
		v, okVolume := lastGood.Volumes[path]
		switch {
		case okApp:
			good.Apps[path] = a
		case okVolume:
			good.Volumes[path] = v
		default:
			set.Unknown = append(set.Unknown, path)
		}
	}
	slices.Sort(set.Unknown)
	maps.Copy(good.Apps, read.Apps)
	maps.Copy(good.Volumes, read.Volumes)
	// Apps and volumes share one UUID space: the first file (by path) to
	// define a UUID has it, a later one is an error.
	owner := map[string]string{}
	set.Apps = byUUID(good.Apps, "app", func(a AppConfig) string { return a.UUID }, owner, set.Errors)
	set.Volumes = byUUID(good.Volumes, "volume", func(v VolumeConfig) string { return v.UUID }, owner, set.Errors)
	return set, good
}

// DefaultFileAbsentGrace is how long an app or volume file a readable
// directory no longer lists keeps its last good version before its app
// or volume leaves the config (Options.FileAbsentGrace): long enough for a
// tool that removes the files and writes them again (rm *.json; cp ...),
// as the cluster config's own absence grace is.
const DefaultFileAbsentGrace = 30 * time.Second

// HoldAbsentFiles holds, for grace, the files lastGood had that this read
// no longer lists in a directory it could read: each is given to
// MergeAppFiles as a file that cannot be used, so its last good version
// stays, and the reason says until when. absentSince is when each file was
// first found absent (from the previous call); the map returned is the
// new one, and next is when the first hold lapses (0: none held). A file
// listed again ends its hold, and so does another file that now defines
// the same UUID (a rename). A directory that cannot be read is not an
// absence: MergeAppFiles holds what it held for as long as it lasts.
func HoldAbsentFiles(read, lastGood AppFiles, absentSince map[string]time.Time, now time.Time, grace time.Duration) (AppFiles, map[string]time.Time, time.Duration) {
	out := read
	out.Errors = maps.Clone(read.Errors)
	if out.Errors == nil {
		out.Errors = map[string]string{}
	}
	defined := map[string]bool{} // UUIDs this read defines
	for _, a := range read.Apps {
		defined[a.UUID] = true
	}
	for _, v := range read.Volumes {
		defined[v.UUID] = true
	}
	since := map[string]time.Time{}
	var next time.Duration
	hold := func(path, uuid string) {
		_, app := read.Apps[path]
		_, vol := read.Volumes[path]
		_, failed := read.Errors[path]
		_, unreadable := read.Unreadable[filepath.Dir(path)]
		if app || vol || failed || unreadable || defined[uuid] {
			return
		}
		first, ok := absentSince[path]
		if !ok {
			first = now
		}
		left := grace - now.Sub(first)
		if left <= 0 {
			return
		}
		since[path] = first
		out.Errors[path] = fmt.Sprintf("file absent since %s: its last good version stays until %s, then it is removed if still absent",
			first.Format(time.TimeOnly), first.Add(grace).Format(time.TimeOnly))
		if next == 0 || left < next {
			next = left
		}
	}
	for path, a := range lastGood.Apps {
		hold(path, a.UUID)
	}
	for path, v := range lastGood.Volumes {
		hold(path, v.UUID)
	}
	return out, since, next
}

// byUUID indexes configs by UUID in path order, recording each UUID's file
// in owner; a UUID owner already has is an error in errs on the later file.
func byUUID[T any](files map[string]T, kind string, uuid func(T) string, owner, errs map[string]string) map[string]T {
	out := map[string]T{}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		c := files[path]
		if first, dup := owner[uuid(c)]; dup {
			errs[path] = fmt.Sprintf("%s %s is already defined in %s", kind, uuid(c), first)
			continue
		}
		owner[uuid(c)] = path
		out[uuid(c)] = c
	}
	return out
}

// WorkloadName is the Kubernetes name of an app's workload: its display name
// made DNS-safe, plus the start of its UUID so two apps may share a name.
func WorkloadName(a AppConfig) string {
	return dnsName(a.DisplayName, 50) + "-" + a.UUID[:8]
}

// ClaimName is the PVC name of a volume.
func ClaimName(v VolumeConfig) string {
	return dnsName(v.Name, 40) + "-" + v.UUID[:8]
}

func dnsName(s string, max int) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > max {
		out = strings.Trim(out[:max], "-")
	}
	if out == "" {
		out = "app"
	}
	return out
}
