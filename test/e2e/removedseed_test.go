package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The seed device was powered off while the others took it out of the
// cluster (`sitecon node remove`, after `sitecon seed` moved the seed to
// node-r: its Node deleted, k3s dropped its etcd member, the cluster record
// no longer lists it), or while a new device took its name (`node replace`
// with the same name: a Node of that name with another device's UUID). It
// powers back on with its etcd data, so it has been a member and would
// start k3s at once, and k3s would restart it as a new single-node cluster
// (k3s-io/k3s#13623). Its agent asks its peers on the cluster network
// first; their proven answer "removed" holds it: no k3s, no cluster
// address, a clear message, and a tombstone that holds it again at the
// next power-on, with the peers silent. A stranger's unproven "removed" on
// a peer's address is ignored: k3s starts. Only servers sign a verdict,
// with a key from the server CA key they all hold: peers that hold the
// token but not that key (what a worker holds) prove nothing however true
// their "removed", and a seed without the key checks nothing and starts.
func TestRemovedSeedHoldsAtPowerOn(t *testing.T) {
	netns.Skip(t)
	for _, c := range []struct {
		name string
		// replaced: a new device registered the seed's name.
		replaced bool
		// stranger: no peer agent runs; something else answers at
		// node-r's address that node-q was removed.
		stranger bool
		// silent: nobody answers, as when the whole site powers on.
		silent bool
		// handedOn: `node replace node-q node-n` gave node-q's address
		// to a new device, which holds it.
		handedOn bool
		// peersWithoutCAKey: the peers hold the token but not the server
		// CA key, as a worker does; they judge "removed" all the same.
		peersWithoutCAKey bool
		// seedWithoutCAKey: node-q lost its server CA key.
		seedWithoutCAKey bool
	}{
		{name: "removed"},
		{name: "replaced by a device of the same name", replaced: true},
		{name: "replaced by a device at its address", handedOn: true},
		{name: "a stranger says removed", stranger: true},
		{name: "nobody answers", silent: true},
		{name: "peers that hold what a worker holds say removed", peersWithoutCAKey: true},
		{name: "the seed cannot check an answer", seedWithoutCAKey: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			site := sitebox.Shared(t)
			cs := clientset(t, site)
			devices := newStandinSite(t, site.Kubeconfig(), []string{"q", "r", "s", "n"}, "node-q", "node-r", "node-s")
			hosts, plan := devices.hosts, devices.plan
			putClusterRecordAside(t, cs)
			listed := "node-r,node-s"
			switch {
			case c.replaced:
				listed = "node-q,node-r,node-s"
			case c.handedOn:
				listed = "node-n,node-r,node-s"
			}
			record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.ClusterConfigMapName, Namespace: kube.AppNamespace},
				Data: map[string]string{kube.ClusterKeyName: "site1", kube.ClusterKeyID: plan.ClusterID,
					kube.ClusterKeyJoinServerIP: "10.244.244.2", kube.ClusterKeySeedNode: "node-r", kube.ClusterKeyNodes: listed}}
			if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(t.Context(), record, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			servers := map[string]string{"node-r": "10.244.244.2", "node-s": "10.244.244.3"}
			switch {
			case c.replaced:
				// node replace hands the old device's address on.
				servers["node-q"] = "10.244.244.1"
			case c.handedOn:
				servers["node-n"] = "10.244.244.1"
				// The new device holds the address on the LAN.
				if err := hosts[3].Do(func() error {
					_, err := netcfg.EnsureClusterAddress(netns.Interface, netip.MustParsePrefix("10.244.244.1/28"), netip.Prefix{})
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			for name, ip := range servers {
				agentNodeAt(t, cs, name, ip)
				if err := setServerRoles(t.Context(), cs, name, true); err != nil {
					t.Fatal(err)
				}
			}
			if c.replaced {
				// The new device's Node: the same name, its own device UUID.
				patch := `{"metadata":{"labels":{"` + kube.LabelNodeUUID + `":"0b5e0000-0000-4000-8000-00000000a11e"}}}`
				if _, err := cs.CoreV1().Nodes().Patch(t.Context(), "node-q", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			// The servers' CA, kept as k3s keeps it on every server.
			caCrt, caKey := newServerCA(t)
			var peers []*nodeAgent
			var asked *atomic.Int32
			switch {
			case c.silent:
			case c.stranger:
				asked = forgeRemovedAnswer(t, ctx, hosts[1], "10.244.244.2/28", plan.ClusterID)
			default:
				// The members' agents run, their k3s started, their links
				// synced: each can judge a membership (asked about node-r,
				// it answers "member").
				for i := 1; i <= 2; i++ {
					prepare := hasBeenMember(t, plan.ClusterID, plan.Nodes[i].NodeName, true)
					if !c.peersWithoutCAKey {
						prepare = keepsServerCA(t, prepare, caCrt, caKey)
					}
					peers = append(peers, devices.start(t, ctx, &wg, i, i, prepare, nil))
				}
				key, err := config.NewMembershipKey(plan.ClusterID, caKey)
				if err != nil {
					t.Fatal(err)
				}
				ask := statusserver.MembershipQuery{Key: key, Node: "node-r", UUID: plan.Nodes[1].NodeUUID, Dial: hosts[1].DialContext}
				for _, ip := range []string{"10.244.244.2", "10.244.244.3"} {
					until(t, 30*time.Second, ip+" judges memberships", func() ([]statusserver.PeerAnswer, bool) {
						answers := ask.Ask(ctx, []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr(ip), 12346)})
						if c.peersWithoutCAKey {
							// Up, and refusing to sign: only servers may.
							return answers, len(answers) == 1 && answers[0].Err != nil && strings.Contains(answers[0].Err.Error(), "answered 503")
						}
						return answers, len(answers) == 1 && answers[0].Answer != nil && answers[0].Answer.Verdict == config.VerdictMember
					}, func(answers []statusserver.PeerAnswer) string {
						return fmt.Sprintf("answers %+v; node-r %+v; node-s %+v", answers, peers[0].agent.State(), peers[1].agent.State())
					})
				}
			}

			logPath := filepath.Join(t.TempDir(), "agent.log")
			logFile, err := os.Create(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer logFile.Close()
			t.Cleanup(func() {
				if t.Failed() {
					data, _ := os.ReadFile(logPath)
					t.Logf("node-q's agent log:\n%s", data)
				}
			})
			// Every address node-q's interface takes, however briefly.
			taken := watchAddresses(t, ctx, hosts[0])
			// The old seed powers on: its config, its etcd data, its formed marker.
			on := time.Now()
			seedPrepare := hasBeenMember(t, plan.ClusterID, "node-q", true)
			if !c.seedWithoutCAKey {
				seedPrepare = keepsServerCA(t, seedPrepare, caCrt, caKey)
			}
			seed := devices.start(t, ctx, &wg, 0, 0, seedPrepare, func(o *agent.Options) {
				o.Log = slog.New(slog.NewTextHandler(logFile, nil))
			})
			hasAddress := func() bool {
				var have []netip.Prefix
				if err := hosts[0].Do(func() (err error) { have, err = netcfg.InterfacePrefixes(netns.Interface); return err }); err != nil {
					t.Fatal(err)
				}
				return slices.Contains(have, netip.MustParsePrefix("10.244.244.1/28"))
			}

			if c.stranger || c.silent || c.peersWithoutCAKey || c.seedWithoutCAKey {
				// Silence and an unproven word hold nothing: k3s starts as
				// after a power cut, once the question's bound has passed.
				starts := seed.waitK3sStarted(t)
				if asked != nil && asked.Load() == 0 {
					t.Errorf("node-q never asked the stranger at node-r's address: its word was not put to the test")
				}
				data, _ := os.ReadFile(logPath)
				switch {
				case c.peersWithoutCAKey && !strings.Contains(string(data), "answered 503"):
					t.Errorf("node-q's log shows no peer refusing to sign: their word was not put to the test")
				case c.seedWithoutCAKey && !strings.Contains(string(data), "cannot check a removal"):
					t.Errorf("node-q's log does not say it cannot check a removal")
				}
				took := starts[0].Sub(on)
				t.Logf("%s: k3s started %s after power-on (the question's bound: %s)", c.name, took.Round(10*time.Millisecond), statusserver.DefaultMembershipTimeout)
				if took > statusserver.DefaultMembershipTimeout+2*time.Second {
					t.Errorf("k3s started %s after power-on: the question held it past its bound %s", took, statusserver.DefaultMembershipTimeout)
				}
				return
			}
			if c.handedOn {
				// It cannot ask anyone without an address, and must not
				// take the new device's: it holds, saying why.
				st := waitState(t, seed, 20*time.Second, "holds: its address is another device's", func(st agent.State) bool {
					return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "in use by another device") && st.Attempts >= 2
				})
				t.Logf("held %s after power-on: %s", time.Since(on).Round(10*time.Millisecond), st.LastError)
				if n := len(seed.starts(t)); n != 0 {
					t.Errorf("the replaced seed started k3s (%d starts)", n)
				}
				if got := taken(); slices.Contains(got, netip.MustParsePrefix("10.244.244.1/28")) {
					t.Errorf("the replaced seed took the new device's address (addresses it added: %v)", got)
				}
				return
			}
			st := waitState(t, seed, 20*time.Second, "holds: removed from its cluster", func(st agent.State) bool {
				return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "removed from cluster") && !st.ClusterIPReady
			})
			t.Logf("held %s after power-on: %s", time.Since(on).Round(10*time.Millisecond), st.LastError)
			if !strings.Contains(st.LastError, "sitecon form --join") {
				t.Errorf("the hold does not say the way back: %q", st.LastError)
			}
			if n := len(seed.starts(t)); n != 0 || st.K3sStarts != 0 {
				t.Errorf("the removed seed started k3s (%d starts recorded, k3sStarts %d): a second cluster", n, st.K3sStarts)
			}
			if data, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(data), "removed from cluster") {
				t.Errorf("the log does not say why it holds (%v)", err)
			}
			if hasAddress() {
				t.Errorf("the removed seed keeps its old cluster address")
			}

			// Powered on again with the peers off: their silence starts
			// nothing, the tombstone holds.
			cancel()
			wg.Wait()
			ctx, cancel = context.WithCancel(t.Context())
			defer cancel()
			seed.run(t, ctx, &wg)
			waitState(t, seed, 20*time.Second, "holds again with the peers off", func(st agent.State) bool {
				return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "removed from cluster")
			})
			if n := len(seed.starts(t)); n != 0 {
				t.Errorf("the removed seed started k3s at its second power-on (%d starts)", n)
			}
			if hasAddress() {
				t.Errorf("the removed seed took its old cluster address again")
			}
		})
	}
}

// forgeRemovedAnswer puts addr on h's cluster interface and serves there,
// on the status port, every path's answer a removed node would fear: a
// verdict "removed" that no agent of the cluster signed. It counts the
// membership questions it was asked.
func forgeRemovedAnswer(t *testing.T, ctx context.Context, h *netns.Host, addr, clusterID string) *atomic.Int32 {
	t.Helper()
	p := netip.MustParsePrefix(addr)
	if err := h.Do(func() error { _, err := netcfg.EnsureClusterAddress(netns.Interface, p, netip.Prefix{}); return err }); err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := h.Do(func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(p.Addr().String(), "12346"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == config.MembershipPath {
			asked.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"cluster_id":%q,"answerer":"node-r","node":%q,"verdict":"removed","evidence":"forged","proof":"%s"}`,
			clusterID, r.URL.Query().Get("node"), strings.Repeat("ab", 32))
	})}
	go func() { _ = srv.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	t.Cleanup(func() { _ = srv.Close() })
	return &asked
}

// watchAddresses records every address h's interfaces take from now on
// (netlink's address notifications, so that one taken and dropped at once
// is seen too); the returned function reads the record.
func watchAddresses(t *testing.T, ctx context.Context, h *netns.Host) func() []netip.Prefix {
	t.Helper()
	updates := make(chan netlink.AddrUpdate, 64)
	if err := h.Do(func() error { return netlink.AddrSubscribe(updates, ctx.Done()) }); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		added []netip.Prefix
	)
	go func() {
		for u := range updates {
			if p, ok := netip.AddrFromSlice(u.LinkAddress.IP); ok && u.NewAddr {
				ones, _ := u.LinkAddress.Mask.Size()
				mu.Lock()
				added = append(added, netip.PrefixFrom(p.Unmap(), ones))
				mu.Unlock()
			}
		}
	}()
	return func() []netip.Prefix {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(added)
	}
}

// newServerCA is a cluster's server CA (certificate and key, PEM), as the
// first k3s server makes it.
func newServerCA(t *testing.T) (crtPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "k3s-server-ca@test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// keepsServerCA adds to prepare what every k3s server keeps that has been
// a member: the server CA's certificate and key, where k3s keeps them.
func keepsServerCA(t *testing.T, prepare func(configPath string), crtPEM, keyPEM []byte) func(configPath string) {
	return func(configPath string) {
		t.Helper()
		prepare(configPath)
		tls := filepath.Join(filepath.Dir(configPath), "k3s-data", "server", "tls")
		if err := os.MkdirAll(tls, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"server-ca.crt": crtPEM, "server-ca.key": keyPEM} {
			if err := os.WriteFile(filepath.Join(tls, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}
