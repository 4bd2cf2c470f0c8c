package bundle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
)

// NodeAddress is a node and its cluster address, where its agent answers.
type NodeAddress struct {
	Node    string
	Address string
}

// NodeAddresses are the nodes' InternalIPs, as their Node objects say;
// a node without one is left out (it has no address to ask).
func NodeAddresses(nodes []corev1.Node) []NodeAddress {
	var out []NodeAddress
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				out = append(out, NodeAddress{Node: n.Name, Address: a.Address})
				break
			}
		}
	}
	return out
}

// AgentAnswer is what a node's agent answered on its cluster address.
type AgentAnswer struct {
	Node string    `json:"node"`
	URL  string    `json:"url"`
	At   time.Time `json:"at"`
	// AnsweredIn is how long the answer took.
	AnsweredIn string `json:"answeredIn"`
	HTTPStatus int    `json:"httpStatus"`
	// Status is its body: "cluster:<id>" while the node is a control-plane
	// and etcd member, empty otherwise.
	Status string `json:"status"`
	// Meaning says what that answer means.
	Meaning string `json:"meaning"`
}

// maxStatusBytes bounds what is read of an answer: /status is a line.
const maxStatusBytes = 64 << 10

// agentSources ask each node's agent GET /status on its cluster address,
// each within deadline: a node that does not answer in time is missing,
// and the others still arrive.
func agentSources(nodes []NodeAddress, deadline time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error)) []Source {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true, Proxy: nil}}
	var out []Source
	for _, n := range nodes {
		url := "http://" + net.JoinHostPort(n.Address, strconv.Itoa(config.StatusPort)) + "/status"
		out = append(out, Source{Name: fmt.Sprintf("agent of %s (%s)", n.Node, url), Deadline: deadline,
			Collect: func(ctx context.Context) ([]Item, []Missing, error) {
				a, err := askAgent(ctx, client, n.Node, url)
				if err != nil {
					return nil, nil, err
				}
				data, err := json.MarshalIndent(a, "", "  ")
				if err != nil {
					return nil, nil, err
				}
				return []Item{{Name: "agents/" + n.Node + ".json", Source: url, Data: data}}, nil, nil
			}})
	}
	return out
}

func askAgent(ctx context.Context, client *http.Client, node, url string) (AgentAnswer, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return AgentAnswer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return AgentAnswer{}, fmt.Errorf("its agent did not answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	if err != nil {
		return AgentAnswer{}, fmt.Errorf("its agent's answer broke off: %w", err)
	}
	a := AgentAnswer{Node: node, URL: url, At: start.UTC(), AnsweredIn: time.Since(start).Round(time.Millisecond).String(),
		HTTPStatus: resp.StatusCode, Status: string(body)}
	switch {
	case resp.StatusCode != http.StatusOK:
		a.Meaning = "not an answer of sitecon's agent (a sitecon agent answers 200)"
	case len(body) == 0:
		a.Meaning = "its agent runs; the node is not a control-plane and etcd member right now (a worker, or its API server does not answer)"
	default:
		a.Meaning = "its agent runs; the node is a control-plane and etcd member of that cluster"
	}
	return a, nil
}
