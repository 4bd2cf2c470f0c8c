package nodestate

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/transport"

	"github.com/sitecon/sitecon/kube"
)

// EtcdAccess is how an agent reaches its node's etcd member: k3s's own
// endpoint and client certificates, or (in tests) a plain http endpoint.
type EtcdAccess struct {
	// Endpoint is the local member's client URL (k3s: https://127.0.0.1:2379).
	Endpoint string
	// CertFile, KeyFile and CAFile are the client certificate, its key and
	// the server CA; unused for an http endpoint.
	CertFile, KeyFile, CAFile string
}

// K3sEtcdAccess is how a k3s server's own components reach its embedded
// etcd: files under <data dir>/server/tls/etcd/.
func K3sEtcdAccess(k3sDataDir string) EtcdAccess {
	dir := filepath.Join(k3sDataDir, "server", "tls", "etcd")
	return EtcdAccess{
		Endpoint: "https://127.0.0.1:2379",
		CertFile: filepath.Join(dir, "client.crt"),
		KeyFile:  filepath.Join(dir, "client.key"),
		CAFile:   filepath.Join(dir, "server-ca.crt"),
	}
}

// ErrNoEtcdCredentials: the client certificate files are not there; on a
// k3s agent (worker) node they never are, on a server not before k3s
// started.
var ErrNoEtcdCredentials = errors.New("no etcd client certificate")

func (a EtcdAccess) tls() (*tls.Config, error) {
	u, err := url.Parse(a.Endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("etcd endpoint %q is not a URL", a.Endpoint)
	}
	if u.Scheme == "http" {
		return nil, nil
	}
	for _, f := range []string{a.CertFile, a.KeyFile, a.CAFile} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoEtcdCredentials, err)
		}
	}
	cfg, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{
		CertFile: a.CertFile, KeyFile: a.KeyFile, CAFile: a.CAFile}})
	if err != nil {
		return nil, fmt.Errorf("etcd client certificate: %w", err)
	}
	return cfg, nil
}

// ObserveEtcd reads etcd's member list through the local endpoint and asks
// each voting or learning member's own client URL for its status, so a
// member that is listed but does not answer (its device lost, or its etcd
// wedged) is seen unhealthy. It changes nothing.
func ObserveEtcd(ctx context.Context, access EtcdAccess, observer string, now func() time.Time) (EtcdView, error) {
	tlsCfg, err := access.tls()
	if err != nil {
		return EtcdView{}, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{access.Endpoint},
		TLS:         tlsCfg,
		DialTimeout: 5 * time.Second,
		// The etcd client logs through zap; the agent says what matters.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return EtcdView{}, fmt.Errorf("etcd client for %s: %w", access.Endpoint, err)
	}
	defer client.Close()
	listCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Serializable: the local member answers from what it knows even
	// without a leader, and a list is wanted most exactly then (etcd's
	// client asks for a linearizable list unless told, which a member
	// without quorum never answers).
	list, err := client.MemberList(listCtx, clientv3.WithSerializable())
	if err != nil {
		return EtcdView{}, fmt.Errorf("etcd member list from %s: %w", access.Endpoint, err)
	}
	view := EtcdView{ObservedBy: observer, ObservedAt: now().UTC(), Endpoint: access.Endpoint}
	for _, m := range list.Members {
		st := EtcdMemberStatus{ID: strconv.FormatUint(m.ID, 16), Name: m.Name,
			PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner}
		if st.Name == "" {
			// Added but never started: listed, no name, no client URL.
			st.Error = "added but not started"
		}
		view.Members = append(view.Members, st)
	}
	// Each member's status from its own client URL, one at a time: a
	// handful of members, each call bounded.
	for i, st := range view.Members {
		if st.Error != "" {
			continue
		}
		view.Members[i] = memberStatus(ctx, client, st)
	}
	slices.SortFunc(view.Members, func(a, b EtcdMemberStatus) int { return strings.Compare(a.Name, b.Name) })
	return view, nil
}

// memberStatusTimeout bounds one member's status call: a member that
// answers at all answers in milliseconds.
const memberStatusTimeout = 3 * time.Second

// memberStatus asks one member for its status: healthy when it answers,
// reports no errors (an alarm) and knows a leader.
func memberStatus(ctx context.Context, client *clientv3.Client, st EtcdMemberStatus) EtcdMemberStatus {
	var errs []string
	for _, endpoint := range st.ClientURLs {
		sctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
		resp, err := client.Status(sctx, endpoint)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			errs = append(errs, fmt.Sprintf("no answer from %s within %s", endpoint, memberStatusTimeout))
			continue
		case err != nil:
			errs = append(errs, err.Error())
			continue
		}
		switch {
		case len(resp.Errors) > 0:
			errs = append(errs, strings.Join(resp.Errors, "; "))
		case resp.Leader == 0:
			errs = append(errs, "no leader")
		default:
			st.Healthy, st.Error = true, ""
			st.Leader = resp.Leader == resp.Header.MemberId
			return st
		}
	}
	if len(st.ClientURLs) == 0 {
		errs = append(errs, "no client URL")
	}
	st.Error = strings.Join(errs, "; ")
	return st
}

// PublishEtcdView writes view under its observer's key in the
// sitecon-etcd-members ConfigMap, by server-side apply with a field
// manager of the observer's own: each node owns its key, and no write
// conflicts with another node's.
func PublishEtcdView(ctx context.Context, cs kubernetes.Interface, view EtcdView) error {
	raw, err := json.Marshal(view)
	if err != nil {
		return err
	}
	cm := corev1ac.ConfigMap(kube.EtcdMembersConfigMapName, kube.AppNamespace).
		WithData(map[string]string{view.ObservedBy: string(raw)})
	_, err = cs.CoreV1().ConfigMaps(kube.AppNamespace).Apply(ctx, cm,
		metav1.ApplyOptions{FieldManager: "sitecon-etcd-" + view.ObservedBy, Force: true})
	return err
}

// EtcdPublisher observes etcd through Access every EtcdObserveInterval and
// publishes what it sees when it changed, and at least every
// EtcdPublishInterval so that readers can tell it is current.
type EtcdPublisher struct {
	Access EtcdAccess
	Node   string
	Client kubernetes.Interface
	Log    *slog.Logger
	// Observe and Publish intervals; zero: the package's.
	ObserveEvery, PublishEvery time.Duration
	// Observe gives the view to publish; nil: ObserveEtcd through Access.
	// The agent passes the observation it already makes every
	// EtcdObserveInterval for its node report, so etcd is asked once.
	Observe func(ctx context.Context) (EtcdView, error)
}

// Run publishes until ctx ends. Failures are logged when they change and
// retried at the next observation: an etcd without quorum still lists its
// members, but its API server takes no write, and a worker never has the
// certificates (logged once, then checked quietly).
func (p *EtcdPublisher) Run(ctx context.Context) {
	observeEvery := p.ObserveEvery
	if observeEvery == 0 {
		observeEvery = EtcdObserveInterval
	}
	publishEvery := p.PublishEvery
	if publishEvery == 0 {
		publishEvery = EtcdPublishInterval
	}
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var last string
	var lastPublished time.Time
	var lastProblem string
	problem := func(err error) {
		if err.Error() != lastProblem {
			log.Warn("etcd member list not published", "err", err)
			lastProblem = err.Error()
		}
	}
	observe := p.Observe
	if observe == nil {
		observe = func(ctx context.Context) (EtcdView, error) { return ObserveEtcd(ctx, p.Access, p.Node, time.Now) }
	}
	tick := time.NewTicker(observeEvery)
	defer tick.Stop()
	for {
		view, err := observe(ctx)
		if err == nil {
			// What changed is the members and their health, not the time.
			key := view
			key.ObservedAt = time.Time{}
			raw, _ := json.Marshal(key)
			if string(raw) != last || time.Since(lastPublished) >= publishEvery {
				if err = PublishEtcdView(ctx, p.Client, view); err == nil {
					if string(raw) != last {
						log.Info("etcd member list published", "members", memberSummary(view))
					}
					last, lastPublished, lastProblem = string(raw), time.Now(), ""
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			problem(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func memberSummary(v EtcdView) string {
	var out []string
	for _, m := range v.Members {
		s := m.Name
		switch {
		case m.Learner:
			s += " (learner)"
		case !m.Healthy:
			s += " (unhealthy: " + m.Error + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}
