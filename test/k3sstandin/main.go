// Command k3sstandin stands in for k3s in the agent's end-to-end tests: it
// records when and how it was started, and as a server it answers TLS on
// <node-ip>:6443 the way k3s's API server port does. In sitebox's bootstrap
// mode (sitemode.Env) it runs the node's etcd member and relays its API
// port to the site's API server instead (site.go). It is test-only; the
// product always runs the real k3s.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/test/k3sstandin/sitemode"
)

// ControllerKubeconfigEnv names the kubeconfig the stand-in writes as
// <data-dir>/agent/k3scontroller.kubeconfig, as k3s does on every node.
const ControllerKubeconfigEnv = "K3SSTANDIN_CONTROLLER_KUBECONFIG"

// NodeIdentitiesEnv names a directory of node identities, NAME/agent/*
// (sitebox's NodeDataDirs): the stand-in copies its node's into
// <data-dir>/agent (client-kubelet.crt/key, kubelet.kubeconfig), as k3s
// writes the identity it issued the node.
const NodeIdentitiesEnv = "K3SSTANDIN_NODE_IDENTITIES"

func main() {
	// Copied as a containerd shim (containerd-shim-runc-v2 ...), it stands
	// in for one: a process that outlives k3s until it is killed, as a
	// shim and its containers do.
	if strings.HasPrefix(filepath.Base(os.Args[0]), "containerd-shim") {
		for {
			time.Sleep(time.Hour)
		}
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "k3sstandin:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: k3sstandin server|agent [--config FILE] [--data-dir DIR]")
	}
	sub := args[0]
	config, dataDir := "/etc/rancher/k3s/config.yaml", "/var/lib/rancher/k3s"
	for i := 1; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--config":
			config = args[i+1]
		case "--data-dir":
			dataDir = args[i+1]
		}
	}
	settings := map[string]any{}
	files, _ := filepath.Glob(config + ".d/*.yaml")
	for _, f := range append([]string{config}, files...) {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for k, v := range m {
			settings[k] = v
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	// Whether k3s found etcd data of its own at its start: cluster-init
	// over existing data would be a second cluster's (tests read it).
	etcdData := "absent"
	if _, err := os.Stat(filepath.Join(dataDir, "server", "db", "etcd", "member")); err == nil {
		etcdData = "present"
	}
	record := fmt.Sprintf("%s %s keys=%s etcd-data=%s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "), strings.Join(keys, ","), etcdData)
	f, err := os.OpenFile(filepath.Join(dataDir, "standin-starts"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, _ = f.WriteString(record)
	f.Close()

	// Like k3s on every node, write the controller kubeconfig it got from
	// the server (here: the site's k3s-controller identity, when given).
	if src := os.Getenv(ControllerKubeconfigEnv); src != "" {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dataDir, "agent"), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dataDir, "agent", "k3scontroller.kubeconfig"), data, 0o600); err != nil {
			return err
		}
	}
	if src := os.Getenv(NodeIdentitiesEnv); src != "" {
		name, _ := settings["node-name"].(string)
		if err := copyNodeIdentity(filepath.Join(src, name, "agent"), filepath.Join(dataDir, "agent")); err != nil {
			return err
		}
	}
	if conf := os.Getenv(sitemode.Env); conf != "" {
		ip, _ := settings["node-ip"].(string)
		node, err := runSiteNode(conf, sub, dataDir, ip)
		if err != nil {
			return err
		}
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
		select {
		case <-stop:
			node.stop()
			return nil
		case <-node.exited:
			return fmt.Errorf("the etcd member exited")
		}
	}
	// The cluster's CA, made, fetched or kept as k3s does (ca.go).
	ca, err := loadOrMakeCA(sub, dataDir, settings)
	if err != nil {
		return err
	}
	if sub == "server" {
		ip, _ := settings["node-ip"].(string)
		cert, err := ca.servingCert(ip)
		if err != nil {
			return err
		}
		l, err := tls.Listen("tcp", net.JoinHostPort(ip, "6443"), &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			return err
		}
		token, _ := settings["token"].(string)
		go func() { _ = http.Serve(l, ca.apiHandler(token)) }()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	return nil
}

// copyNodeIdentity copies the files of a node's identity from src to dst.
func copyNodeIdentity(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("node identity: %w", err)
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "k3s-standin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
