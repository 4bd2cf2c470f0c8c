package kube

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube/kubetest"
)

// The rows a PodRowCache and an EventRowCache keep across reads are the
// rows made afresh, read after read, as pods and events are updated (a new
// object in place of the old), added and deleted, and the cache lists them
// in another order each time.
func TestRowCachesFollowChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pod := func(i, restarts int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: append(slices.Clone(Namespaces), "default")[i%(len(Namespaces)+1)], Name: fmt.Sprintf("pod-%03d", i)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Ready: restarts%2 == 0, RestartCount: int32(restarts)}}},
		}
	}
	event := func(i, count int) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: AppNamespace, Name: fmt.Sprintf("ev-%03d", i)},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: fmt.Sprintf("pod-%03d", i%7)},
			Count:          int32(count), LastTimestamp: metav1.NewTime(kubetest.T0.Add(time.Duration(i%13+count) * time.Second)),
		}
	}
	pods, events := map[int]*corev1.Pod{}, map[int]*corev1.Event{}
	for i := range 60 {
		pods[i], events[i] = pod(i, 0), event(i, 1)
	}
	var podRows PodRowCache
	var eventRows EventRowCache
	for read := range 40 {
		// A few changes since the last read: updates, additions, deletions.
		for range rng.IntN(4) {
			i := rng.IntN(80)
			switch rng.IntN(3) {
			case 0:
				delete(pods, i)
				delete(events, i)
			default:
				pods[i], events[i] = pod(i, read), event(i, read+1)
			}
		}
		podList, eventList := mapValues(rng, pods), mapValues(rng, events)
		if got, want := podRows.Rows(podList), PodRows(podList); !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d: pod rows kept\n%v\nmade afresh\n%v", read, got, want)
		}
		if got, want := eventRows.Rows(eventList, 25), EventRows(eventList, 25); !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d: event rows kept\n%v\nmade afresh\n%v", read, got, want)
		}
	}
}

// mapValues lists m's values in a random order, as an informer's cache does.
func mapValues[T any](rng *rand.Rand, m map[int]*T) []*T {
	var out []*T
	for _, v := range m {
		out = append(out, v)
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
