package cmd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// An API server that answered, while the cluster was still being read
// when the time ran out, is told apart from one that did not answer: the
// error says what was still being read and how to wait longer, and does
// not send the technician to check k3s or etcd's quorum.
func TestAPIUnreadableWhileStillReading(t *testing.T) {
	err := apiUnreadable("https://10.0.0.1:6443", 5*time.Second, "--timeout",
		kube.StillReadingError{Host: "https://10.0.0.1:6443", Kinds: []string{"Longhorn replicas", "pods"}})
	if code := exitCode(nil, err); code != statusUnreadable {
		t.Errorf("exit status %d, want %d", code, statusUnreadable)
	}
	msg := err.Error()
	for _, want := range []string{"answered", "after 5s Longhorn replicas, pods were still being read", "--timeout 30s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	for _, wrong := range []string{"did not answer", "is k3s running", "quorum"} {
		if strings.Contains(msg, wrong) {
			t.Errorf("the error says %q of an API server that answered:\n%s", wrong, msg)
		}
	}

	// Before discovery no kind is known: the cluster is what was being read.
	early := apiUnreadable("https://10.0.0.1:6443", time.Millisecond, "--timeout", kube.StillReadingError{Host: "https://10.0.0.1:6443"})
	if want := "answered, but after 1ms the cluster was still being read"; !strings.Contains(early.Error(), want) {
		t.Errorf("with no kind known, the error does not say %q:\n%s", want, early)
	}

	// One that did not answer keeps its own words and check.
	down := apiUnreadable("https://10.0.0.1:6443", 5*time.Second, "--timeout", errors.New("no answer from the API server at https://10.0.0.1:6443 in time: context deadline exceeded"))
	if !strings.Contains(down.Error(), "did not answer within 5s") {
		t.Errorf("an API server that did not answer: %v", down)
	}
}
