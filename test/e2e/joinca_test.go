package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// A device given a formation's join bundle (its token pins no CA: none
// existed yet) finds an impostor at the seed's address: a host that answers
// /status with the cluster's id and serves a CA of its own on 6443. Its
// agent must not start k3s (k3s would hand that host the cluster token and
// trust its CA): it holds with the reason and keeps checking.
func TestBootstrapJoinerRefusesAnImpostorSeed(t *testing.T) {
	refusesImpostorSeed(t, false)
}

// refusesImpostorSeed starts node-b's agent, a first join or (member) a
// server with its formed marker but no k3s data, against an impostor at
// the seed's address, and wants it refused before k3s starts, the
// seed's address named.
func refusesImpostorSeed(t *testing.T, member bool) {
	netns.Skip(t)
	site := sitebox.Shared(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	standin := buildStandin(t)
	hosts := netns.NewLAN(t, "imp", "b")
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	seedIP := plan.Nodes[0].JoinServerIP
	impostorAt(t, hosts[0], seedIP, plan.ClusterID)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	who, within := "node-b", 20*time.Second
	var records func(configPath string)
	if member {
		// Its formed marker, no etcd data and no CA under its k3s data.
		who, within = "node-b, a member without its CA,", 30*time.Second
		records = hasBeenMember(t, plan.ClusterID, "node-b", false)
	}
	joiner := startNodeAgent(t, ctx, &wg, site.Kubeconfig(), standin, hosts[1], plan.Nodes[1], records, nil)
	st := waitState(t, joiner, within, "impostor refused", func(st agent.State) bool {
		return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "cannot be verified") && st.Attempts >= 3
	})
	if st.K3sStarts != 0 || len(joiner.starts(t)) != 0 {
		t.Fatalf("%s started k3s against an impostor at the seed's address: %+v", who, st)
	}
	if !strings.Contains(st.LastError, seedIP) {
		t.Errorf("the reason does not name the seed's address %s: %s", seedIP, st.LastError)
	}
}

// impostorAt makes host an impostor at the seed's address seedIP: it
// answers /status with the cluster's id (anyone on the LAN can) and
// serves a CA of its own on 6443.
func impostorAt(t *testing.T, impostor *netns.Host, seedIP, clusterID string) {
	t.Helper()
	if out, err := impostor.Exec("ip", "addr", "add", seedIP+"/28", "dev", netns.Interface); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	serve := func(addr string, h http.Handler, tls bool) {
		var l net.Listener
		if err := impostor.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.Listener.Close()
		srv.Listener = l
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
	}
	serve(net.JoinHostPort(seedIP, "12346"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "cluster:"+clusterID)
	}), false)
	serve(net.JoinHostPort(seedIP, "6443"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "-----BEGIN CERTIFICATE-----\nthe impostor's CA\n-----END CERTIFICATE-----\n")
	}), true)
}

// A server that has been a member (its formed marker) restarts without its
// k3s data: lost, or not mounted yet. It has no cluster CA of its own to
// pin k3s's token to, and no etcd data to restart from, so it joins as a
// first join does: its seed's CA verified first. An impostor at the seed's
// address is refused; k3s is not started with a token that checks no CA.
func TestMemberWithoutItsCAVerifiesTheSeed(t *testing.T) {
	refusesImpostorSeed(t, true)
}
