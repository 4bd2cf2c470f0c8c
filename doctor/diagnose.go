package doctor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// Options say where the doctor looks.
type Options struct {
	// Config is the cluster's; nil when it could not be loaded, and
	// ConfigProblem says why.
	Config        *rest.Config
	ConfigProblem string
	// APIWait bounds reading the cluster (the snapshot's first sync and the
	// readiness question); the checks then have their own deadlines.
	APIWait    time.Duration
	K3sDataDir string
	// AgentConfigErrors asks this node's agent; nil: no agent to ask.
	AgentConfigErrors func(context.Context) (map[string]string, error)
	// NodeReports asks every node's agent directly (nil: no cluster
	// config here); the clocks' check reads them.
	NodeReports func(context.Context) nodestate.NodeReports
	// StatusScan asks the cluster prefix's hosts for /status (nil: no
	// cluster config here); Dial opens the network checks' connections
	// (nil: a plain dialer).
	StatusScan func(ctx context.Context, dial DialFunc) StatusScan
	Dial       DialFunc
	// LocalNode is this machine's node from its cluster config (nil:
	// none here); ClusterPorts the ports peers dial at a node's cluster
	// address.
	LocalNode    func() (LocalNode, error)
	ClusterPorts []ClusterPort
	// AuditLog is this machine's audit log, whose chain is checked.
	AuditLog string
	Log      *slog.Logger
	// Checks replaces the full list (tests); nil: Checks().
	Checks []Check
}

// Diagnose reads the cluster once (one snapshot, Events left out: no check
// reads them) and runs the checks. It only reads: LIST, WATCH and GET.
// The API server counts as read only when it synced within opts.APIWait
// and says it is ready: a server whose etcd lost quorum still answers
// from its watch cache, and those answers may be old.
func Diagnose(ctx context.Context, opts Options) Report {
	env := &Env{K3sDataDir: opts.K3sDataDir, AgentConfigErrors: opts.AgentConfigErrors, NodeReports: opts.NodeReports,
		StatusScan: opts.StatusScan, Dial: opts.Dial, LocalNode: opts.LocalNode, ClusterPorts: opts.ClusterPorts, AuditLog: opts.AuditLog}
	// Several checks read the reports: Run asks the nodes once for all.
	checks := opts.Checks
	if checks == nil {
		checks = Checks()
	}
	if opts.Config == nil {
		env.APIProblem = opts.ConfigProblem
		if env.APIProblem == "" {
			env.APIProblem = "no cluster config"
		}
		env.Now = time.Now()
		return Run(ctx, checks, env)
	}
	snapCtx, stopSnap := context.WithCancel(ctx)
	defer stopSnap()
	snap, err := kube.NewSnapshot(opts.Config, opts.Log, kube.WithoutEvents())
	if err != nil {
		env.APIProblem = err.Error()
		env.Now = time.Now()
		return Run(ctx, checks, env)
	}
	waitCtx, cancel := context.WithTimeout(ctx, opts.APIWait)
	defer cancel()
	snap.Start(snapCtx)
	if err := snap.WaitForSync(waitCtx); err != nil {
		env.APIProblem = err.Error()
		env.APIStillReading = errors.As(err, new(kube.StillReadingError))
	} else if err := apiReady(waitCtx, snap.Clients()); err != nil {
		env.APIProblem = err.Error()
	}
	env.Now = time.Now()
	if env.APIProblem == "" {
		env.Data, env.Clients = snap.Data(), snap.Clients()
	}
	return Run(ctx, checks, env)
}

// apiReady asks the API server's /readyz and names the checks that fail.
func apiReady(ctx context.Context, c *kube.Clients) error {
	body, err := c.Core.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err == nil {
		return nil
	}
	var failed []string
	for _, line := range strings.Split(string(body)+"\n"+err.Error(), "\n") {
		if _, check, ok := strings.Cut(line, "[-]"); ok {
			failed = append(failed, check)
		}
	}
	if len(failed) == 0 {
		return fmt.Errorf("the API server at %s does not say it is ready: %w", c.Config.Host, err)
	}
	msg := fmt.Sprintf("the API server at %s answers but is not ready: %s", c.Config.Host, strings.Join(failed, "; "))
	for _, f := range failed {
		if strings.HasPrefix(f, "etcd") {
			msg += " (its etcd has no quorum or does not answer: what it serves may be old)"
			break
		}
	}
	return fmt.Errorf("%s", msg)
}
