// Package agent is the node agent (`sitecon agent`) and its bootstrap: it
// decides the node's role, writes k3s's config files, puts the cluster
// address on the cluster interface, waits for the seed, supervises k3s,
// answers /status on the cluster address, and starts the apps part once
// the node is in the cluster.
//
// Where things are:
//   - agent.go: the Agent, its options and the state it publishes; Run.
//   - applyconfig.go: loading the config, a rejected one, and leaving, as
//     agent/configwatch decides.
//   - bringuphost.go: the Agent as its bring-ups see it (bringup.Host).
//   - clusterwork.go: the work that needs the cluster (the stats leader,
//     etcd's member list, the apps part), and an agent run against a
//     cluster it did not form (--no-bootstrap).
//   - statusserve.go: the proof-of-life keys, and the /status server an
//     agent run against a cluster it did not form serves.
//   - endpoints.go: what the agent answers on its local socket.
//   - gcpercent.go: the Go collector's target the agent runs at.
//
// The parts it is built from are packages of their own: agent/bringup (one
// bring-up of an applied config, step by step: address, /status, the seed
// wait, k3s, and its link to the cluster once k3s runs), agent/config (the
// config file, its validation, the token), agent/k3s (the node's role, k3s's
// config files, the supervised k3s process), agent/formation (forming and
// joining a cluster, the seed, join bundles and join info, the node's
// records), agent/statusserver (what a node answers its peers on the
// cluster address: /status, the proofs, the membership question),
// agent/configwatch (what a missing or bad config file and the leave
// request mean, poll by poll), agent/apps (config files for apps and volumes, DNId gating,
// placement, failover, the timeline, the stats leader, metrics) and
// agent/localapi (the socket's server and client).
package agent
