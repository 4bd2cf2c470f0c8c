package apps

import (
	"strings"
	"testing"
	"time"
)

// When may a node write its layout of an app over the live object? Two
// nodes whose configs disagree (another designated node, other content,
// same version or none) must not overwrite each other on every change:
// the one that finds the other's fresh layout holds, reports, and writes
// only once the layout has stood for the window, or with a newer version.
// "Fresh" is counted on the deciding node's own clock from when it first
// saw the layout, never from the other node's wall clock.
func TestDecideLayoutWrite(t *testing.T) {
	const nodeC = "33333333-3333-4333-8333-333333333333"
	const window = 5 * time.Minute
	seen := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	// laid is app (with version and designated node dnid) laid out by node
	// (UUID layer, name name), stamped as the agent stamps it when it
	// applies; at is the laying node's clock.
	laid := func(version uint64, dnid, image, layer, name string, at time.Time) Layout {
		app := testApp()
		app.Version, app.DesignatedNodeID, app.Image, app.VolumeRefs = version, dnid, image, nil
		l, err := LayoutApp(app, layer, name, nil, PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		StampLayout(l.Object, name, at)
		return l
	}
	const img1, img2 = "registry.local/plc-gateway:1.4", "registry.local/plc-gateway:1.5"
	unstamped := laid(0, nodeB, img1, nodeB, "node-b", seen)
	ann := unstamped.Object.GetAnnotations()
	delete(ann, AnnotationConfigHash)
	delete(ann, AnnotationLaidOutBy)
	delete(ann, AnnotationLaidOutAt)
	unstamped.Object.SetAnnotations(ann)
	unstampedSameDNId := laid(0, nodeA, img1, nodeB, "node-b", seen)
	ann = unstampedSameDNId.Object.GetAnnotations()
	delete(ann, AnnotationConfigHash)
	unstampedSameDNId.Object.SetAnnotations(ann)

	for name, tc := range map[string]struct {
		live     *Layout
		want     Layout
		now      time.Time
		hold     string // a part of the reason; empty: write
		conflict bool
	}{
		"nothing live": {want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen},
		"its own layout, from its own earlier config": {live: ptrTo(laid(0, nodeB, img1, nodeA, "node-a", seen)),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second)},
		"another node's fresh layout, another designated node, unversioned": {live: ptrTo(laid(0, nodeB, img1, nodeB, "node-b", seen)),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second), hold: "node-b", conflict: true},
		"the same, the layout has stood for the window": {live: ptrTo(laid(0, nodeB, img1, nodeB, "node-b", seen)),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(window)},
		"the same, one version each": {live: ptrTo(laid(4, nodeB, img1, nodeB, "node-b", seen)),
			want: laid(4, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(window - time.Second), hold: "version 4", conflict: true},
		"a newer version writes at once": {live: ptrTo(laid(4, nodeB, img1, nodeB, "node-b", seen)),
			want: laid(5, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second)},
		"an older version holds until it catches up, window or not": {live: ptrTo(laid(5, nodeB, img1, nodeB, "node-b", seen)),
			want: laid(4, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Hour), hold: "waiting for the newer config"},
		"unversioned under a versioned layout holds": {live: ptrTo(laid(1, nodeB, img1, nodeB, "node-b", seen)),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Hour), hold: "waiting for the newer config"},
		// An on-site move: both nodes hold one config and read one override,
		// so the layout by the other node is not a disagreement.
		"the same config, moved by an override": {live: ptrTo(laid(3, nodeA, img1, nodeA, "node-a", seen)),
			want: laid(3, nodeA, img1, nodeB, "node-b", seen), now: seen.Add(time.Second)},
		"the same config, the override cleared": {live: ptrTo(laid(3, nodeA, img1, nodeB, "node-b", seen)),
			want: laid(3, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second)},
		// One version number, one designated node, other content: the
		// configs still disagree.
		"equal versions, other content": {live: ptrTo(laid(3, nodeA, img1, nodeB, "node-b", seen)),
			want: laid(3, nodeA, img2, nodeA, "node-a", seen), now: seen.Add(time.Second), hold: "node-b", conflict: true},
		"unversioned, other content": {live: ptrTo(laid(0, nodeA, img1, nodeB, "node-b", seen)),
			want: laid(0, nodeA, img2, nodeA, "node-a", seen), now: seen.Add(time.Second), hold: "node-b", conflict: true},
		// Layouts from before the config hash: the designated node in
		// them still tells a disagreement.
		"a layout without stamps, another designated node": {live: &unstamped,
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second), hold: "conflict", conflict: true},
		"a layout without a config hash, the same designated node": {live: &unstampedSameDNId,
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second)},
		// The other node's clock says nothing here: a layout stamped an
		// hour back by a slow clock is as fresh as when this node saw it,
		// one stamped in the future stands only for the window.
		"the other node's clock an hour behind": {live: ptrTo(laid(0, nodeB, img1, nodeB, "node-b", seen.Add(-time.Hour))),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second), hold: "node-b", conflict: true},
		"the other node's clock an hour ahead": {live: ptrTo(laid(0, nodeB, img1, nodeB, "node-b", seen.Add(time.Hour))),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(window + time.Second)},
		"a third node's fresh layout": {live: ptrTo(laid(0, nodeC, img1, nodeC, "node-c", seen)),
			want: laid(0, nodeA, img1, nodeA, "node-a", seen), now: seen.Add(time.Second), hold: "node-c", conflict: true},
	} {
		t.Run(name, func(t *testing.T) {
			// A nil *Unstructured is not a nil metav1.Object.
			got := DecideLayoutWrite(nil, tc.want.Object, seen, tc.now, window)
			if tc.live != nil {
				got = DecideLayoutWrite(tc.live.Object, tc.want.Object, seen, tc.now, window)
			}
			if (got.Hold == "") != (tc.hold == "") || !strings.Contains(got.Hold, tc.hold) || got.Conflict != tc.conflict {
				t.Fatalf("DecideLayoutWrite = %+v, want hold %q conflict %v", got, tc.hold, tc.conflict)
			}
			// This node's config wins the tie (held for the window) or
			// loses it (held for good); TestDecideLayoutWriteTieHasOneWinner
			// says which.
			if tc.conflict && !got.Until.Equal(seen.Add(window)) && !(got.Until.IsZero() && strings.Contains(got.Hold, "wins the tie")) {
				t.Fatalf("a conflict holds until %s, want the window after it was seen (%s), or for good", got.Until, seen.Add(window))
			}
			if !tc.conflict && !got.Until.IsZero() {
				t.Fatalf("only a conflict lapses: until %s", got.Until)
			}
		})
	}
}

// The layout carries the config it came from: its version, designated
// node and hash; the hash follows the config's content and not where an
// override puts the app.
func TestLayoutCarriesItsConfig(t *testing.T) {
	app := testApp()
	app.VolumeRefs = nil
	onA, err := LayoutApp(app, nodeA, "node-a", nil, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	movedToB, _ := LayoutApp(app, nodeB, "node-b", nil, PlacementOptions{})
	other := app
	other.Image = "registry.local/plc-gateway:1.5"
	otherOnA, _ := LayoutApp(other, nodeA, "node-a", nil, PlacementOptions{})
	hash := func(l Layout) string { return l.Object.GetAnnotations()[AnnotationConfigHash] }
	if hash(onA) == "" || hash(onA) != hash(movedToB) || hash(onA) == hash(otherOnA) {
		t.Fatalf("config hashes: on A %q, moved to B %q, other content %q", hash(onA), hash(movedToB), hash(otherOnA))
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	StampLayout(onA.Object, "node-a", at)
	ann := onA.Object.GetAnnotations()
	if ann[AnnotationLaidOutBy] != "node-a" || ann[AnnotationLaidOutAt] != "2025-03-01T12:00:00Z" || onA.Hash() != freshLayoutHash(t, app) {
		t.Fatalf("stamps: %v", ann)
	}
}

// freshLayoutHash is the spec hash of app laid out on node-a afresh: the
// laid-out-by and laid-out-at stamps are not part of it, or every write
// would differ from the last and an unchanged app be written again.
func freshLayoutHash(t *testing.T, app AppConfig) string {
	l, err := LayoutApp(app, nodeA, "node-a", nil, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Hash()
}

func ptrTo[T any](v T) *T { return &v }

// A volume's claim is laid out by its designated node alone; two nodes
// whose volume configs name different designated nodes would overwrite
// each other's claim on every change as two app layouts would.
func TestDecideLayoutWriteVolumes(t *testing.T) {
	const window = 5 * time.Minute
	seen := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	claim := func(dnid string, replicas int) Layout {
		l, err := LayoutVolume(VolumeConfig{UUID: volID, Name: "plc-data", DesignatedNodeID: dnid, Size: "1Gi", ReplicaCount: replicas})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	byB, byA := claim(nodeB, 3), claim(nodeA, 3)
	if got := DecideLayoutWrite(byB.Object, byA.Object, seen, seen.Add(time.Second), window); !got.Conflict {
		t.Fatalf("another designated node's fresh claim: %+v, want a conflict", got)
	}
	if got := DecideLayoutWrite(byB.Object, claim(nodeB, 2).Object, seen, seen.Add(time.Second), window); got.Hold != "" {
		t.Fatalf("this node's own claim, its config changed: %+v, want a write", got)
	}
	if got := DecideLayoutWrite(byB.Object, byA.Object, seen, seen.Add(window), window); got.Hold != "" {
		t.Fatalf("after the window: %+v, want a write", got)
	}
}

// Two configs of one version that disagree: one of them wins, the same on
// every node, from the configs alone (the one whose designated node UUID
// sorts first, then whose config hash does). The winner writes over the
// loser's layout once it has stood for the window; the loser never writes
// over the winner's, however long it stands: one takeover at most, not one
// per window for ever.
func TestDecideLayoutWriteTieHasOneWinner(t *testing.T) {
	const window = 5 * time.Minute
	seen := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	laid := func(version uint64, dnid, image, layer, name string) Layout {
		app := testApp()
		app.Version, app.DesignatedNodeID, app.Image, app.VolumeRefs = version, dnid, image, nil
		l, err := LayoutApp(app, layer, name, nil, PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		StampLayout(l.Object, name, seen)
		return l
	}
	// Other content, one designated node: the hashes decide. first's
	// config hash sorts before second's.
	first, second := "registry.local/plc-gateway:1.4", "registry.local/plc-gateway:1.5"
	hash := func(image string) string {
		return laid(4, nodeA, image, nodeA, "node-a").Object.GetAnnotations()[AnnotationConfigHash]
	}
	if hash(first) > hash(second) {
		first, second = second, first
	}
	for name, tc := range map[string]struct {
		live, want Layout
		wins       bool
	}{
		// nodeA's UUID sorts before nodeB's.
		"unversioned, this node's config names the node that sorts first": {live: laid(0, nodeB, first, nodeB, "node-b"), want: laid(0, nodeA, first, nodeA, "node-a"), wins: true},
		"unversioned, the other's names the node that sorts first":        {live: laid(0, nodeA, first, nodeA, "node-a"), want: laid(0, nodeB, first, nodeB, "node-b")},
		"one version, this node's config names the node that sorts first": {live: laid(4, nodeB, first, nodeB, "node-b"), want: laid(4, nodeA, first, nodeA, "node-a"), wins: true},
		"one version, one designated node, this node's hash sorts first":  {live: laid(4, nodeA, second, nodeB, "node-b"), want: laid(4, nodeA, first, nodeA, "node-a"), wins: true},
		"one version, one designated node, the other's hash sorts first":  {live: laid(4, nodeA, first, nodeB, "node-b"), want: laid(4, nodeA, second, nodeA, "node-a")},
	} {
		t.Run(name, func(t *testing.T) {
			fresh := DecideLayoutWrite(tc.live.Object, tc.want.Object, seen, seen.Add(time.Second), window)
			if !fresh.Conflict || fresh.Hold == "" {
				t.Fatalf("a fresh layout from a disagreeing config: %+v, want a conflict hold", fresh)
			}
			for _, later := range []time.Duration{window, time.Hour, 24 * time.Hour} {
				got := DecideLayoutWrite(tc.live.Object, tc.want.Object, seen, seen.Add(later), window)
				if tc.wins && got.Hold != "" {
					t.Fatalf("after %s this node's config wins the tie but holds: %+v", later, got)
				}
				if !tc.wins && (got.Hold == "" || !got.Conflict || !got.Until.IsZero() || !strings.Contains(got.Hold, "wins the tie")) {
					t.Fatalf("after %s this node's config loses the tie: %+v, want a conflict held for good that says the other config wins", later, got)
				}
			}
			// The other node judges the same pair the other way round.
			other := DecideLayoutWrite(tc.want.Object, tc.live.Object, seen, seen.Add(time.Hour), window)
			if tc.wins && other.Hold == "" {
				t.Fatalf("both nodes' configs win: the other node writes too (%+v)", other)
			}
			if !tc.wins && other.Hold != "" {
				t.Fatalf("neither node's config wins: the other node holds too (%+v)", other)
			}
		})
	}
}
