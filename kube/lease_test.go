package kube

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube/kubetest"
)

func lease(holder string, renew time.Time, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: AppNamespace, Name: StatsLeaderLeaseName, ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(seconds),
			AcquireTime: &metav1.MicroTime{Time: kubetest.T0}, RenewTime: &metav1.MicroTime{Time: renew}, LeaseTransitions: ptr.To[int32](1)},
	}
}

// A renewal is not a change the console shows; a new holder, new terms or
// a transition are.
func TestLeaseRenewalOnly(t *testing.T) {
	old := lease("node-a", kubetest.T0, 15)
	renewed := lease("node-a", kubetest.T0.Add(5*time.Second), 15)
	renewed.ResourceVersion = "2"
	if !LeaseRenewalOnly(old, renewed) {
		t.Error("a renewal (renew time and resource version) should not count as a change")
	}
	for name, changed := range map[string]func(*coordinationv1.Lease){
		"holder":      func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("node-b") },
		"duration":    func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](30) },
		"transitions": func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](2) },
		"acquired": func(l *coordinationv1.Lease) {
			l.Spec.AcquireTime = &metav1.MicroTime{Time: kubetest.T0.Add(time.Minute)}
		},
		"released": func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil },
	} {
		l := lease("node-a", kubetest.T0.Add(5*time.Second), 15)
		changed(l)
		if LeaseRenewalOnly(old, l) {
			t.Errorf("%s changed: that is a change", name)
		}
	}
}

func TestNextLeaseExpiry(t *testing.T) {
	d := Data{Leases: []*coordinationv1.Lease{lease("node-a", kubetest.T0, 15)}}
	if got := NextLeaseExpiry(d, kubetest.T0.Add(time.Second)); !got.Equal(kubetest.T0.Add(15 * time.Second)) {
		t.Errorf("expiry %v, want renew + 15s", got)
	}
	if got := NextLeaseExpiry(d, kubetest.T0.Add(time.Minute)); !got.IsZero() {
		t.Errorf("an expired lease has no next expiry: %v", got)
	}
}
