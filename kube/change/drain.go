package change

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// DrainOptions tune a drain.
type DrainOptions struct {
	// GracePeriod for each pod; negative: the pod's own.
	GracePeriod time.Duration
	// Timeout bounds the whole drain (0: none).
	Timeout            time.Duration
	DeleteEmptyDirData bool
	// Progress receives one line per pod step (evicting, evicted, waiting
	// on a disruption budget, failed), one call at a time, though from
	// the evictions' goroutines.
	Progress func(DrainStep)
	// Purpose and LocalNode are what CheckDrain judges for (DrainCheck).
	Purpose   safety.Purpose
	LocalNode string
}

// DrainStep is one step of a drain, for progress display.
type DrainStep struct {
	Pod     string `json:"pod,omitempty"`
	Phase   string `json:"phase"` // evicting, evicted, waiting, failed
	Message string `json:"message,omitempty"`
}

func (o DrainOptions) helper(ctx context.Context, cs kubernetes.Interface) *drain.Helper {
	// kubectl's drain helper evicts each pod in a goroutine of its own and
	// tells of it from there: the steps are handed on one at a time, so
	// that whoever counts or prints them needs no lock of its own.
	var mu sync.Mutex
	progress := func(s DrainStep) {
		if o.Progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		o.Progress(s)
	}
	grace := -1
	if o.GracePeriod >= 0 {
		grace = int(o.GracePeriod / time.Second)
	}
	return &drain.Helper{
		Ctx: ctx, Client: cs, GracePeriodSeconds: grace, Timeout: o.Timeout,
		IgnoreAllDaemonSets: true, DeleteEmptyDirData: o.DeleteEmptyDirData,
		EvictErrorRetryDelay: 2 * time.Second,
		Out:                  io.Discard,
		// kubectl reports a budget that blocks an eviction only as text.
		ErrOut: lineWriter(func(line string) { progress(DrainStep{Phase: "waiting", Message: line}) }),
		OnPodDeletionOrEvictionStarted: func(pod *corev1.Pod, _ bool) {
			progress(DrainStep{Pod: pod.Namespace + "/" + pod.Name, Phase: "evicting"})
		},
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, _ bool, err error) {
			step := DrainStep{Pod: pod.Namespace + "/" + pod.Name, Phase: "evicted"}
			if err != nil {
				step.Phase, step.Message = "failed", err.Error()
			}
			progress(step)
		},
	}
}

// PlanChangedError is a drain stopped before it began: between the
// preflight that was confirmed and the drain, the cluster changed so that
// the drain would not be the one confirmed. Nothing was changed.
type PlanChangedError struct {
	Node    string
	Reasons []string
}

func (e *PlanChangedError) Error() string {
	return fmt.Sprintf("the cluster changed since the preflight of %s was confirmed: %s", e.Node, strings.Join(e.Reasons, "; "))
}

// DrainAsConfirmed drains confirmed.Node only if a preflight taken now, from
// the API server itself rather than a watch cache, still agrees with the one
// the user confirmed (safety.Reconfirm); otherwise it returns a *PlanChangedError
// and changes nothing. A confirmation can sit on screen for minutes while a
// replica elsewhere fails or another server drops out.
//
// While the pods are evicted (minutes, behind disruption budgets), the
// volumes whose data is on the node are watched: if one loses an
// up-to-date copy elsewhere or turns faulted, the evictions stop, the node
// stays cordoned, and a *DrainStoppedError says why.
func DrainAsConfirmed(ctx context.Context, clients *kube.Clients, d kube.Data, confirmed safety.Preflight, opts DrainOptions) error {
	opts.Purpose, opts.LocalNode = confirmed.Purpose, confirmed.LocalNode
	fresh, err := freshDrainData(ctx, clients, d)
	if err != nil {
		return fmt.Errorf("re-checking %s before the drain: %w; nothing was changed", confirmed.Node, err)
	}
	now, err := CheckDrain(ctx, clients, fresh, confirmed.Node, opts)
	if err != nil {
		return fmt.Errorf("re-checking %s before the drain: %w; nothing was changed", confirmed.Node, err)
	}
	if reasons := safety.Reconfirm(confirmed, now); len(reasons) > 0 {
		return &PlanChangedError{Node: confirmed.Node, Reasons: reasons}
	}
	if !fresh.HasLonghorn {
		return Drain(ctx, clients.Core, confirmed.Node, opts)
	}
	drainCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	watching, err := watchCopies(drainCtx, clients, confirmed.Node, fresh, func(reasons []string) {
		stop(&DrainStoppedError{Node: confirmed.Node, Reasons: reasons})
	})
	if err != nil {
		return fmt.Errorf("watching %s's volumes for the drain: %w; nothing was changed", confirmed.Node, err)
	}
	defer watching()
	err = Drain(drainCtx, clients.Core, confirmed.Node, opts)
	if stopped := (*DrainStoppedError)(nil); errors.As(context.Cause(drainCtx), &stopped) {
		return stopped
	}
	return err
}

// Drain cordons the node and evicts its pods through kubectl's drain
// library: PodDisruptionBudgets are respected (an eviction they block is
// retried until Timeout), DaemonSet pods are left. Cancel ctx to stop.
func Drain(ctx context.Context, cs kubernetes.Interface, node string, opts DrainOptions) error {
	h := opts.helper(ctx, cs)
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !kube.NodeIsReady(n) {
		// A lost node's kubelet never confirms a pod gone: once evicted
		// (its replacement scheduled elsewhere), a pod is not waited for,
		// as kubectl drain --skip-wait-for-delete-timeout does. Without
		// this, removing a dead device hangs until the timeout. The skip
		// counts from the end of the pod's grace period, which no kubelet
		// is there to honour: unless one was asked for, it is 1 s.
		h.SkipWaitForDeleteTimeoutSeconds = 1
		if opts.GracePeriod < 0 {
			h.GracePeriodSeconds = 1
		}
	}
	if err := drain.RunCordonOrUncordon(h, n, true); err != nil {
		return fmt.Errorf("cordon %s: %w", node, err)
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return fmt.Errorf("drain %s: %w", node, errors.Join(errs...))
	}
	return h.DeleteOrEvictPods(list.Pods())
}

type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			w(line)
		}
	}
	return len(p), nil
}
