// Package agent is the node agent (`sitecon agent`) and its bootstrap: it
// decides the node's role, writes k3s's config files, puts the cluster
// address on the cluster interface, waits for the seed, supervises k3s,
// answers /status on the cluster address, and starts the apps part once
// the node is in the cluster.
//
// Where things are:
//   - agent.go: the Agent, its options and the state it publishes; Run.
//   - applyconfig.go: loading the config, a rejected one, and leaving, as
//     agent/configwatch decides poll by poll.
//   - bringup.go: one bring-up of an applied config (address, /status,
//     k3s config, the seed wait, k3s).
//   - clusterlink.go: the link to the running cluster (snapshot, the apps
//     part, the stats leader, the seed follower, join-bundle clean-up).
//   - initonce.go: the seed in effect for this bring-up, and the rule that
//     a cluster is initialised once, applied.
//   - statusserve.go: the keys of the /status server, and the one an agent
//     run against a cluster it did not form serves.
//   - removal.go: a node removed from its cluster holds.
//   - membercheck.go: a server that has been a member asks its peers
//     before starting k3s, and answers them from its cluster link.
//   - endpoints.go: what the agent answers on its local socket.
//
// The parts it is built from are packages of their own: agent/config (the
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
