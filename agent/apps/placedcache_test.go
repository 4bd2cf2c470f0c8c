package apps

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sitecon/sitecon/kube"
)

// The placement waits for the cache of what it laid out, and the cache's
// events wake it. A kind whose first list comes last and holds nothing
// raises no event at all: unless the cache says it has synced, the
// placement sleeps until some unrelated change (after a restart, an agent
// holding back from a conflict said nothing of it until then). The list's
// delay is the corner a real server gives only now and then, hence the
// fake.
func TestPlacedCacheWakesThePlacementOnceSynced(t *testing.T) {
	listKinds := map[schema.GroupVersionResource]string{}
	for _, gvr := range []schema.GroupVersionResource{GVRDeployment, GVRPVC, GVRVMIRS, GVRVMI, GVRNAD, GVRStorageClass} {
		listKinds[gvr] = gvr.Resource + "List"
	}
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	dep.SetNamespace(kube.AppNamespace)
	dep.SetName("web")
	dep.SetLabels(map[string]string{LabelManagedBy: FieldManager})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, dep)
	release := make(chan struct{})
	// The attachments' list answers last: refused (the reflector tries
	// again) until released. A reactor must not block: the fake holds
	// one lock over every call.
	dyn.PrependReactor("list", GVRNAD.Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case <-release:
			return false, nil, nil
		default:
			return true, nil, errors.New("not yet")
		}
	})

	var cache *placedCache
	var wokenSynced atomic.Bool
	woken := make(chan struct{}, 100)
	cache = newPlacedCache(dyn, true, true, func() {
		if cache != nil && cache.synced() {
			wokenSynced.Store(true)
		}
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache.start(ctx)
	select {
	case <-woken: // the Deployment's add
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the Deployment within 10s")
	}
	if cache.synced() {
		t.Fatal("synced before the attachments' list answered")
	}
	close(release)
	deadline := time.After(10 * time.Second)
	for !wokenSynced.Load() {
		select {
		case <-woken:
		case <-deadline:
			t.Fatalf("the placement was not woken once the cache synced (synced now: %v)", cache.synced())
		}
	}
}
