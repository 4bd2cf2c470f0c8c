package kube

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube/kubetest"
)

// TestVolumeStatusCacheFollowsReads derives the volumes of successive
// reads of a site through one cache and requires, at every step, what a
// fresh derivation of that read gives: a volume whose objects changed
// (its own, a replica's, an engine's rebuild progress, the robustness the
// snapshot recorded) is derived again, and nothing else is kept that
// should not be. Each read lists the objects in another order, as a
// lister does. The statuses a read returned are never written by a later
// one.
func TestVolumeStatusCacheFollowsReads(t *testing.T) {
	now := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	d := Data{HasLonghorn: true, Robustness: map[string]RobustnessMark{}}
	for i := range 4 {
		v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vol-%d", i)}}
		v.Spec.NumberOfReplicas = 2
		v.Status.State, v.Status.Robustness = lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy
		d.Volumes = append(d.Volumes, v)
		d.Robustness[v.Name] = RobustnessMark{Robustness: v.Status.Robustness, Since: Since{Time: now.Add(-time.Hour), Exact: true}}
		for j := range 2 {
			d.Replicas = append(d.Replicas, kubetest.Replica(fmt.Sprintf("%s-r-%d", v.Name, j), v.Name, fmt.Sprintf("node-%c", 'a'+j), "", healthyAt, lhv1beta2.InstanceStateRunning))
		}
		e := &lhv1beta2.Engine{ObjectMeta: metav1.ObjectMeta{Name: v.Name + "-e"}}
		e.Spec.VolumeName = v.Name
		d.Engines = append(d.Engines, e)
	}
	volume := func(name string) (int, *lhv1beta2.Volume) {
		i := slices.IndexFunc(d.Volumes, func(v *lhv1beta2.Volume) bool { return v.Name == name })
		return i, d.Volumes[i].DeepCopy()
	}
	replicaOf := func(name string) int {
		return slices.IndexFunc(d.Replicas, func(r *lhv1beta2.Replica) bool { return r.Name == name })
	}
	engineOf := func(volume string) (int, *lhv1beta2.Engine) {
		i := slices.IndexFunc(d.Engines, func(e *lhv1beta2.Engine) bool { return e.Spec.VolumeName == volume })
		return i, d.Engines[i].DeepCopy()
	}
	steps := []struct {
		name   string
		change func()
	}{
		{"the first read", func() {}},
		{"nothing changed", func() {}},
		{"a volume's state written (a new object)", func() {
			i, v := volume("vol-1")
			v.Status.State = lhv1beta2.VolumeStateDetached
			d.Volumes[i] = v
		}},
		{"a volume degraded, its transition recorded", func() {
			i, v := volume("vol-2")
			v.Status.Robustness = lhv1beta2.VolumeRobustnessDegraded
			d.Volumes[i] = v
			d.Robustness = maps.Clone(d.Robustness)
			d.Robustness[v.Name] = RobustnessMark{Robustness: v.Status.Robustness, Since: Since{Time: now, Exact: true}}
		}},
		{"a replica failed (a new object)", func() {
			i := replicaOf("vol-2-r-1")
			r := d.Replicas[i].DeepCopy()
			r.Spec.FailedAt = "2026-11-26T01:59:00Z"
			d.Replicas[i] = r
		}},
		{"a rebuilding replica added on a third node", func() {
			d.Replicas = append(d.Replicas, kubetest.Replica("vol-2-r-2", "vol-2", "node-c", "", "", lhv1beta2.InstanceStateRunning))
		}},
		{"its engine reports the rebuild's progress", func() {
			i, e := engineOf("vol-2")
			e.Status.CurrentReplicaAddressMap = map[string]string{"vol-2-r-2": "10.0.0.3:10000"}
			e.Status.RebuildStatus = map[string]*lhv1beta2.RebuildStatus{"10.0.0.3:10000": {IsRebuilding: true, Progress: 40}}
			d.Engines[i] = e
		}},
		{"the progress moves", func() {
			i, e := engineOf("vol-2")
			e.Status.RebuildStatus = map[string]*lhv1beta2.RebuildStatus{"10.0.0.3:10000": {IsRebuilding: true, Progress: 80}}
			d.Engines[i] = e
		}},
		{"the failed replica removed", func() {
			d.Replicas = slices.Delete(d.Replicas, replicaOf("vol-2-r-1"), replicaOf("vol-2-r-1")+1)
		}},
		{"the robustness record rewritten with the volume unchanged", func() {
			d.Robustness = maps.Clone(d.Robustness)
			d.Robustness["vol-3"] = RobustnessMark{Robustness: lhv1beta2.VolumeRobustnessHealthy, Since: Since{Time: now.Add(-time.Minute), Exact: true}}
		}},
		{"the robustness record of a volume dropped (it is now a lower bound)", func() {
			d.Robustness = maps.Clone(d.Robustness)
			delete(d.Robustness, "vol-0")
			now = now.Add(time.Second)
		}},
		{"time passes with that volume unrecorded", func() { now = now.Add(time.Second) }},
		{"a replica of a volume the read does not list", func() {
			d.Replicas = append(d.Replicas, kubetest.Replica("vol-9-r-0", "vol-9", "node-a", "", healthyAt, lhv1beta2.InstanceStateRunning))
		}},
		{"that volume listed", func() {
			v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "vol-9"}}
			v.Status.Robustness = lhv1beta2.VolumeRobustnessHealthy
			d.Volumes = append(d.Volumes, v)
		}},
		{"a volume gone, its replicas still listed", func() {
			i, _ := volume("vol-1")
			d.Volumes = slices.Delete(d.Volumes, i, i+1)
		}},
		{"its replicas gone too", func() {
			d.Replicas = slices.DeleteFunc(d.Replicas, func(r *lhv1beta2.Replica) bool { return r.Spec.VolumeName == "vol-1" })
		}},
		{"a replica moved to another volume", func() {
			i := replicaOf("vol-3-r-0")
			r := d.Replicas[i].DeepCopy()
			r.Spec.VolumeName = "vol-9"
			d.Replicas[i] = r
		}},
		{"every volume gone", func() { d.Volumes = nil }},
		{"a volume back under an old name", func() {
			v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "vol-1"}}
			d.Volumes = append(d.Volumes, v)
		}},
		{"its robustness recorded", func() {
			d.Robustness = maps.Clone(d.Robustness)
			d.Robustness["vol-1"] = RobustnessMark{Since: Since{Time: now, Exact: true}}
		}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var cache VolumeStatusCache
	var held [][]VolumeStatus
	var heldCopies [][]VolumeStatus
	for _, step := range steps {
		step.change()
		// The lister's order, another each read.
		read := d
		read.Volumes, read.Replicas, read.Engines = slices.Clone(d.Volumes), slices.Clone(d.Replicas), slices.Clone(d.Engines)
		rng.Shuffle(len(read.Volumes), func(i, j int) { read.Volumes[i], read.Volumes[j] = read.Volumes[j], read.Volumes[i] })
		rng.Shuffle(len(read.Replicas), func(i, j int) { read.Replicas[i], read.Replicas[j] = read.Replicas[j], read.Replicas[i] })
		rng.Shuffle(len(read.Engines), func(i, j int) { read.Engines[i], read.Engines[j] = read.Engines[j], read.Engines[i] })
		got := cache.Statuses(read, now)
		want := new(VolumeStatusCache).Statuses(d, now)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the cache derived\n%+v\nwhere a fresh derivation gives\n%+v", step.name, got, want)
		}
		held = append(held, got)
		heldCopies = append(heldCopies, deepCopyStatuses(got))
	}
	for i := range held {
		if !reflect.DeepEqual(held[i], heldCopies[i]) {
			t.Fatalf("the statuses of %q were written by a later read:\nnow %+v\nwere %+v", steps[i].name, held[i], heldCopies[i])
		}
	}
	// The checks above pass as well for a cache that keeps nothing: the
	// read of an unchanged site must give the very statuses of the last.
	again := cache.Statuses(d, now)
	if len(again) == 0 || &again[0] != &held[len(held)-1][0] {
		t.Fatal("a read with nothing changed derived the volumes again")
	}
}

const healthyAt = "2026-11-26T00:00:00Z"

func deepCopyStatuses(in []VolumeStatus) []VolumeStatus {
	out := slices.Clone(in)
	for i := range out {
		out[i].Replicas = slices.Clone(out[i].Replicas)
	}
	return out
}

// A read with the version of the last (Data.LonghornVersion) has its
// volumes without a walk; a read with another version, or with none (0:
// not read from a snapshot), is derived; so is every read while a
// status depends on the time of the read.
func TestVolumeStatusCacheKeepsAVersionsStatuses(t *testing.T) {
	now := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "vol-0"}}
	v.Status.Robustness = lhv1beta2.VolumeRobustnessHealthy
	marked := map[string]RobustnessMark{"vol-0": {Robustness: v.Status.Robustness, Since: Since{Time: now, Exact: true}}}
	d := Data{Volumes: []*lhv1beta2.Volume{v}, Robustness: marked, LonghornVersion: 7}
	var c VolumeStatusCache
	first := c.Statuses(d, now)
	// The same version with other lists: the snapshot never gives that
	// (an unsynced read, which lists nothing, carries no version, and the
	// sync counts as a change), so the statuses kept show the shortcut
	// was taken.
	other := d
	other.Volumes = nil
	if got := c.Statuses(other, now); !reflect.DeepEqual(got, first) {
		t.Fatalf("a read of the same version was derived again: %+v", got)
	}
	other.LonghornVersion = 8
	if got := c.Statuses(other, now); len(got) != 0 {
		t.Fatalf("a read of a new version kept the last statuses: %+v", got)
	}
	unversioned := d
	unversioned.LonghornVersion = 0
	c.Statuses(unversioned, now)
	unversioned.Volumes = nil
	if got := c.Statuses(unversioned, now); len(got) != 0 {
		t.Fatalf("a read of no version kept the last statuses: %+v", got)
	}
	// Unrecorded robustness: the since is the time of the read.
	unrecorded := Data{Volumes: []*lhv1beta2.Volume{v}, LonghornVersion: 9}
	c.Statuses(unrecorded, now)
	later := now.Add(time.Minute)
	if got := c.Statuses(unrecorded, later); len(got) != 1 || !got[0].Since.Equal(later) {
		t.Fatalf("a status that depends on the time of the read was kept: %+v", got)
	}
}
