// Package statusserver is what a node answers its peers on its cluster
// address (config.StatusPort), and the questions they ask it there:
//   - handler.go: GET /status, "cluster:<uuid>" while this node is a
//     control-plane + etcd member; what a joiner waits for.
//   - lifeproof.go: the proof of life the failover guard challenges.
//   - caproof.go: this node vouching for its cluster's CA to joiners.
//   - membership.go, membershipkey.go: whether a server that was off is
//     still a member, judged from a fresh read, signed with the servers'
//     membership key; and the question as the returning server asks it.
//   - nodereport.go: this node's own report (its phase, k3s, its etcd
//     member's view, its clock) for the console and `sitecon status` when
//     the cluster API does not answer, to requests signed with the cluster
//     key (the reader is the package nodereport).
//
// The agent (package agent) puts these handlers on one server per bring-up.
package statusserver
